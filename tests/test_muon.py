"""optimizer=muon end to end: 2 processes (DDP, FSDP2) against 1 process holding the global batch, and resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import (
    SAME_RUN_SETTINGS,
    checkpoint_weights,
    cli_run,
    logged,
    on_two_processes,
    one_process_run,
)

# GPT-2: Conv1D blocks (the transposed-weight rate factor) and a tied embedding on AdamW.
MUON = ["recipe=gpt2_mle", "model=gpt2_tiny", "data.tokenizer.vocab_size=1000", "optimizer=muon",
        "optimizer.muon_ns_dtype=float32", "callbacks.checkpoint.every_n_train_steps=3", "scheduler.total_steps=6",
        "scheduler.warmup_steps=1"]  # fmt: skip


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 steps with Muon on one process holding the 8-sequence global batch."""
    run_dir = tmp_path_factory.mktemp("muon_straight")
    one_process_run(run_dir, *MUON, "data.batch_size=8")
    return run_dir


def assert_same_weights(run_dir: Path, reference: Path) -> None:
    """Losses within 1e-4 and every weight within 1e-5, as each 2-process test. With Newton–Schulz in float32
    (``muon_ns_dtype=float32``): torch's bfloat16 iteration turns the float32 rounding differences between an
    all-reduced and a one-process gradient into bfloat16 ones (measured here after 6 steps at muon_lr=0.02:
    2.2e-3 max, DDP and FSDP2 alike), as large as what a wrong split would cause."""
    for key in ("train/mle/loss", "val/loss"):
        a, b = logged(run_dir, key), logged(reference, key)
        assert a.keys() == b.keys() and all(abs(a[s] - b[s]) < 1e-4 for s in a), (key, a, b)
    a = checkpoint_weights(run_dir / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(reference / "checkpoints" / "last.ckpt")
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-5


def test_ddp_with_muon_matches_one_process(tmp_path: Path, straight: Path) -> None:
    """Started as users start it (one command, trainer.devices=2: Lightning launches the second process)."""
    cli_run(tmp_path, *MUON, "strategy=ddp", "trainer.devices=2", "data.batch_size=4")
    assert_same_weights(tmp_path, straight)


def test_fsdp2_with_muon_matches_one_process_and_resumes_from_its_shards(tmp_path: Path, straight: Path) -> None:
    """Under FSDP2 each matrix is a DTensor sharded by rows; torch's Muon runs its Newton–Schulz iteration on it as
    DTensor operations, which gather what the matrix products need: the whole matrix is orthogonalised, as on one
    process. 3 steps, a sharded checkpoint (the momentum buffers through torch.distributed.checkpoint), 3 more."""
    on_two = [*SAME_RUN_SETTINGS, *MUON, "strategy=fsdp", "trainer.devices=2", "data.batch_size=4"]
    on_two_processes([(tmp_path, [*on_two, "trainer.max_steps=3"]), (tmp_path, [*on_two, "ckpt_path=last"])])
    assert (tmp_path / "checkpoints" / "last.ckpt").is_dir()
    assert_same_weights(tmp_path, straight)


def test_a_muon_run_resumes_exactly(tmp_path: Path, straight: Path) -> None:
    one_process_run(tmp_path, *MUON, "data.batch_size=8", "trainer.max_steps=3")
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["optimizer_states"][0]
    assert {g["algorithm"] for g in state["param_groups"]} == {"muon", "adamw"}
    assert any("momentum_buffer" in s for s in state["state"].values())
    one_process_run(tmp_path, *MUON, "data.batch_size=8", "ckpt_path=last")
    a = checkpoint_weights(tmp_path / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(straight / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert logged(tmp_path, "train/loss") == logged(straight, "train/loss")
