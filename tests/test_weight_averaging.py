"""callbacks.weight_averaging: EMA and SWA of the weights as Hägele et al. 2024 released them
(epfml/schedules-and-scaling src/optim/weight_averaging.py), validated beside the trained model, exported on request,
kept exactly across a resume."""

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
        # EMA, decay 0.5, every update: θ̄₁ = θ₁ (the first sample copies), θ̄ₖ = 0.5·θ̄ₖ₋₁ + 0.5·θₖ.
        (["kind=ema", "decay=0.5", "every_n_steps=1"],
         lambda w: 0.5 * (0.5 * (0.5 * w[1] + 0.5 * w[2]) + 0.5 * w[3]) + 0.5 * w[4]),
        # SWA after update 1 (start_step=1), every update, one running mean: the plain mean of θ₂, θ₃, θ₄.
        (["kind=swa", "start_step=1", "every_n_steps=1", "window=0"], lambda w: (w[2] + w[3] + w[4]) / 3),
        # SWA with a window of 2 updates: the last completed window's mean, θ₃ and θ₄.
        (["kind=swa", "every_n_steps=1", "window=2"], lambda w: (w[3] + w[4]) / 2),
    ],
    ids=["ema", "swa", "swa-window"],
)  # fmt: skip
def test_the_export_is_the_average_of_the_steps_weights(tmp_path: Path, settings: list[str], expected) -> None:  # noqa: ANN001
    summary = run(tmp_path, *EVERY_STEP, "trainer.max_steps=4", "callbacks.weight_averaging.export=averaged",
                  *(f"callbacks.weight_averaging.{s}" for s in settings))  # fmt: skip
    steps = {k: checkpoint_weights(tmp_path / "checkpoints" / f"step={k:08d}.ckpt") for k in range(1, 5)}
    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    for name, tensor in exported.items():
        key = f"backbone.model.{name}"
        torch.testing.assert_close(tensor, expected({k: w[key] for k, w in steps.items()}), rtol=0, atol=1e-6)
    # The checkpoint keeps what training left (resumes, degen-convert, branching read it); the average beside it.
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert all(torch.equal(v, steps[4][k]) for k, v in last["state_dict"].items() if k in steps[4])
    assert summary["weight_averaging"]["updates"] == {"ema": 4, "swa": 3, "swa-window": 4}[
        "ema" if "kind=ema" in settings else "swa-window" if "window=2" in settings else "swa"]


def test_the_released_defaults_validate_the_average_beside_the_trained_model(tmp_path: Path) -> None:
    """The defaults (EMA 0.95 every 10, float32, validate both, export the trained weights): val/ is the trained
    model's (equal to a run without averaging), val_average/ the EMA's, both in summary.json and the report."""
    from degen_train.cli.report import report

    common = ["trainer.max_steps=20", "trainer.val_check_interval=10", "scheduler.warmup_steps=1"]
    summary = run(tmp_path / "runs" / "ema", *common, "callbacks.weight_averaging.kind=ema")
    run(tmp_path / "off", *common)
    assert logged(tmp_path / "runs" / "ema", "val/loss") == logged(tmp_path / "off", "val/loss")
    assert logged(tmp_path / "runs" / "ema", "train/loss") == logged(tmp_path / "off", "train/loss")
    beside = logged(tmp_path / "runs" / "ema", "val_average/loss")
    assert sorted(beside) == sorted(logged(tmp_path / "off", "val/loss"))
    averaging = summary["weight_averaging"]
    assert (averaging["decay"], averaging["every_n_steps"], averaging["dtype"]) == (0.95, 10, "float32")
    assert averaging["updates"] == 2  # updates 1 and 11
    assert averaging["val_loss"] == summary["val_metrics"]["val_average/loss"] != summary["val_loss"]
    exported = load_file(str(tmp_path / "runs" / "ema" / "hf" / "model.safetensors"))
    trained = checkpoint_weights(tmp_path / "runs" / "ema" / "checkpoints" / "last.ckpt")
    assert all(torch.equal(t, trained[f"backbone.model.{k}"]) for k, t in exported.items())
    (row,) = report([tmp_path / "runs"], run_analysis=False)["rows"]
    assert row["average/val_objective_loss"] == pytest.approx(summary["val_metrics"]["val_average/mlm/loss"])


def test_validation_reads_the_average_and_training_never_does(tmp_path: Path) -> None:
    ema = ["callbacks.weight_averaging.kind=ema", "callbacks.weight_averaging.decay=0.9", "trainer.max_steps=4",
           "trainer.val_check_interval=2", "final_validation=false", "scheduler.warmup_steps=1",
           "callbacks.weight_averaging.every_n_steps=1"]  # fmt: skip
    run(tmp_path / "averaged", *ema, "callbacks.weight_averaging.validate=averaged")
    run(tmp_path / "current", *ema, "callbacks.weight_averaging.validate=current")
    run(tmp_path / "off", *ema[2:-1])
    assert logged(tmp_path / "averaged", "train/loss") == logged(tmp_path / "off", "train/loss")
    assert logged(tmp_path / "current", "val/loss") == logged(tmp_path / "off", "val/loss")
    averaged, current = logged(tmp_path / "averaged", "val/loss"), logged(tmp_path / "current", "val/loss")
    assert averaged.keys() == current.keys() and all(averaged[s] != current[s] for s in averaged)


@pytest.mark.parametrize("kind", ["ema", "swa"])
def test_a_resumed_average_equals_one_run(tmp_path: Path, kind: str) -> None:
    """A window (SWA: 4 updates sampled every 2) and an EMA sampled every 2, each split at update 3 mid-window."""
    settings = ["decay=0.8", "every_n_steps=2"] if kind == "ema" else ["every_n_steps=2", "window=4"]
    ema = [f"callbacks.weight_averaging.kind={kind}", *(f"callbacks.weight_averaging.{s}" for s in settings),
           "callbacks.weight_averaging.export=averaged", "callbacks.checkpoint.every_n_train_steps=3",
           "trainer.val_check_interval=3", "scheduler.total_steps=6"]  # fmt: skip
    run(tmp_path / "straight", *ema, "trainer.max_steps=6")
    run(tmp_path / "split", *ema, "trainer.max_steps=3")
    run(tmp_path / "split", *ema, "trainer.max_steps=6", "ckpt_path=last")
    a, b = (load_file(str(tmp_path / d / "hf" / "model.safetensors")) for d in ("straight", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    a, b = (checkpoint_weights(tmp_path / d / "checkpoints" / "last.ckpt") for d in ("straight", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert logged(tmp_path / "straight", "val/loss") == logged(tmp_path / "split", "val/loss")
    assert logged(tmp_path / "straight", "val_average/loss") == logged(tmp_path / "split", "val_average/loss")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # the section's own rules (callbacks/sections.py), said by the checked config before anything is built
        (["callbacks.weight_averaging.kind=ema", "callbacks.weight_averaging.decay=1.0"],
         r"callbacks.weight_averaging.decay=1.0: Input should be less than 1"),
        (["callbacks.weight_averaging.kind=mean"], r"callbacks.weight_averaging.kind='mean': Input should be 'ema' or"),
        (["callbacks.weight_averaging.kind=swa", "callbacks.weight_averaging.window=12"],
         r"callbacks.weight_averaging: window=12 must be a multiple of every_n_steps=5"),
        (["callbacks.weight_averaging.kind=ema", "callbacks.weight_averaging.dtype=half"],
         r"callbacks.weight_averaging.dtype='half': Input should be 'float32' or 'model'"),
        (["callbacks.weight_averaging.kind=ema", "strategy=fsdp"],
         r"callbacks.weight_averaging keeps a whole copy of the model beside it, which strategy=fsdp shards"),
        (["callbacks.best_by_sts.pooling=max"], r"callbacks.best_by_sts.pooling='max': Input should be 'mean' or"),
        (["callbacks.best_by_sts.sts=sts.csv", "strategy=fsdp"],
         r"callbacks.best_by_sts scores the whole model between steps, which strategy=fsdp keeps sharded"),
    ],
    ids=["decay", "kind", "window", "dtype", "fsdp2", "sts_pooling", "sts_fsdp2"],
)  # fmt: skip
def test_bad_averaging_settings_are_named_before_anything_is_written(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run(tmp_path, *overrides)
    assert not (tmp_path / "config.yaml").exists() and not (tmp_path / "checkpoints").exists()
