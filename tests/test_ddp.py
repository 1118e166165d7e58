"""Two CPU processes (gloo) give the losses and weights of one process holding the same global batch.

The two-process runs share one job (tests.helpers.on_two_processes: started as torchrun starts degen-train, the
imports paid once); Lightning's own launcher (trainer.devices=2 from one command) is exercised by tests/test_muon.py,
the bf16 FSDP2 test and the kill and preemption drills."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import FAST
from tests.helpers import checkpoint_weights, degen_train, logged, on_two_processes, run

pytestmark = pytest.mark.slow  # several processes per test: make test-slow (make test runs them too)

COMMON = [
    *FAST,
    "model.dropout=0",
    "model.attention_dropout=0",
    "trainer.accelerator=cpu",
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "export_hf=false",
]


def cli(run_dir: Path, *overrides: str) -> None:
    result = degen_train(*COMMON, *overrides, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]


def single(run_dir: Path, *overrides: str) -> None:
    """The one-process reference, in this process (the same config as ``cli``, without a process start), with one
    CPU thread as each of the two processes has (threads=auto gives each 1 of the 2 CPUs): LAPACK's results (the
    SVD of spectrum control) depend on the thread count beyond 1e-5."""
    run(run_dir, *COMMON[len(FAST) :], *overrides, "threads=1")


def assert_same_run(ddp: Path, one: Path, keys: tuple[str, ...]) -> None:
    for key in keys:
        a, b = logged(ddp, key), logged(one, key)
        assert a.keys() == b.keys() and all(abs(a[s] - b[s]) < 1e-4 for s in a), (key, a, b)
    a = checkpoint_weights(ddp / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(one / "checkpoints" / "last.ckpt")
    assert max((a[k].float() - b[k].float()).abs().max().item() for k in a) <= 1e-5


# Architectures beyond BERT and GPT-2, for the DDP and the FSDP2 tests: ModernBERT (RoPE, GeGLU, local attention)
# with CosReg on its tied embeddings; Llama (grouped-query attention, SwiGLU) with CosReg on its untied output layer.
BEYOND_BERT_AND_GPT2 = {
    "modernbert_cosreg": (
        ["recipe=bert_mlm", "regularizer=cosreg", "model=modernbert_tiny"],
        ("train/cosreg/loss", "train/mlm/loss"),
    ),
    "llama_cosreg": (["recipe=gao_cosreg", "model=llama_tiny"], ("train/cosreg/loss", "train/mle/loss")),
}

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
    # Spectrum control: no sample mixing, but its factors replace a tied parameter through a pre-forward hook;
    # DDP must see them used in the forward and reduce their gradients like any weight.
    "spectrum_control": (["recipe=spectrum_control", "model=gpt2_tiny"], ("train/spectrum_control/loss",)),
}


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
def ddp_runs(tmp_path_factory: pytest.TempPathFactory, dropout_free_teacher: Path) -> Path:
    """Every case on 2 DDP processes × 4 sequences, one after another on one two-process job."""
    root = tmp_path_factory.mktemp("ddp")
    ddp = ["strategy=ddp", "trainer.devices=2", "data.batch_size=4"]
    on_two_processes([(root / case, [*COMMON, *case_overrides(case, dropout_free_teacher), *ddp]) for case in CASES])
    return root


@pytest.mark.parametrize("case", list(CASES))
def test_terms_that_mix_samples_match_one_process_in_weights(
    tmp_path: Path, case: str, ddp_runs: Path, dropout_free_teacher: Path
) -> None:
    """2 processes x 4 sequences = 1 process x 8, in losses and in weights after 6 updates."""
    single(tmp_path / "single", *case_overrides(case, dropout_free_teacher), "data.batch_size=8")
    assert_same_run(ddp_runs / case, tmp_path / "single", (*CASES[case][1], "train/loss", "val/loss"))
    assert torch.load(ddp_runs / case / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
