"""One rule for every verdict of the reproduce pages: an effect beside its noise, and one of three words.

The noise of a difference of two means is its standard error: the seed spread of each arm (pooled, over its
pretraining seeds) and, for a score on an evaluation set, that set's sampling error (a GLUE dev set of 277 items
gives an accuracy a standard error of about 3 points on its own). The rule, written once:

- a directional claim (``expect`` lower or higher): **shows** when the effect goes the expected way by more than
  twice its noise; **does not show** when it goes the other way by more than that; else **cannot tell at this
  scale**;
- a claim of no cost (``expect`` same, or not higher, within ``tolerance`` of the baseline, 2% unless said):
  **shows** when the effect's two-noise interval lies inside the tolerance (for "not higher": below its upper
  end); **does not show** when the interval lies wholly outside; else **cannot tell at this scale**;
- an arm with one seed has no seed spread: **cannot tell at this scale** (one seed: its noise is unknown), unless a
  sampling error alone already decides a directional claim against it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WORDS = ("shows", "does not show", "cannot tell at this scale")
TOLERANCE = 0.02  # a claim of no cost: within 2% of the baseline


@dataclass(frozen=True)
class Verdict:
    metric: str
    base: str
    other: str
    before: float
    after: float
    noise: float | None  # the standard error of after − before; None: unknown (one seed, no sampling error)
    expect: str
    word: str

    @property
    def effect(self) -> float:
        return self.after - self.before

    def line(self) -> str:
        """``metric: before (base) → after (other), effect E ± 2σ, expected X: **word**``."""
        noise = f" ± {2 * self.noise:.3g} (two standard errors)" if self.noise is not None else " (noise unknown)"
        return (f"{self.metric}: {self.before:.4g} ({self.base}) → {self.after:.4g} ({self.other}), effect "
                f"{self.effect:+.3g}{noise}, expected {self.expect}: **{self.word}**")  # fmt: skip


def difference_noise(base: Sequence[float], other: Sequence[float], *, sampling: float = 0.0) -> float | None:
    """The standard error of mean(other) − mean(base): √(s²/n_base + s²/n_other + 2·sampling²), s the seed spread
    pooled over both arms (ddof 1), ``sampling`` each mean's evaluation-set standard error (both arms scored on the
    same kind of set). None when the seed spread is unknown (an arm of one seed) and no sampling error is given."""
    n_base, n_other = len(base), len(other)
    sampled = 2 * sampling**2
    if n_base < 2 or n_other < 2:
        return math.sqrt(sampled) if sampling else None
    pooled = (_ss(base) + _ss(other)) / (n_base + n_other - 2)
    return math.sqrt(pooled / n_base + pooled / n_other + sampled)


def _ss(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values)


def judge(metric: str, base: str, other: str, before: Sequence[float], after: Sequence[float], *, expect: str,
          sampling: float = 0.0, tolerance: float = TOLERANCE) -> Verdict:  # fmt: skip
    """The verdict on ``after`` (the other arm's values) against ``before`` (the base arm's), by the module's rule."""
    if expect not in ("lower", "higher", "same", "not higher"):
        raise ValueError(f"expect={expect!r} is not one of lower, higher, same, not higher")
    mean_before, mean_after = sum(before) / len(before), sum(after) / len(after)
    noise = difference_noise(before, after, sampling=sampling)
    effect = mean_after - mean_before
    seeds_known = min(len(before), len(after)) >= 2
    if expect in ("lower", "higher"):
        signed = effect if expect == "higher" else -effect  # > 0: the expected way
        if noise is not None and abs(effect) > 2 * noise and (seeds_known or sampling):
            word = WORDS[0] if signed > 0 else WORDS[1]
        else:
            word = WORDS[2]
    else:
        allowed = tolerance * abs(mean_before)
        if noise is None or not seeds_known:
            word = WORDS[2]
        else:
            low, high = effect - 2 * noise, effect + 2 * noise
            inside = high <= allowed and (expect == "not higher" or low >= -allowed)
            outside = low > allowed or (expect == "same" and high < -allowed)
            word = WORDS[0] if inside else WORDS[1] if outside else WORDS[2]
    return Verdict(metric, base, other, mean_before, mean_after, noise, expect, word)


def accuracy_sampling_error(accuracy: float, items: int) -> float:
    """The standard error of an accuracy (in points, ×100) on ``items`` evaluation items: 100·√(p(1 − p)/n)."""
    p = accuracy / 100
    return 100 * math.sqrt(max(p * (1 - p), 0.0) / items)


def correlation_sampling_error(correlation: float, items: int) -> float:
    """The standard error of a correlation (in points, ×100) on ``items`` pairs: 100·(1 − r²)/√(n − 1) (the normal
    approximation of r's sampling distribution; Pearson and Spearman alike)."""
    r = correlation / 100
    return 100 * (1 - r * r) / math.sqrt(max(items - 1, 1))


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
