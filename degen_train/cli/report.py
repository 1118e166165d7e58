"""degen-report SWEEP_DIR [RUN_DIR ...] [--out DIR]: one table and one HTML page for a sweep's runs."""

from __future__ import annotations

import argparse
import base64
import csv
import io
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from degen_train.sweep import FAILED  # noqa: E402

SEED_KEYS = ("seed",)
SUMMARY_COLUMNS = ("final_step", "val_loss", "val_perplexity", "train_loss", "tokens_per_s")


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Run directories (with summary.json, failed.json or config.yaml) at or below the given paths."""
    runs: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        candidates = [path] if _is_run(path) else sorted(p.parent for p in path.rglob("config.yaml"))
        candidates += sorted(p.parent for p in path.rglob(FAILED) if p.parent not in candidates)
        runs.extend(c for c in candidates if c not in runs)
    if not runs:
        raise ValueError(f"no runs found in {', '.join(map(str, paths))} (a run has config.yaml or summary.json)")
    return runs


def _is_run(path: Path) -> bool:
    return any((path / name).exists() for name in ("summary.json", FAILED, "config.yaml"))


def _swept(run: Path) -> dict[str, str]:
    path = run / "overrides.json"
    if path.exists():
        overrides = json.loads(path.read_text())
    elif (run / FAILED).exists():
        overrides = json.loads((run / FAILED).read_text()).get("overrides", [])
    else:
        overrides = []
    pairs = [o.lstrip("+~").split("=", 1) for o in overrides if "=" in o]
    return {k: v for k, v in pairs}


def _wandb_summary(run: Path) -> dict[str, Any]:
    """Summary metrics of an offline wandb run in RUN/wandb (when the run wrote no summary.json)."""
    for path in sorted(run.glob("wandb/*run-*/files/wandb-summary.json")):
        return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    return {}


def collect(runs: Sequence[Path]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        row: dict[str, Any] = {"run": run.name, "path": str(run), **{f"swept:{k}": v for k, v in _swept(run).items()}}
        if (run / FAILED).exists():
            row["status"] = "failed"
            row["error"] = json.loads((run / FAILED).read_text())["error"]
        elif (run / "summary.json").exists():
            summary = json.loads((run / "summary.json").read_text())
            row["status"] = "finished"
            row.update({k: summary.get(k) for k in SUMMARY_COLUMNS})
            row.update(summary.get("isotropy", {}))
            for name, scores in summary.get("eval", {}).get("sts", {}).items():
                row[f"sts/{name}"] = scores.get("raw")
            if "wic" in summary.get("eval", {}):
                wic = summary["eval"]["wic"]["raw"]
                row["wic/accuracy"] = wic.get("accuracy", wic.get("accuracy_threshold_fitted_on_scored_items"))
        elif wandb := _wandb_summary(run):
            row["status"] = "finished (wandb)"
            row.update(wandb)
        else:
            row["status"] = "incomplete"
        rows.append(row)
    return rows


def drop_constant_overrides(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Overrides every run shares are settings, not swept values: take them out of the rows."""
    keys = {k for r in rows for k in r if k.startswith("swept:")}
    constant = {k: rows[0].get(k) for k in keys if len({str(r.get(k)) for r in rows}) == 1 and len(rows) > 1}
    for row in rows:
        for key in constant:
            row.pop(key, None)
    return {k.removeprefix("swept:"): v for k, v in constant.items()}


def columns_of(rows: Sequence[dict[str, Any]], *, identity: Sequence[str] = ("run", "status")) -> list[str]:
    swept = sorted({k for r in rows for k in r if k.startswith("swept:")})
    rest: list[str] = []
    for row in rows:
        rest += [k for k in row if k not in rest and not k.startswith("swept:") and k not in ("run", "status", "path")]
    return [*identity, *swept, *rest]


def seed_groups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± std over seeds of every numeric column, for rows that differ only in a seed key."""
    swept = sorted({k for r in rows for k in r if k.startswith("swept:")})
    grouping = [k for k in swept if k.split(":", 1)[1] not in SEED_KEYS]
    if len(grouping) == len(swept):
        return []
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("status", "").startswith("finished"):
            groups[tuple(row.get(k) for k in grouping)].append(row)
    out = []
    for key, members in groups.items():
        entry: dict[str, Any] = {k: v for k, v in zip(grouping, key, strict=True)}
        entry["seeds"] = len(members)
        numeric = {k for m in members for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        for column in sorted(numeric):
            values = [m[column] for m in members if isinstance(m.get(column), int | float)]
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            entry[column] = f"{mean:.4g} ± {std:.2g}"
        out.append(entry)
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value)


def markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    lines = ["| " + " | ".join(c.removeprefix("swept:") for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)).replace("|", "/") for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _png(figure: plt.Figure) -> str:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def _label(row: dict[str, Any]) -> str:
    return ", ".join(f"{k.removeprefix('swept:')}={v}" for k, v in row.items() if k.startswith("swept:")) or row["run"]


def loss_curves(rows: Sequence[dict[str, Any]]) -> str | None:
    figure, axis = plt.subplots(figsize=(7, 4))
    drawn = False
    for row in rows:
        path = Path(row["path"]) / "logs" / "metrics.csv"
        if not path.exists():
            continue
        with path.open(newline="") as handle:
            points = [(int(r["step"]), float(r["train/loss"])) for r in csv.DictReader(handle) if r.get("train/loss")]
        if points:
            axis.plot(*zip(*points, strict=True), label=_label(row), lw=1)
            drawn = True
    if not drawn:
        plt.close(figure)
        return None
    axis.set_xlabel("step")
    axis.set_ylabel("train/loss")
    axis.legend(fontsize=6)
    return _png(figure)


def metric_plots(rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> dict[str, str]:
    """Each metric against each swept value (numeric sweeps only)."""
    out = {}
    swept = sorted({k for r in rows for k in r if k.startswith("swept:")})
    for key in swept:
        xs = [r.get(key) for r in rows]
        try:
            [float(x) for x in xs if x is not None]
        except ValueError:
            continue
        for metric in metrics:
            pairs = [
                (float(r[key]), r[metric])
                for r in rows
                if r.get(key) is not None and isinstance(r.get(metric), int | float)
            ]
            if len(pairs) < 2:
                continue
            figure, axis = plt.subplots(figsize=(4, 3))
            axis.plot(*zip(*sorted(pairs), strict=True), "o")
            axis.set_xlabel(key.removeprefix("swept:"))
            axis.set_ylabel(metric)
            out[f"{metric} vs {key.removeprefix('swept:')}"] = _png(figure)
    return out


def cone_images(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for row in rows:
        path = Path(row["path"]) / "analysis" / "cone.png"
        if path.exists():
            out[_label(row)] = base64.b64encode(path.read_bytes()).decode()
    return out


def report(paths: Sequence[str | Path], *, out: str | Path | None = None) -> dict[str, Any]:
    runs = find_runs(paths)
    rows = collect(runs)
    common = drop_constant_overrides(rows)
    columns = columns_of(rows)
    out_dir = Path(out) if out else Path(paths[0]) / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "runs.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([c.removeprefix("swept:") for c in columns])
        writer.writerows([_cell(r.get(c)) for c in columns] for r in rows)
    grouped = seed_groups(rows)
    settings = ", ".join(f"{k}={v}" for k, v in sorted(common.items())) or "none"
    text = f"# Sweep report\n\nCommon overrides: {settings}\n\n" + markdown(rows, columns) + "\n"
    if grouped:
        text += "\n## Mean ± std over seeds\n\n" + markdown(grouped, columns_of(grouped, identity=())) + "\n"
    (out_dir / "report.md").write_text(text)
    metrics = [
        m
        for m in ("val_loss", "val_perplexity", "isotropy/embedding/mean_cosine", "isotropy/embedding/isoscore")
        if any(isinstance(r.get(m), int | float) for r in rows)
    ]
    images = {"loss curves": loss_curves(rows), **metric_plots(rows, metrics)}
    cones = cone_images(rows)
    html = [
        "<!doctype html><meta charset='utf-8'><title>degen_train sweep report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px}img{margin:6px}</style>",
        "<h1>Sweep report</h1>",
        f"<p>Common overrides: {escape(settings)}</p>",
        _html_table(rows, columns),
    ]
    if grouped:
        html += ["<h2>Mean ± std over seeds</h2>", _html_table(grouped, columns_of(grouped, identity=()))]
    html.append("<h2>Plots</h2>")
    html += [
        f"<figure><img src='data:image/png;base64,{data}'><figcaption>{name}</figcaption></figure>"
        for name, data in images.items()
        if data
    ]
    if cones:
        html.append("<h2>Cone plots</h2><div style='display:flex;flex-wrap:wrap'>")
        html += [
            f"<figure><img width=320 src='data:image/png;base64,{d}'><figcaption>{n}</figcaption></figure>"
            for n, d in cones.items()
        ]
        html.append("</div>")
    (out_dir / "report.html").write_text("\n".join(html))
    return {"rows": rows, "grouped": grouped, "out": str(out_dir)}


def _html_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{escape(c.removeprefix('swept:'))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


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
