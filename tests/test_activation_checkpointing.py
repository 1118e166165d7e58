"""model.activation_checkpointing in whole runs: the weights of a run without it (gradients per architecture:
tests/unit/test_activation_checkpointing.py; under FSDP2 on two processes: tests/test_fsdp.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from tests.helpers import checkpoint_weights, run
from tests.test_recipes import overrides


@pytest.mark.parametrize("recipe", ["tacl", "coco_lm"])
def test_a_run_with_it_trains_the_same_weights(
    recipe: str, tmp_path: Path, teacher_with_dropout: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Whole runs with dropout on: TaCL (its teacher is not wrapped) and COCO-LM (its generator is not wrapped; the
    main model's blocks are), full checkpointing against none, identical weights after 4 updates."""
    common = [*overrides(recipe, teacher_with_dropout), "trainer.max_steps=4", "export_hf=false"]
    run(tmp_path / "none", *common)
    with caplog.at_level(logging.INFO, logger="degen_train"):
        run(tmp_path / "full", *common, "model.activation_checkpointing=full")
    assert "model.activation_checkpointing=full: 2 blocks recompute" in caplog.text
    a = checkpoint_weights(tmp_path / "none" / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(tmp_path / "full" / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
