"""degen-report SWEEP_DIR [RUN_DIR ...] [--out DIR]: tables (CSV, markdown, HTML) and figures of a sweep's runs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from degen_train.core.handed_files import printable
from degen_train.core.io import DiskFull, atomic_write_text, disk_full_error, is_disk_full
from degen_train.core.paths import writable_folder
from degen_train.report import verdict_page
from degen_train.report.branches import branch_table
from degen_train.report.comparisons import comparisons, rows_for_table, settings_of
from degen_train.report.figures import cone_images, forest_plots, loss_curves, metric_against_swept, tradeoff
from degen_train.report.measures import FEWEST_KEPT_TOKENS
from degen_train.report.rankings import best_settings
from degen_train.report.runs_table import collect, find_runs, headline_columns, seed_groups
from degen_train.report.text import csv_safe, html_page, md_table, md_text, not_reported, save_figures

log = logging.getLogger("degen_train.report")
MOST_KEPT_TOKENS = 100_000  # --fewest-kept-tokens' bound: longer than any continuation a model here writes
PLOTTED = ("val_objective_loss", "val_perplexity", "isotropy/embedding/mean_cosine", "isotropy/embedding/isoscore")
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
    measured_at_end = 0
    for index, run in enumerate(todo, 1):
        log.info("analysing %s (%d of %d)", run, index, len(todo))
        skip = caps.skip
        if "generation" not in skip and _generated_at_its_end(run):
            skip, measured_at_end = (*skip, "generation"), measured_at_end + 1
        try:  # a run this user trained here reads the corpus its config names; a handed-over one only its own files
            analyze(run, trust_config=trust_config, max_sentences=caps.sentences, skip=skip,
                    generation_prompts=caps.generation_prompts)  # fmt: skip
        except Exception as error:  # noqa: BLE001 - one run's analysis must not stop the report
            problems.append(printable(f"{run.name}: no analysis: {type(error).__name__}: {error}"))
            log.warning(problems[-1])
    if timing is not None:
        timing.update(runs=len(todo), reused=sum(analysed), seconds=time.perf_counter() - start,
                      generated_at_end=measured_at_end)  # fmt: skip
    return problems


def _generated_at_its_end(run: Path) -> bool:
    """Whether the run measured its greedy continuations at its end (eval.generate, summary.json's
    eval.generation): the report shows those (generation/greedy/*), so its analysis need not write its own
    (issue 73.3). An unreadable summary: False (the analysis measures, and the runs table names the file)."""
    from degen_train.config.records import Summary, read_record
    from degen_train.core.handed_files import HandedOverFileError

    try:
        summary = read_record(run / "summary.json", Summary, what="run summary", within=run)
    except (HandedOverFileError, OSError, ValueError):
        return False
    generation = summary.eval.generation
    return generation is not None and "greedy" in generation.decodings


def report(
    paths: Sequence[str | Path], *, out: str | Path | None = None, run_analysis: bool = True,
    trust_config: bool = False, caps: AnalysisCaps | None = None, baseline: str | None = None, correct: bool = True,
    primary: Sequence[str] = (), fewest_kept_tokens: int = FEWEST_KEPT_TOKENS,
) -> dict[str, Any]:  # fmt: skip
    """The sweep's report in OUT (default FIRST_PATH/report): its verdicts against ``baseline`` (KEY=VALUE; default:
    the value that switches a swept term off), tables, figures; returns what it wrote."""
    caps = caps or AnalysisCaps()
    if baseline is not None and "=" not in baseline:  # before any run is read or analysed
        raise ValueError(f"--baseline {baseline}: give KEY=VALUE, a swept key at one of its values")
    if not 1 <= fewest_kept_tokens <= MOST_KEPT_TOKENS:
        raise ValueError(f"--fewest-kept-tokens={fewest_kept_tokens}: give a count of tokens from 1 to "
                         f"{MOST_KEPT_TOKENS:,}")  # fmt: skip
    from degen_train.core.source_reading import module_constant

    skippable = module_constant("degen_train.evaluation.model_analysis", "SKIPPABLE")  # read, not imported: no torch
    unknown = sorted(set(caps.skip) - set(skippable))
    if unknown or caps.sentences < 1 or caps.generation_prompts < 1:  # before any run is read or analysed
        raise ValueError(f"--analysis-skip {','.join(unknown)}: not a part of an analysis; choose from "
                         f"{', '.join(skippable)}" if unknown else f"--analysis-sentences={caps.sentences} and "
                         f"--generation-prompts={caps.generation_prompts} must each be at least 1")  # fmt: skip
    runs = find_runs(paths)
    out_dir = writable_folder(Path(out) if out else Path(paths[0]) / "report", "--out")
    try:
        return _written_report(paths, runs, out_dir, run_analysis=run_analysis, trust_config=trust_config, caps=caps,
                               baseline=baseline, correct=correct, primary=tuple(primary),
                               fewest_kept_tokens=fewest_kept_tokens)  # fmt: skip
    except OSError as error:  # a full disk, a file-size limit, a quota: one line naming the folder
        if isinstance(error, DiskFull) or not is_disk_full(error):
            raise
        raise disk_full_error(out_dir, "give --out a folder on another disk", error) from error


def _written_report(
    paths: Sequence[str | Path], runs: list[Path], out_dir: Path, *, run_analysis: bool, trust_config: bool,
    caps: AnalysisCaps, baseline: str | None, correct: bool, primary: tuple[str, ...], fewest_kept_tokens: int,
) -> dict[str, Any]:  # fmt: skip
    timing: dict[str, float] = {"runs": 0, "reused": 0, "seconds": 0.0, "generated_at_end": 0}
    analysis_problems = (
        analyze_missing(runs, trust_config=trust_config, caps=caps, timing=timing) if run_analysis else []
    )
    table, common = collect(runs)
    # a run whose records do not fit their schema is listed (the others are reported), and so is a figure's file
    unreadable = [f"{row['run']}: unreadable: {row['error']}" for _, row in table.iterrows()
                  if row["status"] == "unreadable"]  # fmt: skip
    problems = [*analysis_problems, *unreadable]
    grouped = seed_groups(table)
    judged = verdicts_of(table, baseline=baseline, correct=correct, given=baseline is not None, primary=primary,
                         fewest_kept_tokens=fewest_kept_tokens)  # fmt: skip
    atomic_write_text(out_dir / "runs.csv", csv_safe(table).to_csv(index=False))
    if not grouped.empty:
        atomic_write_text(out_dir / "seeds.csv", csv_safe(grouped).to_csv(index=False))
    if judged is not None:
        atomic_write_text(out_dir / "verdicts.csv", csv_safe(rows_for_table(judged)).to_csv(index=False))
    settings = ", ".join(f"{k}={v}" for k, v in sorted(common.items())) or "none"
    headline = grouped if not grouped.empty else table
    headline = headline[headline_columns(headline.columns)]
    images = _figures(table, grouped, problems)
    cones = cone_images(table, problems)
    forests = forest_plots(judged.decided, human_references(table)) if judged is not None else {}
    figures = save_figures(out_dir / "figures", {**{k: v for k, v in images.items() if v}, **forests, **cones})
    text = [f"# Sweep report\n\nCommon overrides: {md_text(settings)}\n"]
    text += verdict_page.markdown(judged) if judged is not None else ["No setting to compare: one setting only.\n"]
    text += [f"- {md_text(p)}" for p in problems]
    best = best_settings(grouped, table)
    alike = ("Losses are ranked among runs trained on the same objective and perplexities among runs whose "
             "perplexity is of the same head (the columns objective and val_perplexity_of); where objectives differ, a "
             "loss every run has is ranked too. A rank is no verdict: the table above says what the seeds can tell.\n")
    text += ["## Best setting per metric\n", alike, *(f"- {md_text(line)}" for line in best), ""] if best else []
    others = not_reported(table)
    if others:
        text += ["", "Runs outside the comparison:", "", *(f"- {md_text(line)}" for line in others), ""]
    spread = "mean ± standard deviation over seeds (a spread, not an interval)" if not grouped.empty else "every run"
    text += [f"## Headline: {spread}\n", md_table(_spread_labels(headline)), ""]
    branches = branch_table(table, [Path(p) for p in paths])  # cooldowns branched with branch_from=RUN@STEP
    for heading, frame in branches:
        text += [f"## Branches of {md_text(heading)}\n", md_table(frame), ""]
    text += ["## Figures\n", *(f"![{md_text(name)}]({path})\n" for name, path in figures.items())]
    text += ["Every column of every run: runs.csv (seeds.csv: mean and standard deviation over seeds; verdicts.csv: "
             "every comparison), and the collapsed tables of report.html.", ""]  # fmt: skip
    atomic_write_text(out_dir / "report.md", "\n".join(text) + "\n")
    opening = verdict_page.html(judged, forests) if judged is not None else []
    page = html_page(table, grouped, _spread_labels(headline), settings, opening, images, cones, branches,
                     not_reported(table))  # fmt: skip
    atomic_write_text(out_dir / "report.html", page)
    return {"rows": table.to_dict("records"), "grouped": grouped.to_dict("records"), "out": str(out_dir),
            "analysis_problems": analysis_problems, "unreadable": problems[len(analysis_problems):],
            "analysis_timing": timing, "comparisons": judged,
            "branches": {heading: frame.to_dict("records") for heading, frame in branches}}  # fmt: skip


def verdicts_of(table: pd.DataFrame, *, baseline: str | None, correct: bool, given: bool,  # noqa: ANN201
                primary: tuple[str, ...] = (), fewest_kept_tokens: int = FEWEST_KEPT_TOKENS):  # fmt: skip
    """The sweep's comparisons (report/comparisons.py), None when it swept nothing but seeds; a ``--baseline`` that
    names no swept value is refused."""
    keys, finished = settings_of(table)
    if not keys or finished.empty:
        if given:
            raise ValueError(f"--baseline {baseline}: the sweep swept no key besides the seed")
        return None
    return comparisons(table, baseline=baseline, correct=correct, primary=primary,
                       fewest_kept_tokens=fewest_kept_tokens)  # fmt: skip


def _figures(table: pd.DataFrame, grouped: pd.DataFrame, problems: list[str]) -> dict[str, str | None]:
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
    return images


def human_references(table: pd.DataFrame) -> dict[str, float]:
    """generation/DECODING/MEASURE -> the human continuations' mean value of MEASURE (runs.csv's generation/human/*),
    the reference a forest plot draws beside each decoding's row."""
    human = {str(c).removeprefix("generation/human/"): float(table[c].mean()) for c in table.columns
             if str(c).startswith("generation/human/") and pd.api.types.is_numeric_dtype(table[c])}  # fmt: skip
    return {str(c): human[str(c).rsplit("/", 1)[1]] for c in table.columns if str(c).startswith("generation/")
            and str(c).count("/") == 2 and str(c).rsplit("/", 1)[1] in human}  # fmt: skip


def _spread_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """``X std`` columns named ``X sd over seeds``: a spread, never to be read as an interval."""
    return frame.rename(columns=lambda c: str(c).removesuffix(" std") + " sd over seeds" if str(c).endswith(" std")
                        else c)  # fmt: skip


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
    parser.add_argument("--baseline", metavar="KEY=VALUE", help="the setting every other is compared with (default: "
                        "the value that switches a swept term off, a weight of 0 or none; else the first value)")
    parser.add_argument("--no-correction", action="store_true", help="judge each comparison alone, without Holm's "
                        "correction over the report's comparisons")  # fmt: skip
    parser.add_argument("--primary", metavar="MEASURE,...", default="", help="the measures the study is about: "
                        "Holm's correction among their comparisons, the others labelled exploratory and corrected "
                        "among themselves (default: one family, every comparison)")  # fmt: skip
    parser.add_argument("--fewest-kept-tokens", type=int, default=FEWEST_KEPT_TOKENS, help="a generation measure "
                        "is not measured where its continuations keep fewer tokens than this on average (they ended "
                        "at end-of-text)")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    caps = AnalysisCaps(sentences=args.analysis_sentences, generation_prompts=args.generation_prompts,
                        skip=tuple(p for p in args.analysis_skip.split(",") if p))  # fmt: skip
    try:
        result = report(args.paths, out=args.out, run_analysis=not args.no_analyze, trust_config=args.trust_config,
                        caps=caps, baseline=args.baseline, correct=not args.no_correction,
                        primary=tuple(m for m in args.primary.split(",") if m),
                        fewest_kept_tokens=args.fewest_kept_tokens)  # fmt: skip
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
              f"{', without ' + ', '.join(caps.skip) if caps.skip else ''}), {timing['reused']} reused"
              + (f"; {timing['generated_at_end']} decoder(s) measured their greedy continuations at their end "
                 f"(eval.generate): shown from summary.json, not generated again" if timing["generated_at_end"]
                 else ""))  # fmt: skip
    print(printable(f"{len(result['rows'])} runs ({failed} failed){said}"))
    judged = result["comparisons"]
    lines = verdict_page.terminal_lines(judged, result["out"]) if judged is not None else [
        f"  one setting only, nothing compared: {result['out']}/report.md, report.html, runs.csv"]  # fmt: skip
    print("\n".join(printable(line) for line in lines))
    if missing or unreadable:  # a report without the analyses or files it should hold is not a success
        print("\n".join(f"  {line}" for line in [*missing, *unreadable]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
