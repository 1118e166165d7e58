"""The sweep report's figures, as base64 PNGs: loss curves, each metric against each numeric swept value
(mean ± std over seeds), the perplexity–isotropy trade-off, and the runs' cone plots."""

from __future__ import annotations

import base64
import io
import logging
import math
import os
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from degen_train.config.records import read_metrics_csv, read_png  # noqa: E402
from degen_train.core.handed_files import HandedOverFileError, printable  # noqa: E402
from degen_train.report.measures import direction_of  # noqa: E402
from degen_train.report.runs_table import SWEPT  # noqa: E402

MARKERS = "os^vDP*X"
log = logging.getLogger("degen_train.report")


def plain(text: object) -> str:
    """A label drawn as the text it is: control characters escaped, a dollar sign never starting mathtext (a
    handed-over override value such as ``$\\frac{$`` would end the figure, and the report, in a parse error)."""
    return printable(text, 200).replace("$", r"\$")


def png(figure: plt.Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")  # room for long legends and labels
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def setting_label(row: pd.Series) -> str:
    swept = [c for c in row.index if str(c).startswith(SWEPT)]
    return plain(", ".join(f"{c.removeprefix(SWEPT)}={row[c]}" for c in swept) or str(row.get("run", "all")))


def logged_curve(row: pd.Series, split: str, problems: list[str] | None = None) -> pd.DataFrame | None:
    """(step, value) of a run's logged ``split`` loss: train/loss, or for val the objective's own terms summed
    (val/TERM/loss of each objective term; val/loss when the objective is not known), so that runs with and
    without a regularizer compare on the same loss. A log that cannot be read (config/records.py) is named in
    ``problems`` and drawn as no curve."""
    path = Path(row["path"]) / "logs" / "metrics.csv"
    if not os.path.lexists(path):
        return None
    try:
        logged = read_metrics_csv(path, within=Path(row["path"]))
    except HandedOverFileError as error:
        if problems is not None and str(error) not in problems:
            problems.append(str(error))
        return None
    objective = str(row.get("objective") or "")
    columns = [f"val/{term}/loss" for term in objective.split("+")] if split == "val" and objective else []
    if not columns or not all(c in logged for c in columns):
        columns = [f"{split}/loss"]
    if not all(c in logged for c in columns):
        return None
    points = logged[["step", *columns]].dropna()
    if not len(points):
        return None
    # x = the updates done when the value was taken. Lightning stamps a row with the 0-based index of the update it
    # follows (the validation after update 100 reads step 99); the final validation is stamped with the update
    # count itself (pretrain._fit_and_validate): a row at the run's final step is that one.
    final = row.get("final_step")  # NaN in the table for a run without a summary (failed, wandb-only, stopped)
    final = int(final) if isinstance(final, int | float) and math.isfinite(final) else None
    updates = [int(s) if split == "val" and final is not None and int(s) == final else int(s) + 1
               for s in points["step"]]  # fmt: skip
    return pd.DataFrame({"step": updates, "value": points[columns].sum(axis=1).to_numpy()})


def loss_curves(table: pd.DataFrame, split: str = "train", problems: list[str] | None = None) -> str | None:
    """The ``split`` loss of every run against the step, with markers (short runs have few points)."""
    figure, axis = plt.subplots(figsize=(7, 4))
    drawn = 0
    for index, (_, row) in enumerate(table.iterrows()):
        points = logged_curve(row, split, problems)
        if points is None:
            continue
        axis.plot(points["step"], points["value"], marker=MARKERS[index % len(MARKERS)], ms=3, lw=1,
                  label=setting_label(row))  # fmt: skip
        drawn += 1
    if not drawn:
        plt.close(figure)
        return None
    axis.set_xlabel("updates done")
    axis.set_ylabel("train/loss" if split == "train" else "validation loss of the objective's own terms")
    axis.legend(fontsize=6)
    return png(figure)


def metric_against_swept(table: pd.DataFrame, metrics: list[str]) -> dict[str, str]:
    """Each metric against each numeric swept key: mean ± std over the runs sharing that value."""
    out = {}
    finished = table[table["status"].str.startswith("finished")]
    for key in [c for c in finished.columns if c.startswith(SWEPT) and pd.api.types.is_numeric_dtype(finished[c])]:
        if key.removeprefix(SWEPT) == "seed":
            continue
        for metric in metrics:
            stats = finished.groupby(key)[metric].agg(["mean", "std", "count"]).dropna(subset=["mean"])
            if len(stats) < 2:
                continue
            figure, axis = plt.subplots(figsize=(4, 3))
            axis.errorbar(stats.index, stats["mean"], yerr=stats["std"].fillna(0), marker="o", capsize=3)
            axis.set_xlabel(plain(key.removeprefix(SWEPT)))
            axis.set_ylabel(metric + (" (mean ± std)" if stats["count"].max() > 1 else ""))
            out[f"{metric} vs {printable(key.removeprefix(SWEPT), 200)}"] = png(figure)
    return out


def tradeoff(grouped: pd.DataFrame, table: pd.DataFrame, *, x: str, y: str) -> str | None:
    """One point per setting: ``y`` against ``x``, with mean ± std error bars over seeds when there are seeds."""
    if not grouped.empty and f"{x} mean" in grouped and f"{y} mean" in grouped:
        points = grouped.dropna(subset=[f"{x} mean", f"{y} mean"])
        xs, ys = points[f"{x} mean"], points[f"{y} mean"]
        xerr, yerr = points[f"{x} std"].fillna(0), points[f"{y} std"].fillna(0)
    elif x in table and y in table:
        points = table.dropna(subset=[x, y])
        xs, ys, xerr, yerr = points[x], points[y], None, None
    else:
        return None
    if len(points) < 2:
        return None
    figure, axis = plt.subplots(figsize=(5, 4))
    for index, (at, row) in enumerate(points.iterrows()):
        axis.errorbar(
            xs.loc[at],
            ys.loc[at],
            xerr=None if xerr is None else xerr.loc[at],
            yerr=None if yerr is None else yerr.loc[at],
            marker=MARKERS[index % len(MARKERS)],
            capsize=3,
            label=setting_label(row),
        )
    axis.set_xlabel(x)
    axis.set_ylabel(y)
    axis.legend(fontsize=6)
    return png(figure)


def cone_images(table: pd.DataFrame, problems: list[str] | None = None) -> dict[str, str]:
    """Each run's analysis/cone.png (a plain PNG file of the folder, never through a link), by its setting."""
    out = {}
    for _, row in table.iterrows():
        path = Path(row["path"]) / "analysis" / "cone.png"
        if not os.path.lexists(path):
            continue
        try:
            data = read_png(path, within=Path(row["path"]))
        except HandedOverFileError as error:
            if problems is not None:
                problems.append(str(error))
            log.warning("%s", error)
            continue
        label = setting_label(row).replace(r"\$", "$")
        label = label if label.replace(", ", ",") == row["run"] else f"{label} ({printable(row['run'], 200)})"
        out[label] = base64.b64encode(data).decode()
    return out


def forest_plots(decided: list) -> dict[str, str]:
    """A forest plot per measure: each setting's effect against the baseline with its 95% interval, the baseline at
    zero (a dashed line), green where it moved the measure's better way, red the worse, grey where no difference
    shows; a setting whose noise is unknown is drawn as a point alone."""
    out = {}
    measures = list(dict.fromkeys(c.measure for c in decided))
    for measure in measures:
        rows = [c for c in decided if c.measure == measure]
        figure, axis = plt.subplots(figsize=(5, 0.5 + 0.45 * len(rows)))
        for y, c in enumerate(rows):
            half = c.half_width
            better = (direction_of(c.measure) or ("", ""))[0]  # green: the better way; red: the worse; grey: neither
            colour = "tab:grey" if c.word not in ("lower", "higher") else "tab:green" if c.word == better else "tab:red"
            axis.errorbar(c.effect, y, xerr=None if half is None else half, fmt="o", color=colour, capsize=3)
        axis.axvline(0, color="black", linestyle="--", linewidth=1)
        axis.set_yticks(range(len(rows)), [plain(c.setting) for c in rows], fontsize=7)
        axis.set_ylim(-0.7, len(rows) - 0.3)
        axis.set_xlabel(f"{plain(measure)}: setting − baseline ({plain(rows[0].baseline)})", fontsize=8)
        out[f"{printable(measure, 200)}: effect against {printable(rows[0].baseline, 200)}"] = png(figure)
    return out
