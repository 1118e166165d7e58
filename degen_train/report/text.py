"""How a sweep report shows what a handed-over folder holds: as text, never as markup, a formula or a terminal
command, in every file it writes (report.md, report.html, runs.csv, seeds.csv, verdicts.csv)."""

from __future__ import annotations

import base64
import re
from html import escape
from pathlib import Path

import pandas as pd

from degen_train.core.handed_files import printable
from degen_train.core.io import atomic_write_bytes
from degen_train.report.runs_table import SWEPT

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
    """The table as people read it: swept columns without their prefix, no file paths, every text cell and column
    name with its control and format characters escaped (core/handed_files.printable: an ESC, an OSC or a
    right-to-left override in a run folder's name or a value cannot act on a terminal or read as another text)."""
    table = frame.drop(columns=["path"], errors="ignore")
    table = table.rename(columns=lambda c: printable(str(c).removeprefix(SWEPT)))
    for column in table.columns:
        if not pd.api.types.is_numeric_dtype(table[column]):
            table[column] = table[column].map(lambda v: printable(v) if isinstance(v, str) else v)
    return table


def md_text(text: object) -> str:
    """Text from a handed-over folder as report.md shows it, never as markup: control characters escaped, HTML's
    ``<``, ``>`` and ``&`` as entities (a Markdown viewer that passes HTML, MkDocs among them, would run a
    ``<script>``), Markdown's link, image, code and table characters ([ ] ` |) escaped."""
    return escape(printable(text), quote=False).translate(MARKDOWN_SPECIALS)


def html_text(text: object) -> str:
    """Text from a handed-over folder as report.html shows it: control and format characters escaped, then HTML's."""
    return escape(printable(text))


def not_reported(table: pd.DataFrame) -> list[str]:
    """'RUN: status: reason' for every run that is not a finished one (failed, unreadable, stopped before its end, or
    read from wandb's offline summary alone), so that no run leaves the report without a word."""
    lines = []
    for _, row in table.iterrows():
        status = str(row.get("status"))
        if status == "finished":
            continue
        reason = {"finished (wandb)": "from its offline wandb summary alone (no summary.json)",
                  "incomplete": "no summary.json: stopped before its end, or still running"}.get(status)  # fmt: skip
        error = row.get("error")
        reason = str(error) if isinstance(error, str) and error else reason
        lines.append(f"{row['run']}: {status}" + (f": {reason}" if reason else ""))
    return lines


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


def save_figures(folder: Path, images: dict[str, str]) -> dict[str, str]:
    """Each base64 PNG as folder/NN-name.png; {caption: path relative to the report} for report.md's links."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("[0-9][0-9]-*.png"):  # an earlier report's figures (this function's names alone)
        stale.unlink()
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
    opening: list[str],
    images: dict,
    cones: dict,
    branches: list[tuple[str, pd.DataFrame]] = (),
    outside: list[str] = (),
) -> str:
    """report.html: the verdicts first (``opening``: report/verdict_page.py), the headline, branches, figures; every
    column of every run in collapsed sections at the end."""
    html = [
        f"<!doctype html><meta charset='utf-8'><title>degen_train sweep report</title><style>{STYLE}</style>",
        RENDER_CHECK,
        "<h1>Sweep report</h1>",
        f"<p>Common overrides: {html_text(settings)}</p>",
        *opening,
    ]
    if outside:
        html += ["<p>Runs outside the comparison:</p><ul>", *(f"<li>{html_text(line)}</li>" for line in outside),
                 "</ul>"]  # fmt: skip
    spread = "mean ± standard deviation over seeds (a spread, not an interval)" if not grouped.empty else "every run"
    html += [f"<h2>Headline: {spread}</h2>", html_table(headline)]
    for heading, frame in branches:
        html += [f"<h2>Branches of {html_text(heading)}</h2>", html_table(frame)]
    html.append("<h2>Plots</h2>")
    html += [
        f"<figure><img src='data:image/png;base64,{data}'><figcaption>{html_text(name)}</figcaption></figure>"
        for name, data in images.items()
        if data
    ]
    if cones:
        html.append("<h2>Cone plots</h2>")
        html += [
            f"<figure><img width=480 src='data:image/png;base64,{d}'><figcaption>{html_text(n)}</figcaption></figure>"
            for n, d in cones.items()
        ]
    html += ["<details><summary>All runs, every column</summary>", html_table(table), "</details>"]
    if not grouped.empty:
        html += ["<details><summary>Mean and standard deviation over seeds, every column</summary>",
                 html_table(grouped), "</details>"]  # fmt: skip
    return "\n".join(html)


def html_table(frame: pd.DataFrame) -> str:
    """A wide table scrolls inside its own box instead of widening the page."""
    table = shown(frame).to_html(index=False, na_rep="", float_format="{:.4g}".format)
    return f"<div style='overflow-x:auto'>{table}</div>"


