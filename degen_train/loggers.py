"""Logger factories that are safe offline."""

from __future__ import annotations

import csv
import netrc
import os
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

WANDB_MODES = ("auto", "online", "offline", "disabled")


def wandb_has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc().authenticators("api.wandb.ai")
    except (FileNotFoundError, netrc.NetrcParseError):
        return False
    return auth is not None


def wandb_logger(
    *, mode: str = "auto", save_dir: str, project: str, group: str | None = None, name: str | None = None, **kwargs: Any
) -> WandbLogger:
    """A WandbLogger that never prompts: mode=auto is online only with credentials, else offline."""
    if mode not in WANDB_MODES:
        raise ValueError(f"logger.wandb.mode={mode!r} is not one of {', '.join(WANDB_MODES)}")
    if mode == "auto":
        mode = os.environ.get("WANDB_MODE") or ("online" if wandb_has_credentials() else "offline")
    group = group or sweep_group()
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_CONSOLE", "off")
    return WandbLogger(
        project=project, group=group, name=name, save_dir=save_dir, mode=mode, anonymous="never", **kwargs
    )


def sweep_group() -> str | None:
    """Inside a Hydra multirun: the sweep folder's name, so the runs of one sweep share a wandb group."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(str(HydraConfig.get().sweep.dir)).name
    return None


class _AppendingWriter(ExperimentWriter):
    """Keeps an existing metrics.csv (a resumed run appends to it) instead of deleting it."""

    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as handle:
                header = next(csv.reader(handle), [])
            self.metrics_keys = sorted(header)

    def drop_rows_from(self, step: int) -> None:
        """Forget rows logged at ``step`` or later (written after the checkpoint a run resumes from)."""
        if not self._fs.isfile(self.metrics_file_path):
            return
        with self._fs.open(self.metrics_file_path, "r", newline="") as handle:
            rows = list(csv.DictReader(handle))
        kept = [row for row in rows if not row.get("step") or int(float(row["step"])) < step]
        if len(kept) != len(rows):
            with self._fs.open(self.metrics_file_path, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=self.metrics_keys)
                writer.writeheader()
                writer.writerows(kept)


class ResumableCSVLogger(CSVLogger):
    """CSVLogger whose metrics.csv survives a resume: rows before the resumed step are kept."""

    @property
    @rank_zero_experiment
    def experiment(self) -> _AppendingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    def prepare_resume(self, step: int) -> None:
        self.experiment.drop_rows_from(step)
