"""The report's "best setting" lines, like compared with like: a run's own loss is ranked only among runs trained on
the same objective, a perplexity only among runs whose perplexity is of the same head (an MLM+NSP run's validation
loss adds NSP, an ELECTRA run's perplexity is its generator's). Where objectives differ, a loss every run has (the
MLM loss of MLM and of MLM+NSP) is ranked too, named as such."""

from __future__ import annotations

import pandas as pd

from degen_train.report.runs_table import HEADLINE, SWEPT

# Metrics that belong to a run's objective, and the column that says which: ranked only among runs sharing it.
WITHIN = {"val_objective_loss": ("objective", "objective"),
          "val_perplexity": ("val_perplexity_of", "perplexity's head")}  # fmt: skip


def best_settings(grouped: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """One line per headline metric (per objective, or per perplexity head, where runs differ in it): the setting
    with the best mean (or the best run when there are no seeds), its spread over seeds beside it."""
    source, suffix = (grouped, " mean") if not grouped.empty else (table, "")
    lines = []
    for metric, direction in HEADLINE.items():
        column = metric + suffix
        if column not in source.columns or source[column].isna().all() or len(source) < 2:
            continue
        by, named = WITHIN.get(metric, (None, None))
        kinds = source[by].dropna().unique() if by in source.columns else []
        if len(kinds) <= 1:
            lines.append(_best_line(source, metric, suffix, direction, ""))
            continue
        for kind in sorted(kinds, key=str):
            rows = source[source[by] == kind]
            if len(rows) > 1:
                lines.append(_best_line(rows, metric, suffix, direction, f" among runs whose {named} is {kind}"))
            else:
                lines.append(f"{metric}: one setting has {named} {kind} ({_setting(rows.iloc[0])}): not ranked "
                             f"against the others, whose {named} differs")  # fmt: skip
        lines += _shared_loss_lines(source, suffix, kinds, named) if by == "objective" else []
    return lines


def _shared_loss_lines(source: pd.DataFrame, suffix: str, kinds: list, named: str) -> list[str]:
    """The losses every run has where their objectives differ (val/mlm/loss for MLM and MLM+NSP), ranked."""
    shared = [c.removesuffix(suffix) for c in source.columns if str(c).startswith("val/") and str(c).endswith(
        "/loss" + suffix) and source[c].notna().all()]  # fmt: skip
    terms = [c for c in shared if c.split("/")[1] in {t for kind in kinds for t in str(kind).split("+")}]
    what = f" (a loss every run here has, whose {named}s differ: {', '.join(map(str, kinds))})"
    return [_best_line(source, column, suffix, "min", what) for column in terms]


def _best_line(rows: pd.DataFrame, metric: str, suffix: str, direction: str, where: str) -> str:
    column = metric + suffix
    best = rows.loc[rows[column].idxmin() if direction == "min" else rows[column].idxmax()]
    spread = f" ± {best[metric + ' std']:.3g}" if suffix and pd.notna(best.get(metric + " std")) else ""
    better = "lower" if direction == "min" else "higher"
    return f"{metric}{where} ({better} is better): {_setting(best)} — {best[column]:.4g}{spread}"


def _setting(row: pd.Series) -> str:
    swept = [c for c in row.index if str(c).startswith(SWEPT)]
    return ", ".join(f"{c.removeprefix(SWEPT)}={row[c]}" for c in swept) or str(row.get("run"))
