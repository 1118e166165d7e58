"""Loggers: wandb goes offline without credentials and never prompts; CSV logs survive a resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from degen_train.run.loggers import ResumableCSVLogger, wandb_logger


def test_wandb_without_credentials_runs_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a key
    logger = wandb_logger(mode="auto", save_dir=str(tmp_path), project="test", group="sweep-a")
    logger.log_metrics({"train/loss": 1.5}, step=1)
    logger.experiment.finish()
    assert any((tmp_path / "wandb").glob("offline-run-*")), list(tmp_path.rglob("*"))[:10]


def test_wandb_mode_is_checked() -> None:
    """By the logger's section (run/sections.py), as the command line meets it, before any framework loads."""
    from degen_train.core.section import checked_section
    from degen_train.run.sections import LoggersConfig

    with pytest.raises(ValueError, match=r"logger.wandb.mode='sometimes': Input should be 'auto', 'online', 'offline'"):
        checked_section(LoggersConfig, {"wandb": {"mode": "sometimes", "project": "p"}}, "logger")


def test_csv_rows_before_the_resumed_step_are_kept(tmp_path: Path) -> None:
    first = ResumableCSVLogger(save_dir=str(tmp_path), name="logs", version="")
    for step in range(6):
        first.log_metrics({"train/loss": float(step)}, step=step)
    first.save()
    second = ResumableCSVLogger(save_dir=str(tmp_path), name="logs", version="")
    second.prepare_resume(4)  # the checkpoint was at step 4: rows 4 and 5 will be logged again
    for step in (4, 5):
        second.log_metrics({"train/loss": 10.0 + step}, step=step)
    second.save()
    lines = (tmp_path / "logs" / "metrics.csv").read_text().splitlines()
    assert lines[1:] == ["0,0.0", "1,1.0", "2,2.0", "3,3.0", "4,14.0", "5,15.0"]
