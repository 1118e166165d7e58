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

from degen_train.io import staged_file

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

    def drop_rows_from(self, step: int, *, only_validation: bool = False) -> None:
        """Forget rows logged at ``step`` or later (written after the checkpoint a run resumes from).

        A row torn by a kill (no parsable step) goes too. The file is rewritten through a staged file, so a
        kill during the rewrite leaves the old file whole.
        """
        if not self._fs.isfile(self.metrics_file_path):
            return
        with self._fs.open(self.metrics_file_path, "r", newline="") as handle:
            rows = list(csv.DictReader(handle))

        def keep(row: dict) -> bool:
            try:
                logged_at = int(float(row.get("step") or "nan"))
            except ValueError:
                return False
            if logged_at < step:
                return True
            keys = [k for k, v in row.items() if k and v and k != "step"]
            if logged_at == step and keys and all(k.startswith("isotropy/") for k in keys):
                return True  # stamped with the step count it measured, which the checkpoint at ``step`` includes
            return only_validation and not any(k.startswith("val/") for k in keys)

        kept = [row for row in rows if None not in row and keep(row)]
        if len(kept) != len(rows):
            with staged_file(Path(self.metrics_file_path), "w") as handle:
                writer = csv.DictWriter(handle, fieldnames=self.metrics_keys, lineterminator="\r\n")
                writer.writeheader()
                writer.writerows(kept)

    def has_train_row(self, step: int) -> bool:
        if not self._fs.isfile(self.metrics_file_path):
            return False
        with self._fs.open(self.metrics_file_path, "r", newline="") as handle:
            return any(row.get("step") == str(step) and row.get("train/loss") for row in csv.DictReader(handle))


class ResumableCSVLogger(CSVLogger):
    """CSVLogger whose metrics.csv survives a resume: rows before the resumed step are kept."""

    @property
    @rank_zero_experiment
    def experiment(self) -> _AppendingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    def prepare_resume(self, step: int, last_train_row: dict[str, float] | None = None) -> None:
        """Drop rows written after the checkpoint at ``step``; restore its own train row if a kill lost it."""
        self.experiment.drop_rows_from(step)
        if step > 0 and last_train_row and not self.experiment.has_train_row(step - 1):
            self.log_metrics(last_train_row, step=step - 1)
            self.save()

    def drop_validation_rows_from(self, step: int) -> None:
        self.experiment.drop_rows_from(step, only_validation=True)
