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


def forest_plots(decided: list, references: dict[str, float] | None = None) -> dict[str, str]:
    """One forest plot across the measures: each comparison's standardised effect, effect / SE (its own noise, the
    unit in which every measure's interval is ± Student's t at its df), with that 95% interval; zero is the baseline
    (a dashed line). Green where it moved the measure's better way, red the worse, grey where no difference shows; a
    comparison without an interval (noise unknown or zero, or not measured) is left out and counted in the title.
    A generation row carries its human continuations beside it (``references``: measure -> the human value, drawn
    as an H at (human − baseline) / SE)."""
    from degen_train.report.comparisons import measure_order

    references = references or {}
    rows = sorted([c for c in decided if c.half_width], key=lambda c: (measure_order(c.measure), c.setting))
    if not rows:
        return {}
    figure, axis = plt.subplots(figsize=(6, 0.8 + 0.28 * len(rows)))
    for y, c in enumerate(reversed(rows)):
        better = (direction_of(c.measure) or ("", ""))[0]  # green: the better way; red: the worse; grey: neither
        colour = "tab:grey" if c.word not in ("lower", "higher") else "tab:green" if c.word == better else "tab:red"
        axis.errorbar(c.effect / c.noise, y, xerr=c.half_width / c.noise, fmt="o", color=colour, capsize=2,
                      markersize=4)  # fmt: skip
        human = references.get(c.measure)
        if human is not None and math.isfinite(human):
            axis.plot((human - c.before) / c.noise, y, marker="$H$", color="tab:blue", markersize=7, linestyle="")
    axis.axvline(0, color="black", linestyle="--", linewidth=1)
    if max(abs(c.effect / c.noise) + c.half_width / c.noise for c in rows) > 30:  # a far effect: the rest stay legible
        axis.set_xscale("symlog", linthresh=5)
    labels = [plain(f"{c.measure} ({c.setting})" if len({r.setting for r in rows}) > 1 else c.measure)
              for c in reversed(rows)]  # fmt: skip
    axis.set_yticks(range(len(rows)), labels, fontsize=7)
    axis.set_ylim(-0.7, len(rows) - 0.3)
    human = "; H: the human continuations" if references else ""
    axis.set_xlabel(f"standardised effect against {plain(rows[0].baseline)}: (setting − baseline) / its SE, 95% "
                    f"interval{human}", fontsize=8)  # fmt: skip
    left_out = len(decided) - len(rows)
    if left_out:
        axis.set_title(f"{left_out} comparison(s) without an interval left out (verdicts.csv)", fontsize=8)
    return {f"standardised effects against {printable(rows[0].baseline, 200)}, every measure": png(figure)}
