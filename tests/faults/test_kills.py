"""kill -9 at chosen moments, then resume: the run ends bit-identical to one that was never killed."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM

from degen_train.storage.checkpoints import verified_step
from tests.faults.conftest import STEPS, killed_run
from tests.helpers import checkpoint_weights, run


def assert_same_weights(run_dir: Path, reference: Path) -> None:
    a = checkpoint_weights(reference / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(run_dir / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys()
    differ = {k: float((a[k].double() - b[k].double()).abs().max()) for k in a if not torch.equal(a[k], b[k])}
    assert not differ, f"resumed weights differ from the uninterrupted run in {len(differ)} of {len(a)} tensors " + (
        ", ".join(f"{k} (max |Δ| {d:.3g})" for k, d in sorted(differ.items())[:5]))  # fmt: skip


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "logs" / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def assert_clean_metrics(run_dir: Path, reference: Path) -> None:
    """The same rows as the uninterrupted run: no duplicates, no torn lines, same losses."""

    def losses(rows: list[dict[str, str]], key: str) -> list[tuple[str, str]]:
        return [(r["step"], r[key]) for r in rows if r.get(key)]

    ours, theirs = metrics_rows(run_dir), metrics_rows(reference)
    assert all(None not in row for row in ours), "a torn or misaligned row in metrics.csv"
    for key in ("train/loss", "val/loss", "isotropy/embedding/mean_cosine"):
        assert losses(ours, key) == losses(theirs, key), key


def test_kill_mid_step_then_resume(tmp_path: Path, drill: list[str], reference: Path) -> None:
    killed_run("kill_at_step=5", tmp_path, *drill)
    assert verified_step(tmp_path / "checkpoints" / "last.ckpt") == 4
    run(tmp_path, *drill, "ckpt_path=last")
    assert_same_weights(tmp_path, reference)
    assert_clean_metrics(tmp_path, reference)


def test_kill_between_step_file_and_last_takes_the_newer_step_file(
    tmp_path: Path, drill: list[str], reference: Path, caplog: pytest.LogCaptureFixture
) -> None:
    killed_run("kill_after_file=step=00000006.ckpt", tmp_path, *drill)
    folder = tmp_path / "checkpoints"
    assert verified_step(folder / "last.ckpt") == 4 and verified_step(folder / "step=00000006.ckpt") == 6
    with caplog.at_level("INFO", logger="degen_train"):
        run(tmp_path, *drill, "ckpt_path=last")
    assert "resuming from " + str(folder / "step=00000006.ckpt") in caplog.text
    assert_same_weights(tmp_path, reference)
    assert_clean_metrics(tmp_path, reference)
    # Rotation by step across the restart: the two newest periodic files, no -v1 copies, every file verified.
    assert sorted(p.name for p in folder.glob("*.ckpt")) == ["last.ckpt", "step=00000006.ckpt", "step=00000008.ckpt"]
    assert all(verified_step(p) is not None for p in folder.glob("*.ckpt"))


def test_kill_mid_checkpoint_write_on_another_filesystem(tmp_path: Path, drill: list[str], reference: Path) -> None:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)], capture_output=True)
    # Without a tmpfs (not root) the drill still kills mid-write; only the separate filesystem is missing.
    try:
        run_dir = mount / "run"
        killed_run("kill_mid_write=last.ckpt", run_dir, *drill)
        folder = run_dir / "checkpoints"
        # The kill hit the first rewrite of last.ckpt after step 2: the step file is whole, last.ckpt was
        # never renamed into place (or is the previous whole one), and a torn staging file is ignored.
        assert verified_step(folder / "step=00000002.ckpt") == 2
        assert not (folder / "last.ckpt").exists() or verified_step(folder / "last.ckpt") is not None
        assert list(folder.glob(".last.ckpt.*.tmp")), "the kill should have left a torn staging file"
        run(run_dir, *drill, "ckpt_path=last")
        assert_same_weights(run_dir, reference)
        assert_clean_metrics(run_dir, reference)
    finally:
        if mounted.returncode == 0:
            # Lazy: the in-process run's log handle may still be open, and a busy mount would outlive the test.
            subprocess.run(["umount", "--lazy", str(mount)], check=False)


def test_kill_during_final_validation_then_resume(tmp_path: Path, drill: list[str]) -> None:
    # Validation every 3 updates: the last periodic one is at update 6, so the run validates once more at its end
    # (at 4, the periodic validation at update 8 would be the final one: pretrain.fit does not repeat it).
    cadence = [*drill, "trainer.val_check_interval=3"]
    reference = tmp_path / "reference"
    run(reference, *cadence)
    killed = tmp_path / "killed"
    killed_run("kill_in_final_validation", killed, *cadence)
    assert not (killed / "summary.json").exists()
    summary = run(killed, *cadence, "ckpt_path=last")
    expected = run_summary(reference)
    tmp_path = killed
    assert summary["final_step"] == STEPS
    assert summary["train_loss"] == expected["train_loss"] and summary["val_loss"] == expected["val_loss"]
    assert summary["tokens_per_s"] > 0 and summary["isotropy"] == expected["isotropy"]
    assert_same_weights(tmp_path, reference)
    assert_clean_metrics(tmp_path, reference)


def test_kill_during_export_then_resume(tmp_path: Path, drill: list[str], reference: Path) -> None:
    killed_run("kill_in_export", tmp_path, *drill)
    assert not (tmp_path / "hf").exists() and not (tmp_path / "summary.json").exists()
    summary = run(tmp_path, *drill, "ckpt_path=last")
    assert summary["val_loss"] == run_summary(reference)["val_loss"]
    assert_same_weights(tmp_path, reference)
    assert_clean_metrics(tmp_path, reference)  # the final validation row is not doubled
    AutoModelForMaskedLM.from_pretrained(tmp_path / "hf")
    shutil.rmtree(tmp_path / "hf")


def run_summary(run_dir: Path) -> dict:
    import json

    return json.loads((run_dir / "summary.json").read_text())
