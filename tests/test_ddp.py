"""Two CPU processes (gloo) give the losses and weights of one process holding the same global batch.

The two-process runs share one job (tests.helpers.on_two_processes: started as torchrun starts degen-train, the
imports paid once); Lightning's own launcher (trainer.devices=2 from one command) is exercised by tests/test_muon.py,
the bf16 FSDP2 test and the kill and preemption drills."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import (
    BEYOND_BERT_AND_GPT2,
    SAME_RUN_SETTINGS,
    assert_same_run,
    derived_cases,
    on_two_processes,
    one_process_run,
)

CASES = {
    # Gathered SCL negatives: a differentiable gather, so every process's anchors push on every key.
    "coco_lm": (
        ["recipe=coco_lm", "regularizer.coco_scl.gather_negatives=true"],
        ("train/coco_scl/loss", "train/loss"),
    ),
    "electra": (["recipe=electra"], ("train/electra/loss", "train/electra/detection")),  # global token counts
    # CosReg on hidden states (a global Σ ŵ) and on the rows seen by any process so far.
    "cosreg_hidden": (["recipe=gao_cosreg", "regularizer.cosreg.target=hidden"], ("train/cosreg/loss",)),
    "cosreg_seen": (["recipe=gao_cosreg", "regularizer.cosreg.rows=seen"], ("train/cosreg/loss",)),
    "bert_mlm_nsp": (["recipe=bert_mlm_nsp"], ("train/mlm/loss", "train/nsp/loss")),  # token and sequence counts
    # TaCL: per-sequence contrast, a global anchor count; the teacher without dropout (its draws differ per rank).
    "tacl": (["recipe=tacl", "regularizer.tacl.teacher_dropout=false"], ("train/tacl/loss", "train/mlm/loss")),
    # Weight-0 terms owning parameters (the SCL projection; the NSP head and pooler): frozen, so DDP with
    # find_unused_parameters=false has no parameter without a gradient, and they are logged, not trained.
    "coco_scl_weight_0": (
        ["recipe=coco_lm", "regularizer.coco_scl.weight=0", "regularizer.coco_scl.gather_negatives=true"],
        ("train/coco_scl/loss", "train/loss"),
    ),
    "nsp_weight_0": (["recipe=bert_mlm_nsp", "objective.nsp.weight=0"], ("train/nsp/loss", "train/mlm/loss")),
    **BEYOND_BERT_AND_GPT2,
    # SimCTG: its mean is over every pair of the global batch (a global pair count).
    "simctg": (["recipe=simctg", "model=gpt2_tiny"], ("train/simctg/loss", "train/mle/loss")),
    # Unlikelihood: a mean over every prediction of the global batch.
    "unlikelihood": (["recipe=unlikelihood", "model=gpt2_tiny"], ("train/unlikelihood/loss", "train/mle/loss")),
    # I-STAR: the covariance of the global batch's states (every layer's), C0 from the first global batch.
    "istar": (["recipe=istar", "model=tiny", "regularizer.istar.layers=all"], ("train/istar/loss", "train/mlm/loss")),
    # SimCSE: every process's views are negatives (a differentiable gather); MLM at weight 0 freezes the vocabulary
    # transform. Dropout is off here (its draws differ per rank), so the two views are equal: the negatives decide.
    "simcse": (["recipe=simcse"], ("train/simcse/loss", "train/mlm/loss")),
    # AGG: token counts of the global batch (all-reduced), a window of 3 steps so that it slides within the run,
    # α high enough that the tiny vocabulary has rare and frequent tokens.
    "agg": (
        # per step (per_targets=null): at this batch size some targets are rare, so both gates are exercised
        [
            "recipe=agg",
            "model=gpt2_tiny",
            "objective.agg.window_steps=3",
            "objective.agg.alpha=0.5",
            "objective.agg.per_targets=null",
        ],  # fmt: skip
        ("train/agg/loss", "train/agg/rare_share"),
    ),
    # A mixture of two sources: each global batch's sources drawn from (seed, step), each rank its slots of it; the
    # shares logged are the global batch's.
    "mixture": (
        ["recipe=bert_mlm", "data.sources=[{weight: 0.7, label: help}, {weight: 0.3, label: again}]"],
        ("train/mlm/loss", "train/mixture/help"),
    ),
    # Spectrum control: no sample mixing, but its factors replace a tied parameter through a pre-forward hook;
    # DDP must see them used in the forward and reduce their gradients like any weight.
    "spectrum_control": (["recipe=spectrum_control", "model=gpt2_tiny"], ("train/spectrum_control/loss",)),
    # Attention variants: gates are parameters of each attention module, fed the attention input by a pre-hook.
    "gated_attention": (["recipe=bert_mlm", "model.attention_variant.name=gated"], ("train/mlm/loss",)),
    "output_gate": (
        ["recipe=gpt2_mle", "model=llama_tiny", "model.attention_variant.name=output_gate", "model.attention=eager"],
        ("train/mle/loss",),
    ),
    # kv_bias: a learned key/value slot per key/value head, behind RoPE and grouped-query attention, on SDPA.
    "kv_bias": (["recipe=gpt2_mle", "model=llama_tiny", "model.attention_variant.name=kv_bias"], ("train/mle/loss",)),
    "clipped_softmax": (
        ["recipe=bert_mlm", "model.attention_variant.name=clipped_softmax", "model.attention=eager"],
        ("train/mlm/loss",),
    ),
}


CASES |= derived_cases(CASES)


def case_overrides(case: str, teacher: Path) -> list[str]:
    overrides = CASES[case][0]
    model = "model=gpt2_tiny" if "recipe=gao_cosreg" in overrides else "model=tiny"
    if any(o.startswith("model=") for o in overrides):
        model = next(o for o in overrides if o.startswith("model="))
    common = [*overrides, model, "data.tokenizer.vocab_size=1000"]
    if case in ("tacl", "simcse"):
        common.append(f"{'teacher' if case == 'tacl' else 'start'}={teacher}")
    return common


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory: pytest.TempPathFactory, teacher: Path) -> Path:
    """Every case on 2 DDP processes × 4 sequences, one after another on one two-process job."""
    root = tmp_path_factory.mktemp("ddp")
    ddp = ["strategy=ddp", "trainer.devices=2", "data.batch_size=4"]
    cases = [(root / case, [*SAME_RUN_SETTINGS, *case_overrides(case, teacher), *ddp]) for case in CASES]
    on_two_processes(cases)
    return root


def test_val_perplexity_batches_are_gathered_from_every_process(ddp_runs: Path) -> None:
    """Issue 71.5: the final validation's per-batch record holds both processes' batches, and over them all scores
    the run's val_perplexity (Lightning's mean of the processes' batch-weighted means: equal shares, one value)."""
    import json

    import numpy as np

    from degen_train.metrics.evaluation_noise import ItemScores

    summary = json.loads((ddp_runs / "bert_mlm_nsp" / "summary.json").read_text())
    batches = ItemScores.of(summary["items"]["val_perplexity"])
    assert {i.split(".")[0] for i in batches.ids} == {"rank0", "rank1"}
    assert batches.score(np.arange(batches.items)) == pytest.approx(summary["val_perplexity"], rel=1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_terms_that_mix_samples_match_one_process_in_weights(
    tmp_path: Path, case: str, ddp_runs: Path, teacher: Path
) -> None:
    """2 processes x 4 sequences = 1 process x 8, in losses and in weights after 6 updates."""
    one_process_run(tmp_path / "single", *case_overrides(case, teacher), "data.batch_size=8")
    assert_same_run(ddp_runs / case, tmp_path / "single", (*CASES[case][1], "train/loss", "val/loss"))
    assert torch.load(ddp_runs / case / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
