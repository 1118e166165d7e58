"""The part of a sweep report a person reads first: the baseline, how many comparisons were made and how many show a
difference, what moved the other way, and one short table of verdicts (report.md, report.html, verdicts.csv), each
row the one rule's (metrics/verdicts.py): the effect with its 95% interval, the word, the noise, the seeds advice."""

from __future__ import annotations

import pandas as pd

from degen_train.metrics.verdicts import POWER, SWEEP_RULE
from degen_train.report.comparisons import Comparisons, advice, against, effect_text, kept_columns, measure_order
from degen_train.report.text import html_table, html_text, md_table, md_text


def correction_text(result: Comparisons) -> str:
    """The family Holm corrected over and its size, in words; "corrected" is never said of a family of one."""
    if not result.corrected:
        return "each judged alone, with no correction for many comparisons (--no-correction)"
    families = result.families()

    def said(name: str, size: int) -> str:
        what = f"{name} comparison" if name else "comparison"
        if size <= 1:
            return f"{size} {what} with a p-value, judged alone (a family of one: nothing to correct)"
        return f"Holm's correction over the {size} {what}s with a p-value"

    if not families:
        return "no comparison has a p-value"
    if "all" in families:
        return said("", families["all"]) + " (every setting × measure: one family)"
    primary = f"primary measures: {', '.join(result.primary)}"
    return "; ".join(said(name, size) for name, size in families.items()) + f" ({primary})"


def counts_text(result: Comparisons) -> str:
    """``16 lower or higher, 9 no difference shown, 2 cannot tell, 4 not measured``: verdicts.csv's words."""
    counts = result.counts()
    return ", ".join(f"{n} {word}" for word, n in counts.items())


def headline_lines(result: Comparisons) -> list[str]:
    """The report's first lines: the baseline and why, the comparisons and the correction, how many show."""
    key, value = result.baseline
    lines = [f"Baseline: {key}={value}, {result.why}.",
             f"{len(result.decided)} comparisons (settings × measures), {correction_text(result)}; {result.shown} "
             f"show a difference ({counts_text(result)})."]  # fmt: skip
    lines += [f"Not compared: {line}" for line in result.not_compared]
    return lines


def moved_the_other_way(result: Comparisons) -> list[str]:
    """One line per comparison that showed a difference against its measure's better direction (the cone under an
    anti-degeneration term, a higher loss): named first, never left in a wide table."""
    return [f"{c.measure} under {c.setting}: {c.word}, {effect_text(c)} — {against(c)}"
            for c in sorted(result.decided, key=lambda c: measure_order(c.measure)) if against(c)]  # fmt: skip


def verdict_table(result: Comparisons) -> pd.DataFrame:
    """The short table: setting, measure, baseline → setting means, effect [interval], verdict, noise, seeds advice."""
    ordered = [c for c in sorted(result.decided, key=lambda c: (c.setting, measure_order(c.measure))) if not
               _constant(c)]  # fmt: skip
    return pd.DataFrame([{
        "setting": c.setting, "measure": c.measure, "baseline → setting": f"{c.before:.4g} → {c.after:.4g}",
        "effect [95% interval]": effect_text(c), "verdict": c.word,
        "noise": c.noise_text() if c.word != "not measured" else c.note, "seeds to decide": advice(c),
        **({"kept tokens": kept_columns(result, c)["mean kept tokens"]} if result.kept else {}),
    } for c in ordered])  # fmt: skip


def _constant(c) -> bool:  # noqa: ANN001
    """Every run of both arms gave the same value: nothing to judge (it stays in verdicts.csv)."""
    return c.noise == 0 and c.effect == 0


def constant_line(result: Comparisons) -> str | None:
    same = sorted({c.measure for c in result.decided if _constant(c)})
    return f"Every run gave the same value of: {', '.join(same)} (left out of the table)." if same else None


def markdown(result: Comparisons) -> list[str]:
    """report.md's opening: the lines above, the other way, the table and the rule it follows."""
    text = [*(f"{md_text(line)}\n" for line in headline_lines(result))]
    other = moved_the_other_way(result)
    if other:
        text += ["**Moved the other way:**\n", *(f"- {md_text(line)}" for line in other), ""]
    table = verdict_table(result)
    if not table.empty:
        text += ["## Verdicts\n", md_table(table), "", f"*{md_text(SWEEP_RULE)}*", ""]
    same = constant_line(result)
    return text + ([md_text(same), ""] if same else [])


def html(result: Comparisons, forests: dict[str, str]) -> list[str]:
    """report.html's opening: the same lines and table, and the forest plot across the measures."""
    parts = [f"<p>{html_text(line)}</p>" for line in headline_lines(result)]
    other = moved_the_other_way(result)
    if other:
        parts += ["<p><b>Moved the other way:</b></p><ul>", *(f"<li>{html_text(line)}</li>" for line in other),
                  "</ul>"]  # fmt: skip
    table = verdict_table(result)
    if not table.empty:
        parts += ["<h2>Verdicts</h2>", html_table(table), f"<p><i>{html_text(SWEEP_RULE)}</i></p>"]
    if forests:
        parts.append("<h2>Every comparison's standardised effect against the baseline (95% intervals)</h2>")
        parts += [f"<figure><img src='data:image/png;base64,{data}'><figcaption>{html_text(name)}</figcaption>"
                  f"</figure>" for name, data in forests.items()]  # fmt: skip
    return parts


def terminal_lines(result: Comparisons, out: str) -> list[str]:
    """The few lines the command prints: the baseline, how many comparisons show, the files."""
    key, value = result.baseline
    lines = [f"baseline {key}={value}: {result.shown} of {len(result.decided)} comparisons show a difference",
             f"  {correction_text(result)}", f"  {counts_text(result)}"]  # fmt: skip
    lines += [f"  the other way: {line}" for line in moved_the_other_way(result)[:5]]
    undecided = [c for c in result.decided if c.seeds_advice]
    if undecided:
        most = max(c.seeds_advice for c in undecided)
        lines.append(f"  {len(undecided)} of the no difference shown and cannot tell: up to about {most} seeds per "
                     f"arm would decide them at {POWER:.0%} power, at the level their correction used "
                     f"(verdicts.csv)")  # fmt: skip
    lines.append(f"  {out}/report.md, verdicts.csv, report.html, runs.csv")
    return lines
