"""What a sweep's seeds can tell: every setting against its baseline on every measure, by the one rule
(metrics/verdicts.py), with Holm's correction over the settings of each measure and the seeds that would decide what
cannot be told yet.

The baseline is one swept key at one value (``--baseline KEY=VALUE``; by default the value that switches a swept term
off: a weight of 0, ``none``; else the first key's first value). A setting is compared with the baseline setting that
equals it in every other swept key; two settings whose recorded configs differ in anything else a run trains (a key
nobody swept) are never compared, and the report says why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from degen_train.config.records import SUMMARY_ITEMS, Summary, read_record
from degen_train.config.role_lookup import role_of
from degen_train.core.handed_files import HandedOverFileError
from degen_train.core.roles import Role
from degen_train.core.trees import flatten
from degen_train.metrics.verdicts import SWEEP_WORDS, Comparison, compare, decide
from degen_train.report.measures import (
    FEWEST_KEPT_TOKENS,
    direction_of,
    items_noise,
    measures_in,
    sampling_error_of,
)
from degen_train.report.runs_table import SEED_KEYS, SWEPT

OFF_VALUES = ("0", "0.0", "none", "null", "false")
SUMMARY_RECORDS = ("val_perplexity",)  # measures whose per-item record is summary.json's own (validation batches)


@dataclass
class Comparisons:
    """A sweep's comparisons: the baseline and why it was taken, every comparison decided, and the settings left out
    with their reason."""

    baseline: tuple[str, str]  # (key, value)
    why: str
    decided: list[Comparison] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)
    corrected: bool = True
    primary: tuple[str, ...] = ()  # the measures the study is about (--primary): Holm among themselves
    # (baseline, setting, generation/DECODING/mean_kept_tokens | ended_early) -> the two arms' means
    kept: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)

    def families(self) -> dict[str, int]:
        """Each Holm family's name and size (comparisons with a p-value), in the report's words' order."""
        sizes: dict[str, int] = {}
        for c in self.decided:
            if c.p is not None:
                sizes[c.family] = sizes.get(c.family, 0) + 1
        return {name: sizes[name] for name in ("primary", "all", "exploratory", "uncorrected") if name in sizes}

    def counts(self) -> dict[str, int]:
        """How many comparisons got each word, in verdicts.csv's words."""
        return {word: n for word in SWEEP_WORDS if (n := sum(c.word == word for c in self.decided))}

    @property
    def shown(self) -> int:
        return sum(c.word in SWEEP_WORDS[:2] for c in self.decided)


def settings_of(table: pd.DataFrame) -> tuple[list[str], pd.DataFrame]:
    """The swept keys (the seed aside) and the finished runs that can be compared."""
    keys = [c.removeprefix(SWEPT) for c in table.columns if c.startswith(SWEPT) and c.removeprefix(SWEPT) not in
            SEED_KEYS]  # fmt: skip
    finished = table[table["status"].astype(str).str.startswith("finished")]
    return keys, finished


def choose_baseline(table: pd.DataFrame, given: str | None = None) -> tuple[str, str, str]:
    """(key, value, why): ``given`` (KEY=VALUE, a swept key and one of its values), else the value that switches a
    swept term off, else the first key's first value. ValueError names the keys and values there are."""
    keys, _ = settings_of(table)
    values = {key: [str(v) for v in pd.unique(table[SWEPT + key].dropna())] for key in keys}
    if not keys:
        raise ValueError("the sweep swept no key besides the seed: there is no setting to compare with a baseline")
    choices = "; ".join(f"{key}: {', '.join(vals)}" for key, vals in values.items())
    if given:
        key, _, value = given.partition("=")
        if key not in values or value not in values[key]:
            raise ValueError(f"--baseline {given}: not a swept key at one of its values; the sweep's are {choices}")
        return key, value, "given with --baseline"
    for key in keys:
        off = [v for v in values[key] if v.lower() in OFF_VALUES]
        if off and (key.endswith(".weight") or off[0].lower() in ("none", "null", "false")):
            return key, off[0], "the value that switches the swept term off (--baseline KEY=VALUE for another)"
    key = keys[0]
    return key, values[key][0], "the first swept key's first value: none switches a term off (--baseline KEY=VALUE)"


def comparisons(table: pd.DataFrame, *, baseline: str | None = None, correct: bool = True,
                primary: Sequence[str] = (), fewest_kept_tokens: int = FEWEST_KEPT_TOKENS) -> Comparisons:  # fmt: skip
    """Every setting against the baseline on every measure the runs have, decided by the one rule: Holm over the
    whole table, or over the ``primary`` measures and the exploratory ones apart. A generation measure whose
    continuations keep fewer than ``fewest_kept_tokens`` tokens on average in either arm is not measured."""
    key, value, why = choose_baseline(table, baseline)
    keys, finished = settings_of(table)
    unknown = [m for m in primary if m not in measures_in(finished)]
    if unknown:
        raise ValueError(f"--primary {','.join(unknown)}: not a measure the runs have; they have "
                         f"{', '.join(measures_in(finished)) or 'none'}")  # fmt: skip
    result = Comparisons((key, value), why, corrected=correct, primary=tuple(primary))
    others = [k for k in keys if k != key]
    groups = {setting: rows for setting, rows in finished.groupby([SWEPT + k for k in keys], dropna=False, sort=True)}
    trained = {Path(p): _trained_settings(Path(p), keys) for p in finished["path"]}
    found: list[Comparison] = []
    for setting, rows in groups.items():
        named = dict(zip(keys, map(str, setting if isinstance(setting, tuple) else (setting,)), strict=True))
        if named[key] == value:
            continue
        label = ", ".join(f"{k}={named[k]}" for k in keys)
        base = next((r for s, r in groups.items() if _named(keys, s)[key] == value and
                     all(_named(keys, s)[k] == named[k] for k in others)), None)  # fmt: skip
        if base is None:
            result.not_compared.append(f"{label}: no baseline run ({key}={value}) shares its other swept values")
            continue
        differs = _differences([trained[Path(p)] for p in base["path"]], [trained[Path(p)] for p in rows["path"]])
        if differs:
            result.not_compared.append(f"{label}: its runs differ from the baseline's in {differs}, which nobody "
                                       f"swept: not the same experiment")  # fmt: skip
            continue
        found += _compare_setting(label, f"{key}={value}", base, rows, fewest_kept_tokens)
        for column in [c for c in finished.columns if re.match(r"^generation/[^/]+/(mean_kept_tokens|ended_early)$",
                                                                 str(c))]:  # fmt: skip
            means = (base[column].dropna().mean(), rows[column].dropna().mean())
            if not any(pd.isna(m) for m in means):
                result.kept[(f"{key}={value}", label, column)] = (float(means[0]), float(means[1]))
    result.decided = decide(found, correct=correct, primary=primary)
    return result


def _named(keys: list[str], setting: Any) -> dict[str, str]:
    return dict(zip(keys, map(str, setting if isinstance(setting, tuple) else (setting,)), strict=True))


def _compare_setting(label: str, baseline: str, base: pd.DataFrame, rows: pd.DataFrame,
                     fewest_kept_tokens: int) -> list[Comparison]:  # fmt: skip
    found = []
    for measure in measures_in(pd.concat([base, rows])):
        before, after = base[measure].dropna().tolist(), rows[measure].dropna().tolist()
        if not before or not after:
            continue
        short = too_short(measure, base, rows, fewest_kept_tokens)
        if short:
            found.append(replace(compare(measure, label, baseline, before, after), noise=None, dof=None, p=None,
                                 word=SWEEP_WORDS[4], note=short))  # fmt: skip
            continue
        paired, note = None, ""
        if len(before) >= 2 and len(after) >= 2:
            where = (SUMMARY_ITEMS, measure) if measure in SUMMARY_RECORDS else ("eval", measure)
            noise, note = items_noise([Path(p) for p in base["path"]], [Path(p) for p in rows["path"]], (where, where))
            paired = None if noise is None else noise.standard_error
        sampling = 0.0 if paired is not None else sampling_error_of(measure, (sum(before) + sum(after)) / (
            len(before) + len(after)), rows)  # fmt: skip
        found.append(compare(measure, label, baseline, before, after, sampling=sampling, paired=paired, note=note))
    return found


def too_short(measure: str, base: pd.DataFrame, rows: pd.DataFrame, fewest: int) -> str:
    """Why a generation measure is not measured: its decoding's continuations keep fewer than ``fewest`` tokens on
    average in either arm (the text ended at end-of-text: a rep-n of 0 or a diversity of 1 would judge empty text);
    '' where they keep enough, or the measure is no generation measure."""
    found = re.match(r"^generation/([^/]+)/", measure)
    if not found or found.group(1) == "human":
        return ""
    column = f"generation/{found.group(1)}/mean_kept_tokens"
    kept = [arm[column].dropna().mean() if column in arm and arm[column].notna().any() else None
            for arm in (base, rows)]  # fmt: skip
    if any(k is not None and k < fewest for k in kept):
        shown = " and ".join("?" if k is None else f"{k:.1f}" for k in kept)
        return (f"continuations end within {fewest} tokens: {found.group(1)} kept {shown} tokens on average "
                f"(baseline and setting; --fewest-kept-tokens)")  # fmt: skip
    return ""


def _trained_settings(run: Path, swept: list[str]) -> dict[str, Any]:
    """What makes a run the experiment it is besides the swept keys and the seed: its recorded config's keys whose
    role is what the run trains or an input it reads (the corpus, the initial weights, a teacher: core/roles.py;
    issue 72.6, V13: arms trained on another corpus from other weights were judged against the baseline),
    flattened."""
    try:
        config = read_record(run / "summary.json", Summary, what="run summary", within=run).config
    except HandedOverFileError:
        return {}
    flat = flatten(config.model_dump() if config else {})
    skip = set(swept) | set(SEED_KEYS)
    return {k: v for k, v in flat.items() if not any(k == s or k.startswith(s + ".") for s in skip) and
            (role_of(k) is not None and role_of(k).role in (Role.TRAINS, Role.INPUT))}  # fmt: skip


def _differences(base: list[dict[str, Any]], other: list[dict[str, Any]]) -> str:
    """'KEY (a → b)' for the first trained key whose value differs between the two arms' runs, '' when none does."""
    runs = [r for r in [*base, *other] if r]
    if len(runs) < 2:
        return ""
    for key in sorted(set().union(*runs)):
        seen = {repr(r.get(key)) for r in runs}
        if len(seen) > 1:
            before = sorted({repr(r.get(key)) for r in base if r})
            after = sorted({repr(r.get(key)) for r in other if r})
            return f"{key} ({', '.join(before)} → {', '.join(after)})"
    return ""


def against(comparison: Comparison) -> str | None:
    """Why a decided comparison went the other way than the measure's better direction (the cone under an
    anti-degeneration term, a cost on the loss), or None."""
    found = direction_of(comparison.measure)
    if found is None or comparison.word not in SWEEP_WORDS[:2]:
        return None
    better, what = found
    if comparison.word == better:
        return None
    return f"{what}: {comparison.word} is worse"


def rows_for_table(result: Comparisons) -> pd.DataFrame:
    """verdicts.csv / report.md's table: one row per setting × measure."""
    records = []
    for c in result.decided:
        half = c.half_width
        records.append({
            "setting": c.setting, "baseline": c.baseline, "measure": c.measure, "seeds": f"{c.seeds[0]} + {c.seeds[1]}",
            "baseline mean": c.before, "setting mean": c.after, "effect": c.effect,
            "interval low": None if half is None else c.effect - half, "interval high": None if half is None else
            c.effect + half, "p": c.p, "p (Holm)" if result.corrected else "p (uncorrected)": c.p_adjusted,
            "family": f"{c.family} ({c.family_size})" if c.p is not None else "", "verdict": c.word,
            "noise": c.noise_text() if c.word != SWEEP_WORDS[4] else c.note, "seeds to decide": advice(c),
            "against": against(c) or "", **kept_columns(result, c),
        })  # fmt: skip
    return pd.DataFrame(records)


def kept_columns(result: Comparisons, c: Comparison) -> dict[str, str]:
    """A generation measure's kept tokens and ended-early share, baseline → setting (the runs table's columns)."""
    found = re.match(r"^generation/([^/]+)/", c.measure)
    if not found or result.kept is None:
        return {"mean kept tokens": "", "ended early": ""}
    shown = {}
    for name, column in (("mean kept tokens", "mean_kept_tokens"), ("ended early", "ended_early")):
        pair = result.kept.get((c.baseline, c.setting, f"generation/{found.group(1)}/{column}"))
        shown[name] = "" if pair is None else f"{pair[0]:.3g} → {pair[1]:.3g}"
    return shown


def advice(c: Comparison) -> str:
    if c.word == SWEEP_WORDS[4]:
        return ""
    if c.word not in SWEEP_WORDS[2:4] or min(c.seeds) < 2:
        return "" if c.word in SWEEP_WORDS[:2] else "at least 2 per arm to know the spread"
    if c.noise == 0:
        return ""
    if c.seeds_advice is None:
        return ("none: the evaluation set's own error is wider than the effect" if c.evaluation else
                "over 1,000 per arm: the effect is tiny beside the spread")  # fmt: skip
    return f"about {c.seeds_advice} per arm"


def effect_text(c: Comparison) -> str:
    """``+16.5 [+11.7, +21.3]`` (the 95% interval), or the effect alone and why it has no interval."""
    if c.word == SWEEP_WORDS[4]:
        return "not measured"
    if c.noise == 0:
        return f"{c.effect:+.3g} (no interval: every run gave the same value)"
    if c.half_width is None or math.isnan(c.half_width):
        return f"{c.effect:+.3g} (noise unknown)"
    return f"{c.effect:+.3g} [{c.effect - c.half_width:+.3g}, {c.effect + c.half_width:+.3g}]"


def measure_order(measure: str) -> tuple[int, str]:
    """The verdict table's order: losses first, then the cone, probes, generation, the rest."""
    order = [r"^val_|^average/", r"isotropy/embedding", r"isotropy/layer", r"^analysis/", r"^(sts|wic|glue)/",
             r"^generation/", r"^lm_eval/"]  # fmt: skip
    return next((i for i, p in enumerate(order) if re.search(p, measure)), len(order)), measure
