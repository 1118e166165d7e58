"""callbacks.weight_averaging: EMA and SWA of the weights, validated and exported, kept exactly across a resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import checkpoint_weights, logged, run

EVERY_STEP = ["callbacks.checkpoint.every_n_train_steps=1", "callbacks.checkpoint.save_top_k=-1",
              "trainer.val_check_interval=2", "scheduler.warmup_steps=1"]  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # EMA, decay 0.5: θ̄₁ = θ₁ (the first update copies), θ̄ₖ = 0.5·θ̄ₖ₋₁ + 0.5·θₖ.
        (["kind=ema", "decay=0.5"], lambda w: 0.5 * (0.5 * (0.5 * w[1] + 0.5 * w[2]) + 0.5 * w[3]) + 0.5 * w[4]),
        # SWA from step 2, every update: the plain mean of θ₂, θ₃, θ₄.
        (["kind=swa", "start_step=2"], lambda w: (w[2] + w[3] + w[4]) / 3),
    ],
    ids=["ema", "swa"],
)
def test_the_export_is_the_average_of_the_steps_weights(tmp_path: Path, settings: list[str], expected) -> None:  # noqa: ANN001
    summary = run(tmp_path, *EVERY_STEP, "trainer.max_steps=4", *(f"callbacks.weight_averaging.{s}" for s in settings))
    steps = {k: checkpoint_weights(tmp_path / "checkpoints" / f"step={k:08d}.ckpt") for k in range(1, 5)}
    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    for name, tensor in exported.items():
        key = f"backbone.model.{name}"
        torch.testing.assert_close(tensor, expected({k: w[key] for k, w in steps.items()}), rtol=0, atol=1e-6)
    # The checkpoint keeps what training left (resumes, degen-convert, branching read it); the average beside it.
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert all(torch.equal(v, steps[4][k]) for k, v in last["state_dict"].items() if k in steps[4])
    assert summary["weight_averaging"]["updates"] == (4 if "kind=ema" in settings else 3)


def test_validation_reads_the_average_and_training_never_does(tmp_path: Path) -> None:
    ema = ["callbacks.weight_averaging.kind=ema", "callbacks.weight_averaging.decay=0.9", "trainer.max_steps=4",
           "trainer.val_check_interval=2", "final_validation=false", "scheduler.warmup_steps=1"]  # fmt: skip
    run(tmp_path / "averaged", *ema)
    run(tmp_path / "current", *ema, "callbacks.weight_averaging.validate=current")
    run(tmp_path / "off", *ema[2:])
    assert logged(tmp_path / "averaged", "train/loss") == logged(tmp_path / "off", "train/loss")
    assert logged(tmp_path / "current", "val/loss") == logged(tmp_path / "off", "val/loss")
    averaged, current = logged(tmp_path / "averaged", "val/loss"), logged(tmp_path / "current", "val/loss")
    assert averaged.keys() == current.keys() and all(averaged[s] != current[s] for s in averaged)


def test_a_resumed_average_equals_one_run(tmp_path: Path) -> None:
    ema = ["callbacks.weight_averaging.kind=ema", "callbacks.weight_averaging.decay=0.8",
           "callbacks.checkpoint.every_n_train_steps=3", "trainer.val_check_interval=3",
           "scheduler.total_steps=6"]  # fmt: skip
    run(tmp_path / "straight", *ema, "trainer.max_steps=6")
    run(tmp_path / "split", *ema, "trainer.max_steps=3")
    run(tmp_path / "split", *ema, "trainer.max_steps=6", "ckpt_path=last")
    a, b = (load_file(str(tmp_path / d / "hf" / "model.safetensors")) for d in ("straight", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    a, b = (checkpoint_weights(tmp_path / d / "checkpoints" / "last.ckpt") for d in ("straight", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert logged(tmp_path / "straight", "val/loss") == logged(tmp_path / "split", "val/loss")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["callbacks.weight_averaging.kind=ema", "callbacks.weight_averaging.decay=1.0"],
         r"callbacks.weight_averaging.decay=1.0 must be in \(0, 1\)"),
        (["callbacks.weight_averaging.kind=mean"], r"callbacks.weight_averaging.kind='mean' is not one of null, ema"),
        (["callbacks.weight_averaging.kind=ema", "strategy=fsdp"],
         r"callbacks.weight_averaging keeps a whole copy of the model beside it, which strategy=fsdp shards"),
    ],
    ids=["decay", "kind", "fsdp2"],
)  # fmt: skip
def test_bad_averaging_settings_are_named_before_anything_is_written(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run(tmp_path, *overrides)
    assert not (tmp_path / "config.yaml").exists() and not (tmp_path / "checkpoints").exists()
