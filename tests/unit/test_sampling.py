"""Position-addressed batches: resume equals slicing, DDP shards tile the global batch."""

from __future__ import annotations

import itertools

import pytest

from degen_train.core.rng import mix_seed
from degen_train.data.sampling import ShardedBatches, StepBatchSampler


def take(sampler: StepBatchSampler, count: int) -> list:
    return list(itertools.islice(iter(sampler), count))


def test_starting_at_a_position_equals_skipping_to_it() -> None:
    straight = take(StepBatchSampler(50, batch_size=4, seed=3), 30)  # 12 batches an epoch: crosses 2 epochs
    resumed = take(StepBatchSampler(50, batch_size=4, seed=3, start=17), 13)
    assert resumed == straight[17:]


def test_each_epoch_is_a_permutation_with_its_own_order() -> None:
    batches = take(StepBatchSampler(48, batch_size=4, seed=0), 24)
    first = [i for batch in batches[:12] for _, i in batch]
    second = [i for batch in batches[12:] for _, i in batch]
    assert sorted(first) == sorted(second) == list(range(48))
    assert first != second
    assert {e for batch in batches[12:] for e, _ in batch} == {1}


def test_ranks_share_out_the_single_process_batch() -> None:
    single = take(StepBatchSampler(40, batch_size=8, seed=5), 7)
    ranks = [take(StepBatchSampler(40, batch_size=4, seed=5, rank=r, world_size=2), 7) for r in (0, 1)]
    for step in range(7):
        assert ranks[0][step] + ranks[1][step] == single[step]


def test_too_small_a_training_set_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"has 5 examples, fewer than one global batch \(4 per process x 2"):
        StepBatchSampler(5, batch_size=4, seed=0, world_size=2)


def test_validation_batches_cover_every_example_once() -> None:
    (shard,) = [list(ShardedBatches(11, batch_size=3))]  # one process: every example
    assert sorted(i for batch in shard for _, i in batch) == list(range(11))
    shards = [list(ShardedBatches(11, batch_size=3, rank=r, world_size=2)) for r in (0, 1)]
    seen = sorted(i for shard in shards for batch in shard for _, i in batch)
    assert seen == list(range(10))  # the last 11 % 2 left out, as DistributedSampler(drop_last=True) does


def test_every_process_validates_the_same_number_of_batches() -> None:
    """A loss term all-reduces once per validation batch: a process with one batch more waits in it forever. 154
    examples (the builtin corpus's validation at block 128) in batches of 2 on 4 processes were 20, 20, 19, 19
    batches, and every two-node job hung at its first validation (tests/test_simulated_cluster.py runs one)."""
    shards = [list(ShardedBatches(154, batch_size=2, rank=r, world_size=4)) for r in range(4)]
    assert [len(s) for s in shards] == [19] * 4
    seen = sorted(i for shard in shards for batch in shard for _, i in batch)
    assert seen == list(range(152))


def test_mix_seed_is_stable_and_spreads() -> None:
    assert mix_seed(1, 2, 3) == mix_seed(1, 2, 3)
    assert len({mix_seed(0, 0, i) for i in range(1000)}) == 1000
    assert 0 <= mix_seed(2**70, -1) < 2**63
