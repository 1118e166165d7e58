"""Issue 71: one noise model for seeds × items (metrics/evaluation_noise.py), held to a simulated crossed design whose
variance is known, to a loop transcription of the estimator, to the "never narrower" property, and to pairing by
item id (a shuffled set is named, never paired)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from degen_train.metrics.evaluation_noise import (
    ItemRecordError,
    ItemScores,
    align,
    crossed_noise,
    item_id,
    noise_of_records,
)
from degen_train.metrics.verdicts import compare, judge, t_quantile, welch


def runs_of(values: np.ndarray, ids: list[str] | None = None) -> list[ItemScores]:
    """One 'mean' record per row of ``values`` (runs × items)."""
    ids = ids or [f"{i}:x" for i in range(values.shape[1])]
    return [ItemScores("mean", {"value": row}, tuple(ids)) for row in values]


def crossed_design(generator: np.random.Generator, *, runs: int, items: int, seed_sd: float, item_sd: float,
                   arm_item_sd: float, run_item_sd: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Owen 2007's crossed random-effects model per arm: Y_ri = μ + a_r + b_i + c_i(arm) + e_ri, with b shared by
    both arms (it cancels in their difference) and c each arm's own item effect."""
    shared = generator.normal(scale=item_sd, size=items)
    arms = []
    for mean in (0.0, 1.0):
        a = generator.normal(scale=seed_sd, size=(runs, 1))
        c = generator.normal(scale=arm_item_sd, size=items)
        e = generator.normal(scale=run_item_sd, size=(runs, items))
        arms.append(mean + a + shared + c + e)
    return arms[0], arms[1]


def test_the_crossed_estimator_meets_the_designs_known_variance_where_the_summed_rule_does_not() -> None:
    """The true variance of the difference of the arms' means, with R runs an arm and m items:
    Var(D) = 2σ_a²/R + 2σ_c²/m + 2σ_e²/(R·m) (the shared item effect b cancels). The verdict's SE² (the seeds'
    Welch term + the crossed items term) averages to it within Monte Carlo error; the old rule (the seeds' term +
    the full paired bootstrap) counts the run × item term twice and comes out far above it."""
    generator = np.random.default_rng(7)
    runs, items, replicates = 3, 200, 300
    sd = {"seed_sd": 0.05, "item_sd": 1.0, "arm_item_sd": 0.6, "run_item_sd": 2.0}
    truth = 2 * sd["seed_sd"] ** 2 / runs + 2 * sd["arm_item_sd"] ** 2 / items + 2 * sd["run_item_sd"] ** 2 / (
        runs * items)  # fmt: skip
    ours, summed, differences = [], [], []
    for _ in range(replicates):
        base, other = crossed_design(generator, runs=runs, items=items, **sd)
        seeds = welch(base.mean(1).tolist(), other.mean(1).tolist())[0] ** 2
        noise = crossed_noise(runs_of(base), runs_of(other), resamples=400)
        ours.append(seeds + noise.items_variance)
        summed.append(seeds + noise.paired_variance)
        differences.append(other.mean() - base.mean())
    monte_carlo = np.std(ours, ddof=1) / math.sqrt(replicates)
    assert abs(np.mean(ours) - truth) < 3 * monte_carlo + 0.03 * truth, (np.mean(ours), truth)
    assert np.var(differences, ddof=1) == pytest.approx(truth, rel=0.25)  # the design's variance, simulated
    assert np.mean(summed) / truth > 1.6  # the old rule: about 1.8× here (the run × item term counted twice)


def test_the_estimator_transcribed_as_loops() -> None:
    """crossed_noise against a loop transcription on the same seeded resamples (rng.integers(0, m, (R, m))): the
    paired variance Var_b(D*_b), and the run × item share Σ_arm mean_b Var_r(S_rb − S̄_r·) / n_arm removed."""
    generator = np.random.default_rng(3)
    base, other = generator.normal(size=(2, 30)), generator.normal(loc=0.5, size=(3, 30))
    found = crossed_noise(runs_of(base), runs_of(other), resamples=50, seed=11)
    index = np.random.default_rng(11).integers(0, 30, size=(50, 30))
    scores = [[float(np.mean(run[row])) for row in index] for run in [*base, *other]]
    d = [np.mean([scores[r][b] for r in (2, 3, 4)]) - np.mean([scores[r][b] for r in (0, 1)]) for b in range(50)]
    paired = np.var(d, ddof=1)
    interaction = 0.0
    for arm in ((0, 1), (2, 3, 4)):
        centred = [[scores[r][b] - np.mean(scores[r]) for b in range(50)] for r in arm]
        interaction += np.mean([np.var([centred[k][b] for k in range(len(arm))], ddof=1) for b in range(50)]) / len(arm)
    assert found.paired_variance == pytest.approx(paired)
    assert found.interaction_variance == pytest.approx(interaction)
    assert found.items_variance == pytest.approx(max(paired - interaction, 0.0))


@pytest.mark.parametrize("kind", ["spearman", "accuracy", "perplexity", "repetition", "diversity", "mean"])
def test_each_kind_scores_a_resample_as_its_formula_by_hand(kind: str) -> None:
    """The vectorised scores against each kind's formula on the resampled items, one resample at a time."""
    generator = np.random.default_rng(0)
    n = 12
    columns = {
        "spearman": {"prediction": generator.normal(size=n), "gold": generator.integers(0, 5, size=n).astype(float)},
        "accuracy": {"correct": generator.integers(0, 2, size=n).astype(float)},
        "perplexity": {"nll": generator.uniform(1, 9, size=n), "tokens": generator.integers(1, 9, size=n) * 1.0},
        "repetition": {"unique": np.arange(n) * 1.0, "total": np.arange(n) * 2.0 + 1},
        "diversity": {f"{side}_{k}": (np.arange(n) + k) * (1.0 if side == "unique" else 1.5) for k in (2, 3, 4)
                      for side in ("unique", "total")},  # fmt: skip
        "mean": {"value": generator.normal(size=n)},
    }[kind]
    scores = ItemScores(kind, columns)
    index = generator.integers(0, n, size=(4, n))
    for row, got in zip(index, scores.scores(index), strict=True):
        assert got == pytest.approx(by_hand(kind, {k: v[row] for k, v in columns.items()}))


def by_hand(kind: str, c: dict[str, np.ndarray]) -> float:
    """Each kind's score as its docstring states it (metrics/evaluation_noise.py)."""
    from scipy.stats import spearmanr

    if kind == "spearman":
        return 100 * spearmanr(c["prediction"], c["gold"])[0]
    if kind == "accuracy":
        return 100 * c["correct"].mean()
    if kind == "perplexity":
        return math.exp(c["nll"].sum() / c["tokens"].sum())
    if kind == "repetition":
        return 100 * (1 - c["unique"].sum() / c["total"].sum())
    if kind == "diversity":
        return math.prod(c[f"unique_{k}"].sum() / c[f"total_{k}"].sum() for k in (2, 3, 4))
    return c["value"].mean()


def test_adding_the_evaluation_term_never_narrows_the_interval() -> None:
    """Issue 71.2, for any inputs: the interval with the items' term contains the seeds-only one (the old rule lifted
    the df: contrastive rep-2's [−5.99, +4.21] against Welch's own [−6.99, +5.21])."""
    generator = np.random.default_rng(5)
    for _ in range(300):
        n_base, n_other = generator.integers(2, 6, size=2)
        base = generator.normal(scale=generator.uniform(0, 3), size=n_base).tolist()
        other = generator.normal(loc=generator.normal(), scale=generator.uniform(0, 3), size=n_other).tolist()
        extra = float(generator.uniform(0, 5))
        alone, dof = welch(base, other)
        with_items, dof_items = welch(base, other, paired=extra)
        assert dof_items == pytest.approx(dof) and with_items >= alone
        assert t_quantile(dof_items) * with_items >= t_quantile(dof) * alone
        sampled, dof_sampled = welch(base, other, sampling=extra)
        assert dof_sampled == pytest.approx(dof) and sampled >= alone
    # the case: seeds alone [−6.99, +5.21] at df 2.37; the old rule's [−5.99, +4.21] sat inside it
    verdict = judge("contrastive rep-2", "mle", "simctg", [0.0, 1.0, 2.0], [-0.5, 0.0, 0.1], expect="lower",
                    paired=1.0)  # fmt: skip
    alone = judge("contrastive rep-2", "mle", "simctg", [0.0, 1.0, 2.0], [-0.5, 0.0, 0.1], expect="lower")
    assert verdict.dof == pytest.approx(alone.dof) and verdict.half_width > alone.half_width


def test_a_shuffled_run_is_named_and_never_paired() -> None:
    """Issue 71.3: the same count of other items was paired by position and narrowed the interval; by id it is
    named, and noise_of_records pairs nothing."""
    generator = np.random.default_rng(1)
    texts = [f"sentence {i}" for i in range(40)]
    ids = [item_id(i, t) for i, t in enumerate(texts)]
    values = generator.normal(size=(4, 40))
    runs = runs_of(values, ids)
    shuffled_texts = [texts[i] for i in generator.permutation(40)]
    other_items = ItemScores("mean", {"value": values[3]}, tuple(item_id(i, t) for i, t in enumerate(shuffled_texts)))
    with pytest.raises(ItemRecordError, match=r"run D: 40 items, \d+ of them not among run A's 40: not the same "
                                              r"evaluation set"):  # fmt: skip
        align([*runs[:3], other_items], ["run A", "run B", "run C", "run D"])
    records = [(f"run {i}", run.record()) for i, run in enumerate([*runs[:3], other_items])]
    noise, note = noise_of_records(records[:2], records[2:])
    assert noise is None and "run 3: 40 items" in note and note.endswith("each arm's own sampling error instead")
    # the same items in another order are the same set: reordered, not refused
    order = generator.permutation(40)
    reordered = ItemScores("mean", {"value": values[3][order]}, tuple(ids[i] for i in order))
    aligned = align([*runs[:3], reordered], ["A", "B", "C", "D"])
    assert np.allclose(aligned[3].columns["value"], values[3])
    named = [(f"run {i}", run.record()) for i, run in enumerate([*runs[:3], reordered])]
    same = [(f"run {i}", run.record()) for i, run in enumerate(runs)]
    assert noise_of_records(named[:2], named[2:])[0].items_variance == pytest.approx(
        noise_of_records(same[:2], same[2:])[0].items_variance)  # fmt: skip


@pytest.mark.parametrize(("record", "said"), [
    ({"kind": "mean", "value": [1.0, float("nan")], "ids": ["a", "b"]}, "not a finite number"),
    ({"kind": "bleu", "value": [1.0, 2.0]}, "per-item kind 'bleu' is not one of spearman"),
    ({"kind": "spearman", "prediction": [1.0, 2.0]}, "a spearman record needs the column(s) gold"),
    ({"kind": "mean", "value": [1.0, 2.0], "ids": ["a"]}, "its 1 ids are not 2 distinct ones"),
    ({"kind": "mean", "value": [1.0, 2.0], "ids": ["a", "a"]}, "its 2 ids are not 2 distinct ones"),
    ({"kind": "accuracy", "correct": [[1.0], [0.0]]}, "columns of one length, one number per item"),
])  # fmt: skip
def test_a_record_that_does_not_fit_is_named_by_its_reason(record: dict, said: str) -> None:
    with pytest.raises(ItemRecordError, match=re.escape(said)):
        ItemScores.of(record)


def test_a_run_without_ids_is_not_paired_and_says_so() -> None:
    values = np.random.default_rng(2).normal(size=(2, 10))
    with pytest.raises(ItemRecordError, match="run 2: its record carries no item ids"):
        align([runs_of(values)[0], ItemScores("mean", {"value": values[1]})], ["run 1", "run 2"])


def test_a_zero_spread_row_has_no_interval() -> None:
    """Issue 71.5: identical runs gave a 0.0 / 0.0 "95% interval" beside "cannot tell"."""
    (c,) = [compare("m", "w=1", "w=0", [1.0, 1.0], [1.0, 1.0])]
    assert c.noise == 0 and c.half_width is None
    assert "no interval" in judge("m", "a", "b", [1.0, 1.0], [2.0, 2.0], expect="higher").line()
