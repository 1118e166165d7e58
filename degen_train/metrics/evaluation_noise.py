"""The evaluation set's share of a verdict's noise: how much a difference would move on another sample of items.

A sweep's arms are runs (pretraining seeds) scored on items (STS-B pairs, WiC items, prompts): a **crossed design**,
seeds × items (Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat. 1(2); its random-effects model
Y_ri = μ + a_r + b_i + e_ri). The difference D of the two arms' mean scores then has three sources of noise:

- the seeds, a_r: each arm's spread over its runs (metrics/verdicts.py's Welch term);
- the run × item term, e_ri: each run's own luck on the items. It **is already in** each run's score, so it is in
  the seeds' spread: s²_arm estimates Var(a) + Var(ē_r);
- the items, b_i: the luck both arms share on the items, which pairing cancels except where the arms' per-item
  scores differ (b_i^B − b_i^A). No seed spread shows it.

``crossed_noise`` estimates the third once: a bootstrap over items (Koehn 2004), every run of both arms rescored on
the same resample, gives Var*(D) = Var(b̄^B − b̄^A) + Var(ē^A)/n_A + Var(ē^B)/n_B; each arm's run × item share,
Var(ē)/n, is estimated from the same resamples (the spread across an arm's runs of their resample deviations) and
removed, so that the verdict's SE² = seeds' term + items' term counts each source once (the variance decomposition
of Owen's §2, with the items' share taken from the bootstrap so that nonlinear scores, Spearman's ρ and ratio
perplexities, need no linearisation). Owen's pigeonhole resampling itself (seeds and items resampled jointly) is not
used: Owen shows its variance is conservative (the run × item term counted more than once), where the
decomposition is unbiased to first order; tests/unit/test_evaluation_noise.py holds it to a simulated crossed
design's known variance.

Per-item records are what a probe keeps in eval.json's ``items`` (``ItemScores``): ``ids`` (each item's identity:
its row and a hash of its text), and the columns the kind scores: ``spearman`` (prediction, gold) → Spearman ×100,
``accuracy`` (correct) → mean ×100, ``perplexity`` (nll, tokens) → exp(Σ nll / Σ tokens), ``repetition`` (unique,
total: one text's n-grams) → SimCTG's rep-n 100·(1 − Σ unique / Σ total), ``diversity`` (unique_N, total_N for
N = 2, 3, 4) → Π(1 − rep-N/100), ``mean`` (value) → the mean (coherence, per prompt). Arms are paired on equal ids
only (``align``); a record that does not fit is named with its reason, and the measure then takes each arm's own
sampling error (the closed forms below), which overstates the items' share (2.6× on STS-B in the issue-64 audit).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

KINDS = {  # kind -> the columns it scores
    "spearman": ("prediction", "gold"),
    "accuracy": ("correct",),
    "perplexity": ("nll", "tokens"),
    "repetition": ("unique", "total"),
    "diversity": tuple(f"{side}_{n}" for n in (2, 3, 4) for side in ("unique", "total")),
    "mean": ("value",),
}
RESAMPLES = 1000  # the bootstrap's resamples (at least the 1,000)
BOOTSTRAP_SEED = 0
MOST_ITEMS = 2_000_000  # a per-item record longer than this is no evaluation set degen-train scores
CHUNK_CELLS = 4_000_000  # resample indices drawn and scored this many (resample, item) cells at a time


class ItemRecordError(ValueError):
    """A per-item record that does not fit (its kind, columns, ids or values), or two that cannot be paired."""


def item_id(row: int | str, text: str) -> str:
    """An item's identity: ``ROW:HASH``, its row (or document and offset) and the first 12 hex digits of the sha256
    of its text, so that a shuffled or edited evaluation set is never paired with the original."""
    return f"{row}:{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


@dataclass(frozen=True)
class ItemScores:
    """One run's per-item record of a measure: ``kind``, its columns (one entry per item) and the items' ids."""

    kind: str
    columns: dict[str, np.ndarray]
    ids: tuple[str, ...] | None = None

    @property
    def items(self) -> int:
        return len(next(iter(self.columns.values())))

    def score(self, index: np.ndarray) -> float:
        """The measure on the items at ``index`` (one resample, or ``np.arange(items)``: the set itself)."""
        return float(self.scores(np.asarray(index)[None, :])[0])

    def scores(self, index: np.ndarray) -> np.ndarray:
        """The measure on each row of ``index`` (resamples × items), vectorised: (resamples,)."""
        c = self.columns
        if self.kind == "spearman":
            from scipy.stats import rankdata

            x, y = rankdata(c["prediction"][index], axis=1), rankdata(c["gold"][index], axis=1)
            x, y = x - x.mean(1, keepdims=True), y - y.mean(1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                return 100 * (x * y).sum(1) / np.sqrt((x * x).sum(1) * (y * y).sum(1))
        if self.kind == "accuracy":
            return 100 * c["correct"][index].mean(1)
        if self.kind == "perplexity":
            tokens = c["tokens"][index].sum(1)
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                return np.where(tokens > 0, np.exp(c["nll"][index].sum(1) / tokens), np.nan)
        if self.kind == "repetition":
            return _repetition(c["unique"][index].sum(1), c["total"][index].sum(1))
        if self.kind == "diversity":
            return np.prod([1 - _repetition(c[f"unique_{n}"][index].sum(1), c[f"total_{n}"][index].sum(1)) / 100
                            for n in (2, 3, 4)], axis=0)  # fmt: skip
        if self.kind == "mean":
            return c["value"][index].mean(1)
        raise ItemRecordError(f"per-item kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def record(self) -> dict[str, str | list[float] | list[str]]:
        """eval.json's form: ``{"kind": ..., "ids": [...], COLUMN: [...]}``."""
        ids = {"ids": list(self.ids)} if self.ids is not None else {}
        return {"kind": self.kind, **ids, **{name: [float(v) for v in values] for name, values in self.columns.items()}}

    @classmethod
    def of(cls, record: dict) -> ItemScores:
        """From eval.json's record; ItemRecordError says what does not fit (the kind, a column, a length, a value
        that is not finite, ids that are not unique strings, more than MOST_ITEMS items)."""
        kind = str(record.get("kind"))
        if kind not in KINDS:
            raise ItemRecordError(f"per-item kind {kind!r} is not one of {', '.join(KINDS)}")
        missing = [name for name in KINDS[kind] if name not in record]
        if missing:
            raise ItemRecordError(f"a {kind} record needs the column(s) {', '.join(missing)}")
        try:
            columns = {name: np.asarray(record[name], dtype=float) for name in KINDS[kind]}
        except (TypeError, ValueError):
            raise ItemRecordError(f"a {kind} record's columns hold numbers, one per item") from None
        lengths = {len(v) if v.ndim == 1 else -1 for v in columns.values()}
        if len(lengths) != 1 or -1 in lengths or 0 in lengths:
            raise ItemRecordError(f"a {kind} record holds columns of one length, one number per item")
        count = lengths.pop()
        if count > MOST_ITEMS:
            raise ItemRecordError(f"{count:,} items: more than the {MOST_ITEMS:,} of any evaluation set degen-train "
                                  f"scores")  # fmt: skip
        bad = next((name for name, v in columns.items() if not np.isfinite(v).all()), None)
        if bad:
            raise ItemRecordError(f"its column {bad!r} holds a value that is not a finite number (NaN or infinite)")
        ids = record.get("ids")
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise ItemRecordError("its ids are not a list of strings")
            if len(ids) != count or len(set(ids)) != count:
                raise ItemRecordError(f"its {len(ids)} ids are not {count} distinct ones, one per item")
        return cls(kind, columns, tuple(ids) if ids is not None else None)

    def reordered(self, order: Sequence[str]) -> ItemScores:
        """The same scores in the items' order ``order`` (ids every run of the comparison holds)."""
        position = {item: i for i, item in enumerate(self.ids or ())}
        index = np.array([position[item] for item in order])
        return ItemScores(self.kind, {k: v[index] for k, v in self.columns.items()}, tuple(order))


def align(runs: Sequence[ItemScores], names: Sequence[str]) -> list[ItemScores]:
    """The runs' records on one item order, paired by item id; ItemRecordError names the first run (``names``, one
    per run) whose record cannot be paired with the first's: another kind, no ids, other items (shuffled items
    with the same count included: their ids differ)."""
    first, first_name = runs[0], names[0]
    for run, name in zip(runs, names, strict=True):
        if run.kind != first.kind:
            raise ItemRecordError(f"{name}: a {run.kind} record, where {first_name}'s is {first.kind}")
        if run.ids is None:
            raise ItemRecordError(f"{name}: its record carries no item ids (written before ids were kept), so "
                                  f"nothing says it scored the same items")  # fmt: skip
    order = first.ids
    for run, name in zip(runs[1:], names[1:], strict=True):
        if set(run.ids) != set(order):
            extra = len(set(run.ids) - set(order))
            raise ItemRecordError(f"{name}: {run.items:,} items, {extra:,} of them not among {first_name}'s "
                                  f"{first.items:,}: not the same evaluation set")  # fmt: skip
    return [run if run.ids == order else run.reordered(order) for run in runs]


def resamples_of(items: int, *, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Iterator[np.ndarray]:
    """The bootstrap's item resamples, drawn once in chunks (rows of indices with replacement), seeded."""
    generator = np.random.default_rng(seed)
    per_chunk = max(1, min(resamples, CHUNK_CELLS // max(items, 1)))
    for start in range(0, resamples, per_chunk):
        yield generator.integers(0, items, size=(min(per_chunk, resamples - start), items))


@dataclass(frozen=True)
class CrossedNoise:
    """The items' share of the variance of mean(other) − mean(base), each noise source counted once."""

    items_variance: float  # Var(b̄^B − b̄^A): the items' share, the run × item term removed
    paired_variance: float  # Var*(D): every run of both arms rescored on each item resample
    interaction_variance: float  # Σ Var(ē)/n over the arms: already in the seeds' spread, removed once
    items: int
    resamples: int

    @property
    def standard_error(self) -> float:
        return math.sqrt(self.items_variance)


def resampled_scores(runs: Sequence[ItemScores], *, resamples: int = RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> np.ndarray:  # fmt: skip
    """(runs, resamples): each run's score on each item resample, every run on the same resamples."""
    chunks = [np.stack([run.scores(index) for run in runs]) for index in resamples_of(runs[0].items,
                                                                                      resamples=resamples, seed=seed)]
    return np.concatenate(chunks, axis=1)


def crossed_noise(base: Sequence[ItemScores], other: Sequence[ItemScores], *, resamples: int = RESAMPLES,
                  seed: int = BOOTSTRAP_SEED) -> CrossedNoise | None:  # fmt: skip
    """The items' share of the difference's variance (module docstring) for runs already ``align``ed on one item
    order; None when fewer than two resamples give a finite score for every run."""
    scores = resampled_scores([*base, *other], resamples=resamples, seed=seed)  # (runs, resamples)
    scores = scores[:, np.isfinite(scores).all(0)]
    if scores.shape[1] < 2:
        return None
    arms = scores[: len(base)], scores[len(base) :]
    difference = arms[1].mean(0) - arms[0].mean(0)  # (resamples,)
    paired = float(np.var(difference, ddof=1))
    interaction = 0.0
    for arm in arms:
        if len(arm) >= 2:  # each run's deviation from its own resample mean; their spread across runs: Var(ε*)
            deviations = arm - arm.mean(1, keepdims=True)
            interaction += float(np.var(deviations, axis=0, ddof=1).mean()) / len(arm)
    return CrossedNoise(max(paired - interaction, 0.0), paired, interaction, base[0].items, scores.shape[1])


def noise_of_records(base: Sequence[tuple[str, dict | None]], other: Sequence[tuple[str, dict | None]], *,
                     resamples: int = RESAMPLES) -> tuple[CrossedNoise | None, str]:  # fmt: skip
    """(the crossed design's items term of the arms' difference, why it could not be paired: one line naming the
    run's file) for each run's kept record (``(name, record or None)``: the name says the file and the record);
    (None, "") where no run kept one."""
    runs = [*base, *other]
    if all(record is None for _, record in runs):
        return None, ""
    try:
        missing = next((name for name, record in runs if record is None), None)
        if missing is not None:
            raise ItemRecordError(f"{missing}: kept no per-item scores")
        scores = []
        for name, record in runs:
            try:
                scores.append(ItemScores.of(record))
            except ItemRecordError as error:
                raise ItemRecordError(f"{name}: {error}") from None
        aligned = align(scores, [name for name, _ in runs])
        noise = crossed_noise(aligned[: len(base)], aligned[len(base) :], resamples=resamples)
        if noise is None:
            raise ItemRecordError("no item resample gave every run a finite score")
    except ItemRecordError as error:
        return None, f"not paired: {error}; each arm's own sampling error instead"
    return noise, ""


def _repetition(unique: np.ndarray, total: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 100 * (1 - unique / np.where(total > 0, total, 1)), 0.0)


def bootstrap_se(scores: ItemScores, *, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> float | None:
    """One run's sampling error over its items: the standard deviation of the measure over item resamples (seeded);
    None with fewer than two items or no finite resample."""
    if scores.items < 2:
        return None
    values = resampled_scores([scores], resamples=resamples, seed=seed)[0]
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
