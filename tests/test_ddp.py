"""Two CPU processes (gloo) give the losses and weights of one process holding the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.conftest import FAST
from tests.helpers import checkpoint_weights, logged

CLI = str(Path(sys.executable).parent / "degen-train")
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
    result = subprocess.run(
        [CLI, *COMMON, *overrides, f"hydra.run.dir={run_dir}"],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=600,
    )
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
