"""Two CPU processes (gloo) give the losses and weights of one process holding the same global batch."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.conftest import FAST
from tests.helpers import checkpoint_weights, degen_train, logged

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


def test_ddp_two_processes_match_one_process(tmp_path: Path) -> None:
    cli(tmp_path / "ddp", "strategy=ddp", "trainer.devices=2", "data.batch_size=4")
    cli(tmp_path / "single", "data.batch_size=8")
    for key in ("train/loss", "val/loss"):
        ddp, single = logged(tmp_path / "ddp", key), logged(tmp_path / "single", key)
        assert ddp.keys() == single.keys()
        assert all(abs(ddp[s] - single[s]) < 1e-5 for s in ddp), (ddp, single)
    a = checkpoint_weights(tmp_path / "ddp" / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(tmp_path / "single" / "checkpoints" / "last.ckpt")
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    assert torch.load(tmp_path / "ddp" / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6


def test_scl_negatives_gathered_across_processes_match_one_process(tmp_path: Path) -> None:
    """Before the first update the weights agree, so the step-0 losses must too: the two processes'
    gathered views are exactly the single process's batch (gradients differ by design: each process
    keeps those of its own shard)."""
    common = [
        "recipe=coco_lm",
        "model=tiny",
        "regularizer.coco_scl.gather_negatives=true",
        "trainer.max_steps=1",
        "data.tokenizer.vocab_size=1000",
    ]
    cli(tmp_path / "ddp", *common, "strategy=ddp", "trainer.devices=2", "data.batch_size=4")
    cli(tmp_path / "single", *common, "data.batch_size=8")
    for key in ("train/coco_scl/loss", "train/coco_clm/loss", "train/loss"):
        ddp, single = logged(tmp_path / "ddp", key), logged(tmp_path / "single", key)
        assert abs(ddp[0] - single[0]) < 1e-4, (key, ddp, single)
