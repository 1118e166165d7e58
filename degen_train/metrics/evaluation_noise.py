"""The evaluation set's share of a verdict's noise: how much a score would move on another sample of items.

Two arms scored on the *same* items (STS-B dev's 1,500 pairs, WiC's held-out half, a GLUE dev set, a perplexity text)
share those items' luck, so the difference of their scores is far less noisy than two independent samples would be:
its evaluation-set error is a **paired bootstrap** over the items (Koehn 2004; Berg-Kirkpatrick et al. 2012): resample
the items with replacement, score every run of both arms on the resample, and take the standard deviation of the
difference of the arms' mean scores. Where a run kept no per-item scores, each arm's own sampling error is added as
if the arms were scored on different samples (the closed forms below), which overstates it (2.6× on STS-B in the
issue-64 audit).

Per-item records are what a probe keeps in eval.json's ``items`` (``ItemScores``): the kind says how a score is made
from them: ``spearman`` (prediction, gold) → Spearman ×100, ``accuracy`` (correct) → mean ×100, ``perplexity``
(nll, tokens) → exp(Σ nll / Σ tokens), ``repetition`` (unique, total: one text's n-grams) → SimCTG's rep-n
100·(1 − Σ unique / Σ total), ``diversity`` (unique_N, total_N for N = 2, 3, 4) → Π(1 − rep-N/100), ``mean`` (value)
→ the mean (coherence, per prompt).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

KINDS = ("spearman", "accuracy", "perplexity", "repetition", "diversity", "mean")
RESAMPLES = 1000  # the bootstrap's resamples (at least the 1,000)
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class ItemScores:
    """One run's per-item record of a measure: ``kind`` and its columns (equal lengths, one entry per item)."""

    kind: str  # spearman | accuracy | perplexity
    columns: dict[str, np.ndarray]

    @property
    def items(self) -> int:
        return len(next(iter(self.columns.values())))

    def score(self, index: np.ndarray) -> float:
        """The measure on the items at ``index`` (a resample)."""
        if self.kind == "spearman":
            from scipy.stats import spearmanr

            return 100 * float(spearmanr(self.columns["prediction"][index], self.columns["gold"][index])[0])
        if self.kind == "accuracy":
            return 100 * float(np.mean(self.columns["correct"][index]))
        if self.kind == "perplexity":
            tokens = np.sum(self.columns["tokens"][index])
            return float(math.exp(np.sum(self.columns["nll"][index]) / tokens)) if tokens else math.nan
        if self.kind == "repetition":
            return _repetition(self.columns["unique"][index], self.columns["total"][index])
        if self.kind == "diversity":
            return math.prod(1 - _repetition(self.columns[f"unique_{n}"][index], self.columns[f"total_{n}"][index])
                             / 100 for n in (2, 3, 4))  # fmt: skip
        if self.kind == "mean":
            return float(np.mean(self.columns["value"][index]))
        raise ValueError(f"per-item kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def record(self) -> dict[str, str | list[float]]:
        """eval.json's form: ``{"kind": ..., COLUMN: [...]}``."""
        return {"kind": self.kind, **{name: [float(v) for v in values] for name, values in self.columns.items()}}

    @classmethod
    def kept(cls, record: dict | None) -> ItemScores | None:
        """``of`` a record a run kept, or None where it kept none or one that does not fit."""
        try:
            return cls.of(record) if record else None
        except (ValueError, KeyError):
            return None

    @classmethod
    def of(cls, record: dict) -> ItemScores:
        """From eval.json's record ``{"kind": ..., COLUMN: [...], ...}``."""
        columns = {k: np.asarray(v, dtype=float) for k, v in record.items() if k != "kind"}
        if not columns or len({len(v) for v in columns.values()}) != 1:
            raise ValueError("a per-item record holds columns of one length")
        return cls(str(record["kind"]), columns)


def paired_bootstrap_se(base: Sequence[ItemScores], other: Sequence[ItemScores], *, resamples: int = RESAMPLES,
                        seed: int = BOOTSTRAP_SEED) -> float | None:  # fmt: skip
    """The standard error of mean(other's scores) − mean(base's scores) over item resamples, every run of both arms
    scored on the same resample (seeded); None when the arms were not scored on the same number of items (not the
    same set) or a run has no record."""
    runs = [*base, *other]
    if not base or not other or len({(r.kind, r.items) for r in runs}) != 1:
        return None
    generator = np.random.default_rng(seed)
    count = runs[0].items
    differences = np.empty(resamples)
    for b in range(resamples):
        index = generator.integers(0, count, size=count)
        differences[b] = (np.mean([run.score(index) for run in other]) - np.mean([run.score(index) for run in base]))
    differences = differences[np.isfinite(differences)]
    return float(np.std(differences, ddof=1)) if len(differences) > 1 else None


def _repetition(unique: np.ndarray, total: np.ndarray) -> float:
    count = np.sum(total)
    return float(100 * (1 - np.sum(unique) / count)) if count else 0.0


def bootstrap_se(scores: ItemScores, *, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> float | None:
    """One run's sampling error over its items: the standard deviation of the measure over item resamples (seeded);
    None with fewer than two items or no finite resample."""
    if scores.items < 2:
        return None
    generator = np.random.default_rng(seed)
    values = np.array([scores.score(generator.integers(0, scores.items, size=scores.items))
                       for _ in range(resamples)])  # fmt: skip
    values = values[np.isfinite(values)]
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


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
