"""Weighted mixtures of corpora (issue 26 item 3): batches drawn at the weights from (seed, step) alone, so the
proportions hold, a resumed run and two processes see a straight run's batches; per-source validation; bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from degen_train.config import load_config
from degen_train.config.schema import validate_config
from degen_train.data.mixture import MixtureBatchSampler, SourceBatches, mixture_sources
from tests.helpers import checkpoint_weights, run

TWO_SOURCES = "data.sources=[{weight: 0.7, label: help}, {path: PATH, weight: 0.3}]"


def test_the_proportions_hold_within_binomial_error_over_1000_batches() -> None:
    weights, sizes = [0.5, 0.3, 0.2], [50, 30, 20]
    sampler = MixtureBatchSampler(sizes, weights, batch_size=8, seed=3)
    counts = torch.tensor(sampler.counts_before(1000), dtype=torch.float64)
    draws = 1000 * 8
    for count, weight in zip(counts.tolist(), weights, strict=True):
        sigma = math.sqrt(draws * weight * (1 - weight))
        assert abs(count - draws * weight) <= 4 * sigma, (count, draws * weight, sigma)
    # The keys drawn: each source's rows only, every row of a source once per its epoch.
    keys = [key for batch, _ in zip(sampler, range(40), strict=False) for key in batch]
    smallest = sorted(i for epoch, i in keys if 80 <= i < 100 and epoch == 0)
    assert smallest == list(range(80, 100))  # source 2 (rows 80–99) went through its first epoch whole


def test_a_resumed_sampler_and_two_ranks_draw_the_straight_run_s_batches() -> None:
    sizes, weights = [13, 7], [0.6, 0.4]
    straight = [b for b, _ in zip(MixtureBatchSampler(sizes, weights, batch_size=6, seed=1), range(30), strict=False)]
    resumed = MixtureBatchSampler(sizes, weights, batch_size=6, seed=1, start=17)  # mid-epoch of both sources
    assert [b for b, _ in zip(resumed, range(13), strict=False)] == straight[17:]
    ranks = [MixtureBatchSampler(sizes, weights, batch_size=3, seed=1, rank=r, world_size=2) for r in (0, 1)]
    halves = [[b for b, _ in zip(rank, range(30), strict=False)] for rank in ranks]
    assert [a + b for a, b in zip(*halves, strict=True)] == straight


def test_validation_batches_hold_one_source_each_taking_turns() -> None:
    batches = list(SourceBatches([(0, 5), (5, 2)], batch_size=2))
    assert batches == [[(0, 0), (0, 1)], [(0, 5), (0, 6)], [(0, 2), (0, 3)], [(0, 4)]]
    # On 2 processes each takes the same number of each source's rows (the same batches: a term's all-reduce per
    # batch meets its partner's): 5 rows give 2 each, the fifth left out.
    shards = [list(SourceBatches([(0, 5), (5, 2)], batch_size=2, rank=r, world_size=2)) for r in (0, 1)]
    assert shards == [[[(0, 0), (0, 2)], [(0, 5)]], [[(0, 1), (0, 3)], [(0, 6)]]]


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        ("[{weight: -1}]", r"data.sources\[0\].weight must be a number >= 0; got -1"),
        ("[{weight: 0}, {weight: 0, label: b}]", r"the weights sum to 0; they must sum to a positive number"),
        ("[{weight: 1, pth: a.txt}]", r"data.sources\[0\].pth is not a source setting; the settings: weight, label"),
        ("[{weight: 1}, {weight: 1}]", r"data.sources\[1\]: two sources are labelled 'builtin'"),
        ("[{label: a}]", r"data.sources\[0\].weight must be a number >= 0; got None"),
    ],
)
def test_bad_sources_are_refused_naming_the_setting(sources: str, message: str) -> None:
    cfg = load_config([f"data.sources={sources}"])
    validate_config(cfg)
    with pytest.raises(ValueError, match=message):
        mixture_sources(cfg.data)


def test_a_source_without_examples_is_named(tmp_path: Path) -> None:
    (tmp_path / "short.txt").write_text("one line.\n\nanother.\n")
    sources = f"data.sources=[{{weight: 0.5}}, {{path: {tmp_path / 'short.txt'}, weight: 0.5, label: tiny}}]"
    with pytest.raises(ValueError, match=r"mixture source 'tiny': the corpus gave no training example"):
        run(tmp_path / "run", sources, "data.tokenizer.vocab_size=500", "trainer.max_steps=1")


@pytest.fixture(scope="module")
def second_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from degen_train.data.builtin_corpus import builtin_documents

    path = tmp_path_factory.mktemp("mixture") / "topics.txt"
    path.write_text("\n\n".join(builtin_documents()[40:80]))
    return path


def test_a_mixture_run_logs_each_source_and_resumes_exactly(tmp_path: Path, second_corpus: Path) -> None:
    """Per-source validation curves and shares in summary.json; 3 steps + resume to 6 = 6 straight, in weights."""
    settings = [TWO_SOURCES.replace("PATH", str(second_corpus)), "data.tokenizer.vocab_size=1000",
                "trainer.val_check_interval=3", "callbacks.checkpoint.every_n_train_steps=3", "export_hf=false",
                "model.dropout=0", "model.attention_dropout=0", "scheduler.warmup_steps=0"]  # fmt: skip
    straight = run(tmp_path / "straight", *settings, "trainer.max_steps=6")
    assert {"val/help/loss", "val/topics/loss", "val/loss"} <= set(straight["val_metrics"])
    shares = straight["data_mixture"]
    assert shares["help"]["weight"] == pytest.approx(0.7) and shares["topics"]["weight"] == pytest.approx(0.3)
    assert shares["help"]["share_seen"] + shares["topics"]["share_seen"] == pytest.approx(1.0)
    run(tmp_path / "split", *settings, "trainer.max_steps=3", "scheduler.total_steps=6")
    run(tmp_path / "split", *settings, "trainer.max_steps=6", "ckpt_path=last")
    a = checkpoint_weights(tmp_path / "straight" / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(tmp_path / "split" / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys()
    assert max((a[k].float() - b[k].float()).abs().max().item() for k in a) <= 1e-6  # tests/test_resume.py's bar
