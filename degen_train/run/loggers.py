"""Logger factories that are safe offline."""

from __future__ import annotations

import csv
import netrc
import os
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from omegaconf import OmegaConf

from degen_train.core.io import atomic_write_json, atomic_write_text, cache_key, staged_file


def wandb_has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc().authenticators("api.wandb.ai")
    except (FileNotFoundError, netrc.NetrcParseError):
        return False
    return auth is not None


@runtime_checkable
class ResumingLogger(Protocol):
    """A logger whose files survive a resume (ResumableCSVLogger): the rows after the checkpoint are dropped."""

    def prepare_resume(self, step: int, last_train_row: dict[str, float] | None = None) -> None: ...

    def drop_validation_rows_from(self, step: int) -> None: ...


@runtime_checkable
class ClosingLogger(Protocol):
    """A logger that ends its run with the run's summary (RunWandbLogger)."""

    def close_run(self, summary: dict[str, Any]) -> None: ...


class RunWandbLogger(WandbLogger):
    """WandbLogger that ends its run: the run's summary.json as the wandb summary, then ``finish``."""

    def close_run(self, summary: dict[str, Any]) -> None:
        flat = {k: v for k, v in summary.items() if isinstance(v, int | float | str) and not isinstance(v, bool)}
        for group in ("isotropy", "val_metrics", "paper_metrics"):
            flat |= {k: v for k, v in (summary.get(group) or {}).items() if isinstance(v, int | float)}
        run = self.experiment
        run.summary.update(flat)
        if run.settings.mode == "offline":  # wandb keeps an offline run's config and summary in its .wandb file only
            files = Path(run.dir)
            atomic_write_text(files / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(dict(run.config.as_dict()))))
            atomic_write_json(files / "wandb-summary.json", flat)
        run.finish()


def wandb_run_id(save_dir: str) -> str:
    """One wandb id per run folder: every segment of a resumed run logs (and syncs) into the same wandb run."""
    return "dt-" + cache_key(str(Path(save_dir).expanduser().resolve()))


def wandb_logger(
    *, mode: str = "auto", save_dir: str, project: str, group: str | None = None, name: str | None = None, **kwargs: Any
) -> RunWandbLogger:
    """A WandbLogger that never prompts: mode=auto is online only with credentials, else offline.

    The run id comes from the run folder (``resume="allow"``), the name defaults to the folder's name and the
    group to the sweep's folder, so a sweep's runs appear as one group.
    """
    if mode == "auto":
        mode = os.environ.get("WANDB_MODE") or ("online" if wandb_has_credentials() else "offline")
    group = group or sweep_group()
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_CONSOLE", "off")
    kwargs.setdefault("id", wandb_run_id(save_dir))
    kwargs.setdefault("resume", "allow")
    return RunWandbLogger(
        project=project,
        group=group,
        name=name or Path(save_dir).name,
        save_dir=save_dir,
        mode=mode,
        **kwargs,
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
            if logged_at == step and keys and all(k.startswith(("isotropy/", "outliers/")) for k in keys):
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
