"""One rule for every verdict: a reproduce page's claims and a sweep report's comparisons, an effect beside its noise.

The noise of a difference of two means is its standard error over the two sources a sweep samples: the seeds (Welch:
each arm its own seed spread, which already holds each run's own luck on the items) and, for a score on an
evaluation set, the items both arms share (metrics/evaluation_noise.py): the crossed design's items term, taken from
a bootstrap over the items paired by id with the run × item term removed once, where the runs kept per-item scores;
else each arm's own sampling error as if the sets were independent (an overstatement, never a narrowing). The
interval is the effect ± t·SE, t Student's 97.5% quantile at the **seeds'** Welch–Satterthwaite degrees of freedom:
an added noise source widens the SE and never lifts the df, so an interval with the evaluation term always contains
the seeds-only one. Two uses, one rule (RULE, SWEEP_RULE are the texts the pages print):

- a reproduce claim (``judge``, ``expect`` lower or higher): **shows** when the 95% interval lies wholly on the
  expected side of zero; **does not show** when it lies wholly on the other side; else **cannot tell at this scale**;
  a claim of no cost (``expect`` same, or not higher, within ``tolerance`` of the baseline, 2% unless said): **shows**
  when the interval lies inside the tolerance (for "not higher": below its upper end), **does not show** when it
  lies wholly outside;
- a sweep's setting against its baseline (``compare``, no side expected): **lower** or **higher** when Welch's t test
  rejects no difference at 5% after Holm's correction over the family (``decide``: every comparison of the report,
  settings × measures; or the primary measures' and the exploratory ones' apart), else **no difference shown**; with
  ``seeds_to_decide``, about how many seeds per arm would decide an effect of the observed size at the observed
  spread (80% power) at the level Holm's step applied to that comparison;
- fewer than 2 seeds in either arm, or a noise of zero (identical seeds and no evaluation-set error), is always
  **cannot tell**: the spread is unknown, and an effect of any size would otherwise decide; such a row has no
  interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from degen_train.metrics.evaluation_noise import RESAMPLES

WORDS = ("shows", "does not show", "cannot tell at this scale")
SWEEP_WORDS = ("lower", "higher", "no difference shown", "cannot tell", "not measured")
POWER = 0.8  # the seeds advice: the seeds per arm that would decide an effect of the observed size this often
TOLERANCE = 0.02  # a claim of no cost: within 2% of the baseline
CONFIDENCE = 0.95  # two-sided: the interval holds the true difference 95 times in 100
MIN_SEEDS = 2  # per arm: fewer leaves the seed spread unknown
# A generation measure is judged only where its decoding's continuations keep at least this many tokens on average
# in both arms (degen-report --fewest-kept-tokens; the reproduce pages' claims): SimCTG's tables are over 256-token
# continuations, and a text ended after 2 tokens has a rep-n of 0 and a diversity of 1 for want of text.
FEWEST_KEPT_TOKENS = 32
NOISE = (
    f"Welch's t on the seed means (each arm's own seed spread, which holds each run's own luck on the items; "
    f"Student's t quantile at the seeds' Welch–Satterthwaite degrees of freedom, never more), the standard error "
    f"adding the items' share where the measure has an evaluation set (GLUE dev accuracies and correlations, STS-B "
    f"Spearman, WiC accuracy, generation measures over prompts): where the runs kept per-item scores, a bootstrap "
    f"over the items paired by id ({RESAMPLES:,} resamples, seeded), every run of both arms rescored, with the "
    f"run × item term the seeds already hold removed once (a seeds × items crossed design, Owen 2007); else each "
    f"arm's own sampling error, as if scored on different sets."
)
RULE = (
    f"Each verdict states the effect (the difference of the two arms' means) with its {CONFIDENCE:.0%} interval: "
    f"{NOISE} A directional claim **shows** when "
    f"the interval lies wholly on the paper's side of zero and **does not show** when it lies wholly on the other; a "
    f"claim of no cost (same, not higher) shows when the interval sits within {TOLERANCE:.0%} of the baseline (for "
    f"\"not higher\": below its upper end). Anything else, an arm of fewer than {MIN_SEEDS} seeds, and a noise of "
    f"zero are **cannot tell at this scale**."
)  # fmt: skip


SWEEP_RULE = (
    f"Each setting is compared with the baseline run that equals it in every other swept key: the effect (the "
    f"difference of the two arms' means over seeds) with its {CONFIDENCE:.0%} interval by {NOISE} "
    f"The verdict is lower or higher when Welch's two-sided t test rejects no difference at "
    f"{1 - CONFIDENCE:.0%} after Holm's correction over the family the report names (by default every comparison "
    f"it judges, settings × measures; with --primary, the primary measures' comparisons and the exploratory ones', "
    f"each corrected among themselves; the interval shown is uncorrected), else no difference shown; an arm of fewer "
    f"than {MIN_SEEDS} seeds cannot tell. Seeds to decide: about how many seeds per arm would decide an effect of the "
    f"observed size at the observed spread with {POWER:.0%} power at the level Holm's step held that comparison to "
    f"(statsmodels' TTestIndPower, the evaluation set's error held fixed)."
)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    metric: str
    base: str
    other: str
    before: float
    after: float
    noise: float | None  # the standard error of after − before; None: unknown (an arm of one seed)
    expect: str
    word: str
    dof: float | None = None  # the seeds' Welch–Satterthwaite degrees of freedom
    sampled: str = ""  # the noise holds the evaluation set's error: "paired" (by item id) | "independent" | ""
    note: str = ""  # why the evaluation set's error is not paired, where it could have been

    @property
    def effect(self) -> float:
        return self.after - self.before

    @property
    def half_width(self) -> float | None:
        """t·SE: half the 95% interval's width; None when the noise is unknown or zero (no interval)."""
        if not self.noise or self.dof is None:
            return None
        return t_quantile(self.dof) * self.noise

    def interval_text(self) -> str:
        """``± H (95%, t at df D)``, or why there is no interval."""
        if self.half_width is None:
            return "(noise unknown)" if self.noise is None else "(no interval: every run gave the same value)"
        sampled = {"paired": ", with its evaluation set, paired by item", "independent": ", with its evaluation set"}
        note = f"; {self.note}" if self.note else ""
        evaluation = sampled.get(self.sampled, "")
        return f"± {self.half_width:.3g} ({CONFIDENCE:.0%}, t at df {self.dof:.3g}{evaluation}{note})"

    def line(self) -> str:
        """``metric: before (base) → after (other), effect E ± H (95%, t at df D), expected X: **word**``."""
        return (f"{self.metric}: {self.before:.4g} ({self.base}) → {self.after:.4g} ({self.other}), effect "
                f"{self.effect:+.3g} {self.interval_text()}, expected {self.expect}: **{self.word}**")  # fmt: skip


def t_quantile(dof: float) -> float:
    """Student's t quantile at (1 + CONFIDENCE) / 2 for ``dof`` degrees of freedom (the normal's at infinity)."""
    from scipy import stats

    level = (1 + CONFIDENCE) / 2
    return float(stats.norm.ppf(level) if math.isinf(dof) else stats.t.ppf(level, dof))


def welch(base: Sequence[float], other: Sequence[float], *, sampling: float = 0.0,
          paired: float | None = None) -> tuple[float, float] | None:  # fmt: skip
    """(standard error, degrees of freedom) of mean(other) − mean(base): SE² = s_b²/n_b + s_o²/n_o + E (s each arm's
    own seed spread, ddof 1), E the items' share of the difference's variance: ``paired``² (the crossed design's
    items term, metrics/evaluation_noise.crossed_noise) when given, else 2·``sampling``² (each arm's own sampling
    error, the sets taken as independent). df is the seeds' own, Welch–Satterthwaite's (Σv)² / Σ v_i²/(n_i − 1) over
    the two seed terms (n_b + n_o − 2, its ceiling, where both spreads are zero): E adds width and no degrees of
    freedom, so the interval never narrows when a noise source is added. None when an arm has fewer than MIN_SEEDS
    seeds."""
    if min(len(base), len(other)) < MIN_SEEDS:
        return None
    seed_terms = [(_ss(arm) / (len(arm) - 1) / len(arm), len(arm) - 1) for arm in (base, other)]
    evaluation = paired**2 if paired is not None else 2 * sampling**2
    seeds = sum(v for v, _ in seed_terms)
    denominator = sum(v * v / df for v, df in seed_terms)
    dof = seeds**2 / denominator if denominator > 0 else float(len(base) + len(other) - 2)
    return math.sqrt(seeds + evaluation), dof


def difference_noise(base: Sequence[float], other: Sequence[float], *, sampling: float = 0.0,
                     paired: float | None = None) -> float | None:  # fmt: skip
    """The standard error of mean(other) − mean(base) (welch's), None when an arm has fewer than MIN_SEEDS seeds."""
    found = welch(base, other, sampling=sampling, paired=paired)
    return None if found is None else found[0]


def _ss(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values)


def judge(metric: str, base: str, other: str, before: Sequence[float], after: Sequence[float], *, expect: str,
          sampling: float = 0.0, paired: float | None = None, tolerance: float = TOLERANCE,
          note: str = "") -> Verdict:  # fmt: skip
    """The verdict on ``after`` (the other arm's values) against ``before`` (the base arm's), by the module's rule."""
    if expect not in ("lower", "higher", "same", "not higher"):
        raise ValueError(f"expect={expect!r} is not one of lower, higher, same, not higher")
    mean_before, mean_after = sum(before) / len(before), sum(after) / len(after)
    effect = mean_after - mean_before
    found = welch(before, after, sampling=sampling, paired=paired)
    noise, dof = found if found is not None else (None, None)
    word = WORDS[2]
    if noise is not None and noise > 0:
        half = t_quantile(dof) * noise
        low, high = effect - half, effect + half
        if expect in ("lower", "higher"):
            expected_side = high < 0 if expect == "lower" else low > 0
            other_side = low > 0 if expect == "lower" else high < 0
            word = WORDS[0] if expected_side else WORDS[1] if other_side else WORDS[2]
        else:
            allowed = tolerance * abs(mean_before)
            inside = high <= allowed and (expect == "not higher" or low >= -allowed)
            outside = low > allowed or (expect == "same" and high < -allowed)
            word = WORDS[0] if inside else WORDS[1] if outside else WORDS[2]
    sampled = "paired" if paired is not None else "independent" if sampling > 0 else ""
    return Verdict(metric, base, other, mean_before, mean_after, noise, expect, word, dof, sampled, note)


@dataclass(frozen=True)
class Comparison:
    """A sweep's setting against its baseline on one measure (``compare``): the effect, its noise and the word."""

    measure: str
    setting: str
    baseline: str
    before: float
    after: float
    seeds: tuple[int, int]  # (baseline's, setting's)
    noise: float | None
    dof: float | None
    p: float | None  # Welch's two-sided p-value; None: unknown noise
    evaluation: str = ""  # the evaluation set's share: "paired" | "independent" | ""
    spreads: tuple[float, float] = (0.0, 0.0)  # each arm's seed standard deviation (ddof 1)
    evaluation_variance: float = 0.0  # the items' share of the difference's variance
    p_adjusted: float | None = None  # after Holm's correction over its family
    word: str = SWEEP_WORDS[3]
    seeds_advice: int | None = None  # seeds per arm that would decide it at 80% power; None where no count would
    family: str = ""  # the family Holm corrected over: "all", "primary", "exploratory" or "uncorrected"
    family_size: int = 1
    alpha: float = 1 - CONFIDENCE  # the level Holm's step held this comparison to (the seeds advice's)
    note: str = ""  # why the evaluation set's error is not paired, where it could have been

    @property
    def effect(self) -> float:
        return self.after - self.before

    @property
    def half_width(self) -> float | None:
        """t·SE; None when the noise is unknown or zero: such a row has no interval."""
        return None if not self.noise or self.dof is None else t_quantile(self.dof) * self.noise

    def noise_text(self) -> str:
        """What the noise holds: ``seeds (df 3.9) + evaluation set, paired by item``, or why it is unknown."""
        if self.noise is None:
            return f"unknown: {min(self.seeds)} seed(s) in an arm"
        if self.noise == 0:
            return "none: every run gave the same value"
        evaluation = {"paired": " + evaluation set, paired by item", "independent": " + evaluation set"}
        note = f" ({self.note})" if self.note else ""
        return f"seeds (df {self.dof:.3g}){evaluation.get(self.evaluation, '')}{note}"


def compare(measure: str, setting: str, baseline: str, before: Sequence[float], after: Sequence[float], *,
            sampling: float = 0.0, paired: float | None = None, note: str = "") -> Comparison:  # fmt: skip
    """``after`` (the setting's seeds) against ``before`` (the baseline's): the effect, Welch's noise (with the
    evaluation set's, paired where given) and the two-sided p-value at the seeds' df; the word is set by ``decide``
    (after Holm)."""
    from scipy import stats

    mean_before, mean_after = sum(before) / len(before), sum(after) / len(after)
    found = welch(before, after, sampling=sampling, paired=paired)
    noise, dof = found if found is not None else (None, None)
    p = None
    if noise is not None and noise > 0:
        p = float(2 * stats.t.sf(abs((mean_after - mean_before) / noise), dof))
    evaluation = "paired" if paired is not None else "independent" if sampling > 0 else ""
    spreads = tuple(math.sqrt(_ss(arm) / (len(arm) - 1)) if len(arm) > 1 else 0.0 for arm in (before, after))
    variance = paired**2 if paired is not None else 2 * sampling**2
    return Comparison(measure, setting, baseline, mean_before, mean_after, (len(before), len(after)), noise, dof, p,
                      evaluation, spreads, variance, note=note)  # fmt: skip


FAMILIES = ("all", "primary", "exploratory", "uncorrected")


def family_of(comparison: Comparison, primary: Sequence[str] | None) -> str:
    """The Holm family a comparison belongs to: ``all`` without primary measures, else ``primary`` or
    ``exploratory``."""
    if not primary:
        return "all"
    return "primary" if comparison.measure in primary else "exploratory"


def decide(comparisons: Sequence[Comparison], *, correct: bool = True,
           primary: Sequence[str] | None = None) -> list[Comparison]:  # fmt: skip
    """Each comparison's word, by Holm's correction over its family (statsmodels' multipletests): every comparison
    given (settings × measures), or with ``primary`` measures the primary comparisons and the exploratory ones, each
    corrected among themselves; each alone when ``correct`` is false. With the seeds advice, at the level Holm's
    step held the comparison to (α / (k − j + 1) for the j-th smallest p of k), for those that cannot tell or show
    no difference."""
    from dataclasses import replace

    from statsmodels.stats.multitest import multipletests

    alpha = 1 - CONFIDENCE
    decided = list(comparisons)
    names = [family_of(c, primary) if correct else "uncorrected" for c in comparisons]
    for name in dict.fromkeys(names):
        family = [i for i, c in enumerate(comparisons) if names[i] == name and c.p is not None]
        size = len(family) if name != "uncorrected" else 1
        if name != "uncorrected" and family:
            adjusted = list(multipletests([comparisons[i].p for i in family], alpha=alpha, method="holm")[1])
        else:
            adjusted = [comparisons[i].p for i in family]
        ranks = {i: rank for rank, i in enumerate(sorted(family, key=lambda i: comparisons[i].p))}
        for i, p in zip(family, adjusted, strict=True):
            c = comparisons[i]
            word = (SWEEP_WORDS[0] if c.effect < 0 else SWEEP_WORDS[1]) if p < alpha else SWEEP_WORDS[2]
            level = alpha / (size - ranks[i]) if name != "uncorrected" else alpha
            decided[i] = replace(c, p_adjusted=float(p), word=word, family=name, family_size=size, alpha=level)
        for i, c in enumerate(comparisons):  # those without a p (unknown noise) still name their family
            if names[i] == name and c.p is None:
                decided[i] = replace(c, family=name, family_size=size)
    for i, c in enumerate(decided):
        if c.word in SWEEP_WORDS[2:4] and min(c.seeds) >= MIN_SEEDS:
            decided[i] = replace(c, seeds_advice=seeds_to_decide(c))
    return decided


def seeds_to_decide(comparison: Comparison, *, most: int = 1000) -> int | None:
    """About how many seeds per arm would decide an effect of the observed size at the observed spread, at POWER
    (two-sided, at the comparison's ``alpha``: the level its Holm step used): the smallest n whose power, by
    statsmodels' TTestIndPower (the noncentral t), reaches it, with each arm's seed variance pooled over n seeds and
    the evaluation set's variance unchanged (more seeds never shrink it). None when no count up to ``most`` would
    (the evaluation set's error alone is too wide)."""
    from statsmodels.stats.power import TTestIndPower

    before_sd, after_sd = comparison.spreads
    seed_variance = (before_sd**2 + after_sd**2) / 2  # the pooled per-seed variance
    evaluation = comparison.evaluation_variance
    effect = abs(comparison.effect)
    if effect == 0 or (seed_variance == 0 and evaluation == 0):
        return None
    power = TTestIndPower()
    for n in range(MIN_SEEDS, most + 1):
        standard_error = math.sqrt(2 * seed_variance / n + evaluation)
        size = effect / standard_error / math.sqrt(n / 2)  # Cohen's d whose noncentrality d·√(n/2) is effect/SE
        if power.power(effect_size=size, nobs1=n, alpha=comparison.alpha, ratio=1.0) >= POWER:
            return n
    return None
