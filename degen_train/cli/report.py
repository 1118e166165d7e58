"""degen-report SWEEP_DIR [RUN_DIR ...] [--out DIR]: tables (CSV, markdown, HTML) and figures of a sweep's runs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd

from degen_train.io import atomic_write_text
from degen_train.report.figures import cone_images, loss_curves, metric_against_swept, tradeoff
from degen_train.report.table import SWEPT, best_settings, collect, find_runs, seed_groups

PLOTTED = ("val_loss", "val_perplexity", "isotropy/embedding/mean_cosine", "isotropy/embedding/isoscore")
STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
    "td,th{border:1px solid #ccc;padding:3px 6px}img{margin:6px}figure{display:inline-block}"
)


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as people read it: swept columns without their prefix, no file paths."""
    return frame.drop(columns=["path"], errors="ignore").rename(columns=lambda c: str(c).removeprefix(SWEPT))


def report(paths: Sequence[str | Path], *, out: str | Path | None = None) -> dict[str, Any]:
    table, common = collect(find_runs(paths))
    grouped = seed_groups(table)
    best = best_settings(grouped, table)
    out_dir = Path(out) if out else Path(paths[0]) / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "runs.csv", shown(table).to_csv(index=False))
    if not grouped.empty:
        atomic_write_text(out_dir / "seeds.csv", shown(grouped).to_csv(index=False))
    settings = ", ".join(f"{k}={v}" for k, v in sorted(common.items())) or "none"
    text = [f"# Sweep report\n\nCommon overrides: {settings}\n"]
    text += ["## Best setting per metric\n", *(f"- {line}" for line in best), ""] if best else []
    text += ["## Runs\n", shown(table).to_markdown(index=False, floatfmt=".4g"), ""]
    if not grouped.empty:
        text += ["## Mean ± std over seeds\n", shown(grouped).to_markdown(index=False, floatfmt=".4g"), ""]
    atomic_write_text(out_dir / "report.md", "\n".join(text))
    plotted = [m for m in PLOTTED if m in table and table[m].notna().any()]
    images = {
        "train/loss per run": loss_curves(table),
        "val_perplexity against embedding IsoScore (one point per setting)": tradeoff(
            grouped, table, x="isotropy/embedding/isoscore", y="val_perplexity"
        ),
        **metric_against_swept(table, plotted),
    }
    atomic_write_text(out_dir / "report.html", html_page(table, grouped, settings, best, images, cone_images(table)))
    return {"rows": table.to_dict("records"), "grouped": grouped.to_dict("records"), "out": str(out_dir)}


def html_page(
    table: pd.DataFrame, grouped: pd.DataFrame, settings: str, best: list[str], images: dict, cones: dict
) -> str:
    html = [
        f"<!doctype html><meta charset='utf-8'><title>degen_train sweep report</title><style>{STYLE}</style>",
        "<h1>Sweep report</h1>",
        f"<p>Common overrides: {escape(settings)}</p>",
    ]
    if best:
        html += ["<h2>Best setting per metric</h2><ul>", *(f"<li>{escape(line)}</li>" for line in best), "</ul>"]
    html += ["<h2>Runs</h2>", shown(table).to_html(index=False, na_rep="", float_format="{:.4g}".format)]
    if not grouped.empty:
        html += [
            "<h2>Mean ± std over seeds</h2>",
            shown(grouped).to_html(index=False, na_rep="", float_format="{:.4g}".format),
        ]
    html.append("<h2>Plots</h2>")
    html += [
        f"<figure><img src='data:image/png;base64,{data}'><figcaption>{escape(name)}</figcaption></figure>"
        for name, data in images.items()
        if data
    ]
    if cones:
        html.append("<h2>Cone plots</h2>")
        html += [
            f"<figure><img width=320 src='data:image/png;base64,{d}'><figcaption>{escape(n)}</figcaption></figure>"
            for n, d in cones.items()
        ]
    return "\n".join(html)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="degen-report", description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("paths", nargs="+", help="a sweep directory, or run directories")
    parser.add_argument("--out", help="output directory (default: FIRST_PATH/report)")
    args = parser.parse_args(argv)
    try:
        result = report(args.paths, out=args.out)
    except (ValueError, FileNotFoundError) as error:
        parser.exit(2, f"degen-report: error: {error}\n")
    failed = sum(r["status"] == "failed" for r in result["rows"])
    print(f"{len(result['rows'])} runs ({failed} failed): {result['out']}/report.md, runs.csv, report.html")


if __name__ == "__main__":
    main()
