"""callbacks.cadence (issue 45.3): validation, the isotropy probe and checkpoints every so many minutes of training,
turned into updates once after the warm-up. The clock is the test's own (one second per update), so the updates
chosen are known: 0.05 min = 3 s = every 3 updates from the 11th update on."""

from __future__ import annotations

from pathlib import Path

import pytest

from degen_train.callbacks import cadence
from degen_train.callbacks.cadence import ClockCadence, updates_for
from tests.helpers import SAME_RUN_SETTINGS, logged, on_two_processes, run


def test_minutes_become_the_nearest_whole_updates() -> None:
    assert updates_for(30, 1.5) == 1200 and updates_for(0.05, 1.0) == 3 and updates_for(1, 600.0) == 1
    with pytest.raises(ValueError, match=r"checkpoint_minutes=0 must be > 0"):
        ClockCadence(checkpoint_minutes=0)


def test_periodic_work_runs_on_the_clock_after_the_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every 3 s at 1 s per update: validation, the probe and periodic checkpoints at updates 12 and 15 of 16, none in
    the 10 warm-up updates (their settings in updates, 5, would have run them at 5, 10 and 15)."""
    ticks = iter(range(1000))
    monkeypatch.setattr(cadence, "CLOCK", lambda: float(next(ticks)))
    summary = run(tmp_path, "trainer.max_steps=16", "trainer.val_check_interval=5", "final_validation=false",
                  "callbacks.isotropy.every_n_steps=5", "callbacks.isotropy.at_end=false",
                  "callbacks.checkpoint.every_n_train_steps=5", "callbacks.checkpoint.save_top_k=-1",
                  "callbacks.cadence.validation_minutes=0.05", "callbacks.cadence.isotropy_minutes=0.05",
                  "callbacks.cadence.checkpoint_minutes=0.05", "export_hf=false")  # fmt: skip
    # after updates 12 and 15: Lightning logs a validation after update u at u − 1 (every 5 updates: 4, 9, 14)
    assert sorted(logged(tmp_path, "val/loss")) == [11, 14]
    assert sorted(logged(tmp_path, "isotropy/embedding/mean_cosine")) == [12, 15]
    periodic = sorted(p.name for p in (tmp_path / "checkpoints").glob("step=*.ckpt"))
    assert periodic == ["step=00000012.ckpt", "step=00000015.ckpt"]
    assert summary["cadence"]["checkpoint"] == {"minutes": 0.05, "updates": 3, "seconds_per_update": 1.0}


def test_two_processes_whose_clocks_disagree_keep_one_cadence(tmp_path: Path) -> None:
    """Rank 0's clock says 1 s per update, rank 1's 3 s: each alone would choose every 3 and every 1 update, and a
    validation on one rank only waits forever on the other's collectives. Rank 0's choice is broadcast: both validate
    and save at updates 12 and 15, and the run ends."""
    settings = [*SAME_RUN_SETTINGS, "trainer.devices=2", "strategy=ddp", "data.batch_size=4", "trainer.max_steps=16",
                "final_validation=false", "callbacks.cadence.validation_minutes=0.05",
                "callbacks.cadence.checkpoint_minutes=0.05", "callbacks.checkpoint.save_top_k=-1"]  # fmt: skip
    on_two_processes([(tmp_path, settings)], seconds_per_update={"0": 1.0, "1": 3.0})
    assert sorted(logged(tmp_path, "val/loss")) == [11, 14]
    periodic = sorted(p.name for p in (tmp_path / "checkpoints").glob("step=*.ckpt"))
    assert periodic == ["step=00000012.ckpt", "step=00000015.ckpt"]
    assert "validation every 0.05 min = every 3 updates" in (tmp_path / "train.log").read_text()
