"""One rule for every verdict of the reproduce pages: an effect beside its noise, and one of three words.

The noise of a difference of two means is its standard error: each arm's seed spread over its pretraining seeds
(Welch: each arm its own variance) and, for a score on an evaluation set, that set's sampling error (a GLUE dev set
of 277 items gives an accuracy a standard error of about 3 points on its own), which seeds do not average away. The
interval is Welch's: the effect ± t·SE, t Student's 97.5% quantile at the Welch–Satterthwaite degrees of freedom
(the sampling error counts as a known variance, with no degrees of freedom of its own to lose). The rule, written
once (RULE is the text the pages print):

- a directional claim (``expect`` lower or higher): **shows** when the 95% interval lies wholly on the expected
  side of zero; **does not show** when it lies wholly on the other side; else **cannot tell at this scale**;
- a claim of no cost (``expect`` same, or not higher, within ``tolerance`` of the baseline, 2% unless said):
  **shows** when the 95% interval lies inside the tolerance (for "not higher": below its upper end); **does not
  show** when it lies wholly outside; else **cannot tell at this scale**;
- fewer than 2 seeds in either arm, or a noise of zero (identical seeds and no evaluation-set error), is always
  **cannot tell at this scale**: the spread is unknown, and an effect of any size would otherwise decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WORDS = ("shows", "does not show", "cannot tell at this scale")
TOLERANCE = 0.02  # a claim of no cost: within 2% of the baseline
CONFIDENCE = 0.95  # two-sided: the interval holds the true difference 95 times in 100
MIN_SEEDS = 2  # per arm: fewer leaves the seed spread unknown
RULE = (
    f"Each verdict states the effect (the difference of the two arms' means) with its {CONFIDENCE:.0%} interval: "
    f"Welch's t on the seed means (each arm's own seed spread; Student's t quantile at the Welch–Satterthwaite "
    f"degrees of freedom), the standard error adding each arm's evaluation-set sampling error where the measure has "
    f"one (GLUE dev accuracies and correlations, STS-B Spearman, WiC accuracy). A directional claim **shows** when "
    f"the interval lies wholly on the paper's side of zero and **does not show** when it lies wholly on the other; a "
    f"claim of no cost (same, not higher) shows when the interval sits within {TOLERANCE:.0%} of the baseline (for "
    f"\"not higher\": below its upper end). Anything else, an arm of fewer than {MIN_SEEDS} seeds, and a noise of "
    f"zero are **cannot tell at this scale**."
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
    dof: float | None = None  # Welch–Satterthwaite's degrees of freedom (inf: the sampling error alone)
    sampled: bool = False  # the noise holds the evaluation set's sampling error

    @property
    def effect(self) -> float:
        return self.after - self.before

    @property
    def half_width(self) -> float | None:
        """t·SE: half the 95% interval's width; None when the noise is unknown."""
        if self.noise is None or self.dof is None:
            return None
        return t_quantile(self.dof) * self.noise

    def interval_text(self) -> str:
        """``± H (95%, t at df D)``, or ``(noise unknown)``."""
        if self.half_width is None:
            return "(noise unknown)"
        df = "∞" if math.isinf(self.dof) else f"{self.dof:.3g}"
        sampled = ", with its evaluation set" if self.sampled else ""
        return f"± {self.half_width:.3g} ({CONFIDENCE:.0%}, t at df {df}{sampled})"

    def line(self) -> str:
        """``metric: before (base) → after (other), effect E ± H (95%, t at df D), expected X: **word**``."""
        return (f"{self.metric}: {self.before:.4g} ({self.base}) → {self.after:.4g} ({self.other}), effect "
                f"{self.effect:+.3g} {self.interval_text()}, expected {self.expect}: **{self.word}**")  # fmt: skip


def t_quantile(dof: float) -> float:
    """Student's t quantile at (1 + CONFIDENCE) / 2 for ``dof`` degrees of freedom (the normal's at infinity)."""
    from scipy import stats

    level = (1 + CONFIDENCE) / 2
    return float(stats.norm.ppf(level) if math.isinf(dof) else stats.t.ppf(level, dof))


def welch(base: Sequence[float], other: Sequence[float], *, sampling: float = 0.0) -> tuple[float, float] | None:
    """(standard error, degrees of freedom) of mean(other) − mean(base): SE² = s_b²/n_b + s_o²/n_o + 2·sampling²
    (s each arm's own seed spread, ddof 1; ``sampling`` each arm's evaluation-set standard error), df by
    Welch–Satterthwaite, (Σv)² / Σ v_i²/(n_i − 1), the sampling term counting as known (no degrees of freedom lost).
    None when an arm has fewer than MIN_SEEDS seeds."""
    if min(len(base), len(other)) < MIN_SEEDS:
        return None
    seed_terms = [(_ss(arm) / (len(arm) - 1) / len(arm), len(arm) - 1) for arm in (base, other)]
    variance = sum(v for v, _ in seed_terms) + 2 * sampling**2
    denominator = sum(v * v / df for v, df in seed_terms)
    dof = variance**2 / denominator if denominator > 0 else math.inf
    return math.sqrt(variance), dof


def difference_noise(base: Sequence[float], other: Sequence[float], *, sampling: float = 0.0) -> float | None:
    """The standard error of mean(other) − mean(base) (welch's), None when an arm has fewer than MIN_SEEDS seeds."""
    found = welch(base, other, sampling=sampling)
    return None if found is None else found[0]


def _ss(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values)


def judge(metric: str, base: str, other: str, before: Sequence[float], after: Sequence[float], *, expect: str,
          sampling: float = 0.0, tolerance: float = TOLERANCE) -> Verdict:  # fmt: skip
    """The verdict on ``after`` (the other arm's values) against ``before`` (the base arm's), by the module's rule."""
    if expect not in ("lower", "higher", "same", "not higher"):
        raise ValueError(f"expect={expect!r} is not one of lower, higher, same, not higher")
    mean_before, mean_after = sum(before) / len(before), sum(after) / len(after)
    effect = mean_after - mean_before
    found = welch(before, after, sampling=sampling)
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
    return Verdict(metric, base, other, mean_before, mean_after, noise, expect, word, dof, sampling > 0)


def accuracy_sampling_error(accuracy: float, items: int) -> float:
    """The standard error of an accuracy (in points, ×100) on ``items`` evaluation items: 100·√(p(1 − p)/n)."""
    p = accuracy / 100
    return 100 * math.sqrt(max(p * (1 - p), 0.0) / items)


def correlation_sampling_error(correlation: float, items: int, *, spearman: bool = False) -> float:
    """The standard error of a correlation (in points, ×100) on ``items`` pairs through Fisher's z: z = atanh r has
    standard error 1/√(n − 3) (Fisher 1921), and for Spearman's ρ √(1.06/(n − 3)) (Fieller, Hartley & Pearson 1957);
    back on r's scale by the delta method, (1 − r²)·SE_z."""
    r = correlation / 100
    spread = math.sqrt((1.06 if spearman else 1.0) / max(items - 3, 1))
    return 100 * (1 - r * r) * spread


def average_sampling_error(errors: Sequence[float]) -> float:
    """The standard error of an unweighted mean of independent task scores: √(Σ SE²) / k."""
    return math.sqrt(sum(e * e for e in errors)) / len(errors)


CORRELATION_TASKS = ("stsb",)  # scored by a correlation; the others by an accuracy (F1 and Matthews read as one)


def glue_sampling_error(scores: dict[str, tuple[float, int]]) -> float:
    """The dev sets' sampling error of a (partial) GLUE average: {task: (its score, its dev items)}, each task's
    standard error from its split size and metric, combined as the average combines the tasks."""
    errors = [correlation_sampling_error(score, items) if task in CORRELATION_TASKS else
              accuracy_sampling_error(score, items) for task, (score, items) in scores.items()]  # fmt: skip
    return average_sampling_error(errors)
