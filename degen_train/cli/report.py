"""degen-report SWEEP_DIR [RUN_DIR ...] [--out DIR]: tables (CSV, markdown, HTML) and figures of a sweep's runs."""

from __future__ import annotations

import argparse
import base64
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd

from degen_train.core.handed_files import printable
from degen_train.core.io import DiskFull, atomic_write_bytes, atomic_write_text, disk_full_error, is_disk_full
from degen_train.core.paths import writable_folder
from degen_train.report.branches import branch_table
from degen_train.report.figures import cone_images, loss_curves, metric_against_swept, tradeoff
from degen_train.report.rankings import best_settings
from degen_train.report.runs_table import SWEPT, collect, find_runs, headline_columns, seed_groups

log = logging.getLogger("degen_train.report")
PLOTTED = ("val_objective_loss", "val_perplexity", "isotropy/embedding/mean_cosine", "isotropy/embedding/isoscore")
# Marks on <body> how many images decoded and how many tables the page has (read by the browser test).
RENDER_CHECK = (
    "<script>addEventListener('load',()=>{const i=[...document.images];"
    "document.body.dataset.images=i.filter(x=>x.complete&&x.naturalWidth>0).length+'/'+i.length;"
    "document.body.dataset.tables=document.querySelectorAll('table').length})</script>"
)
STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
    "td,th{border:1px solid #ccc;padding:3px 6px}img{margin:6px}figure{display:inline-block}"
)


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
MARKDOWN_SPECIALS = str.maketrans({c: "\\" + c for c in "\\`[]|"})


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as people read it: swept columns without their prefix, no file paths."""
    return frame.drop(columns=["path"], errors="ignore").rename(columns=lambda c: str(c).removeprefix(SWEPT))


def md_text(text: object) -> str:
    """Text from a handed-over folder as report.md shows it, never as markup: control characters escaped, HTML's
    ``<``, ``>`` and ``&`` as entities (a Markdown viewer that passes HTML, MkDocs among them, would run a
    ``<script>``), Markdown's link, image, code and table characters ([ ] ` |) escaped."""
    return escape(printable(text), quote=False).translate(MARKDOWN_SPECIALS)


def md_table(frame: pd.DataFrame) -> str:
    """``shown(frame)`` as a Markdown table, every text cell and column name through md_text."""
    table = shown(frame)
    table = table.rename(columns=md_text)
    for column in table.columns:  # pandas 3 keeps text as its own dtype, not object: every column is looked at
        if not pd.api.types.is_numeric_dtype(table[column]):
            table[column] = table[column].map(lambda v: md_text(v) if isinstance(v, str) else v)
    return table.to_markdown(index=False, floatfmt=".4g")


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``shown(frame)`` for a spreadsheet: a text cell or column name that a spreadsheet would run as a formula
    (starting with = + - @, a tab or a carriage return) gets a leading apostrophe, as OWASP's CSV-injection rule
    says; numbers stay numbers."""
    def neutral(value: object) -> object:
        return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value

    table = shown(frame).rename(columns=neutral)
    for column in table.columns:
        if not pd.api.types.is_numeric_dtype(table[column]):
            table[column] = table[column].map(neutral)
    return table


@dataclass(frozen=True)
class AnalysisCaps:
    """What a report's own analyses cost (issue 56.3: six tiny decoders' analyses, at degen-analyze's 1,000 sentences
    and 200 greedy continuations, took 20 minutes, more than their sweep): the sentences, the greedy continuations
    of a decoder's repetition probe, and the parts left out (model_analysis.SKIPPABLE)."""

    sentences: int = 200
    generation_prompts: int = 50
    skip: tuple[str, ...] = ()


def analyze_missing(runs: Sequence[Path], *, trust_config: bool = False, caps: AnalysisCaps | None = None,
                    timing: dict[str, float] | None = None) -> list[str]:  # fmt: skip
    """Run degen-analyze on every finished run with an export and no analysis yet (kept: a rerun is free), at the
    report's caps; ``timing`` gets the runs analysed and the seconds they took."""
    from degen_train.evaluation.model_analysis import analyze

    caps = caps or AnalysisCaps()
    start = time.perf_counter()
    problems = []
    analysed = [os.path.lexists(r / "analysis" / "metrics.json") for r in runs]
    todo = [r for r, done in zip(runs, analysed, strict=True) if (r / "hf" / "config.json").is_file() and not done]
    for index, run in enumerate(todo, 1):
        log.info("analysing %s (%d of %d)", run, index, len(todo))
        try:  # a run this user trained here reads the corpus its config names; a handed-over one only its own files
            analyze(run, trust_config=trust_config, max_sentences=caps.sentences, skip=caps.skip,
                    generation_prompts=caps.generation_prompts)  # fmt: skip
        except Exception as error:  # noqa: BLE001 - one run's analysis must not stop the report
            problems.append(printable(f"{run.name}: no analysis: {type(error).__name__}: {error}"))
            log.warning(problems[-1])
    if timing is not None:
        timing.update(runs=len(todo), reused=sum(analysed), seconds=time.perf_counter() - start)
    return problems


def report(
    paths: Sequence[str | Path], *, out: str | Path | None = None, run_analysis: bool = True,
    trust_config: bool = False, caps: AnalysisCaps | None = None,
) -> dict[str, Any]:  # fmt: skip
    caps = caps or AnalysisCaps()
    from degen_train.evaluation.model_analysis import SKIPPABLE

    unknown = sorted(set(caps.skip) - set(SKIPPABLE))
    if unknown or caps.sentences < 1 or caps.generation_prompts < 1:  # before any run is read or analysed
        raise ValueError(f"--analysis-skip {','.join(unknown)}: not a part of an analysis; choose from "
                         f"{', '.join(SKIPPABLE)}" if unknown else f"--analysis-sentences={caps.sentences} and "
                         f"--generation-prompts={caps.generation_prompts} must each be at least 1")  # fmt: skip
    runs = find_runs(paths)
    out_dir = writable_folder(Path(out) if out else Path(paths[0]) / "report", "--out")
    try:
        return _written_report(paths, runs, out_dir, run_analysis=run_analysis, trust_config=trust_config, caps=caps)
    except OSError as error:  # a full disk, a file-size limit, a quota: one line naming the folder
        if isinstance(error, DiskFull) or not is_disk_full(error):
            raise
        raise disk_full_error(out_dir, "give --out a folder on another disk", error) from error


def _written_report(
    paths: Sequence[str | Path], runs: list[Path], out_dir: Path, *, run_analysis: bool, trust_config: bool,
    caps: AnalysisCaps,
) -> dict[str, Any]:  # fmt: skip
    timing: dict[str, float] = {"runs": 0, "reused": 0, "seconds": 0.0}
    analysis_problems = (
        analyze_missing(runs, trust_config=trust_config, caps=caps, timing=timing) if run_analysis else []
    )
    table, common = collect(runs)
    # a run whose records do not fit their schema is listed (the others are reported), and so is a figure's file
    unreadable = [f"{row['run']}: unreadable: {row['error']}" for _, row in table.iterrows()
                  if row["status"] == "unreadable"]  # fmt: skip
    problems = [*analysis_problems, *unreadable]
    grouped = seed_groups(table)
    best = best_settings(grouped, table)
    atomic_write_text(out_dir / "runs.csv", csv_safe(table).to_csv(index=False))
    if not grouped.empty:
        atomic_write_text(out_dir / "seeds.csv", csv_safe(grouped).to_csv(index=False))
    settings = ", ".join(f"{k}={v}" for k, v in sorted(common.items())) or "none"
    headline = grouped if not grouped.empty else table
    headline = headline[headline_columns(headline.columns)]
    plotted = [m for m in PLOTTED if m in table and table[m].notna().any()]
    images = {
        "train/loss per run": loss_curves(table, problems=problems),
        "validation loss of the objective's own terms per run": loss_curves(table, "val", problems),
        "val_perplexity against embedding IsoScore (one point per setting)": tradeoff(
            grouped, table, x="isotropy/embedding/isoscore", y="val_perplexity"
        ),
        **metric_against_swept(table, plotted),
    }
    if "glue/average" in table and table["glue/average"].notna().any():  # the downstream side of the trade-off
        images["GLUE average (after fine-tuning) against embedding IsoScore (one point per setting)"] = tradeoff(
            grouped, table, x="isotropy/embedding/isoscore", y="glue/average"
        )
    cones = cone_images(table, problems)
    figures = save_figures(out_dir / "figures", {**{k: v for k, v in images.items() if v}, **cones})
    text = [f"# Sweep report\n\nCommon overrides: {md_text(settings)}\n", *(f"- {md_text(p)}" for p in problems)]
    alike = ("Losses are ranked among runs trained on the same objective and perplexities among runs whose perplexity "
             "is of the same head (the columns objective and val_perplexity_of); where objectives differ, a loss every "
             "run has is ranked too.\n")  # fmt: skip
    text += ["## Best setting per metric\n", alike, *(f"- {md_text(line)}" for line in best), ""] if best else []
    text += ["## Headline\n", md_table(headline), ""]
    branches = branch_table(table, [Path(p) for p in paths])  # cooldowns branched with branch_from=RUN@STEP
    for heading, frame in branches:
        text += [f"## Branches of {md_text(heading)}\n", md_table(frame), ""]
    text += ["## Figures\n", *(f"![{md_text(name)}]({path})\n" for name, path in figures.items())]
    text += ["## All runs, every column\n", md_table(table), ""]
    if not grouped.empty:
        text += ["## Mean ± std over seeds, every column\n", md_table(grouped)]
    atomic_write_text(out_dir / "report.md", "\n".join(text) + "\n")
    page = html_page(table, grouped, headline, settings, best, images, cones, branches)
    atomic_write_text(out_dir / "report.html", page)
    return {"rows": table.to_dict("records"), "grouped": grouped.to_dict("records"), "out": str(out_dir),
            "analysis_problems": analysis_problems, "unreadable": problems[len(analysis_problems):],
            "analysis_timing": timing,
            "branches": {heading: frame.to_dict("records") for heading, frame in branches}}  # fmt: skip


def save_figures(folder: Path, images: dict[str, str]) -> dict[str, str]:
    """Each base64 PNG as folder/NN-name.png; {caption: path relative to the report} for report.md's links."""
    folder.mkdir(parents=True, exist_ok=True)
    saved = {}
    for index, (name, data) in enumerate(images.items(), 1):
        slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:60]
        path = folder / f"{index:02d}-{slug}.png"
        atomic_write_bytes(path, base64.b64decode(data))
        saved[name] = f"{folder.name}/{path.name}"
    return saved


def html_page(
    table: pd.DataFrame,
    grouped: pd.DataFrame,
    headline: pd.DataFrame,
    settings: str,
    best: list[str],
    images: dict,
    cones: dict,
    branches: list[tuple[str, pd.DataFrame]] = (),
) -> str:
    html = [
        f"<!doctype html><meta charset='utf-8'><title>degen_train sweep report</title><style>{STYLE}</style>",
        RENDER_CHECK,
        "<h1>Sweep report</h1>",
        f"<p>Common overrides: {escape(settings)}</p>",
    ]
    if best:
        html += ["<h2>Best setting per metric</h2><ul>", *(f"<li>{escape(line)}</li>" for line in best), "</ul>"]
    html += ["<h2>Headline</h2>", html_table(headline)]
    for heading, frame in branches:
        html += [f"<h2>Branches of {escape(heading)}</h2>", html_table(frame)]
    html.append("<h2>Plots</h2>")
    html += [
        f"<figure><img src='data:image/png;base64,{data}'><figcaption>{escape(name)}</figcaption></figure>"
        for name, data in images.items()
        if data
    ]
    if cones:
        html.append("<h2>Cone plots</h2>")
        html += [
            f"<figure><img width=480 src='data:image/png;base64,{d}'><figcaption>{escape(n)}</figcaption></figure>"
            for n, d in cones.items()
        ]
    html += ["<h2>All runs, every column</h2>", html_table(table)]
    if not grouped.empty:
        html += ["<h2>Mean ± std over seeds, every column</h2>", html_table(grouped)]
    return "\n".join(html)


def html_table(frame: pd.DataFrame) -> str:
    """A wide table scrolls inside its own box instead of widening the page."""
    table = shown(frame).to_html(index=False, na_rep="", float_format="{:.4g}".format)
    return f"<div style='overflow-x:auto'>{table}</div>"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="degen-report", description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("paths", nargs="+", help="a sweep directory, or run directories")
    parser.add_argument("--out", help="output directory (default: FIRST_PATH/report)")
    parser.add_argument(
        "--no-analyze", action="store_true", help="do not run degen-analyze on exported runs that lack an analysis"
    )
    parser.add_argument(
        "--trust-config", action="store_true", help="analyses read the corpus a run's config names even outside it"
    )
    caps = AnalysisCaps()
    parser.add_argument("--analysis-sentences", type=int, default=caps.sentences,
                        help="sentences each analysis encodes (degen-analyze's own default is 1000)")  # fmt: skip
    parser.add_argument("--generation-prompts", type=int, default=caps.generation_prompts,
                        help="a decoder's greedy continuations in its analysis (degen-analyze's: 200)")  # fmt: skip
    parser.add_argument("--analysis-skip", default="", help="comma-separated parts each analysis leaves out, of "
                        "outliers, generation, positional, negative_direction, figures")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    caps = AnalysisCaps(sentences=args.analysis_sentences, generation_prompts=args.generation_prompts,
                        skip=tuple(p for p in args.analysis_skip.split(",") if p))  # fmt: skip
    try:
        result = report(args.paths, out=args.out, run_analysis=not args.no_analyze, trust_config=args.trust_config,
                        caps=caps)  # fmt: skip
    except (ValueError, FileNotFoundError, DiskFull) as error:
        parser.exit(2, f"degen-report: error: {printable(error)}\n")
    failed = sum(r["status"] == "failed" for r in result["rows"])
    missing, unreadable = result["analysis_problems"], result["unreadable"]
    said = f", {len(missing)} without an analysis" if missing else ""
    said += f", {len(unreadable)} files unreadable" if unreadable else ""
    timing = result["analysis_timing"]
    if timing["runs"] or timing["reused"]:
        print(f"analyses: {timing['runs']} made in {timing['seconds']:.0f} s ({caps.sentences} sentences, "
              f"{caps.generation_prompts} continuations of a decoder"
              f"{', without ' + ', '.join(caps.skip) if caps.skip else ''}), {timing['reused']} reused")  # fmt: skip
    print(f"{len(result['rows'])} runs ({failed} failed){said}: {result['out']}/report.md, runs.csv, report.html")
    if missing or unreadable:  # a report without the analyses or files it should hold is not a success
        print("\n".join(f"  {line}" for line in [*missing, *unreadable]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
