"""The Trainer of a run from its typed config: the callbacks, loggers, strategy and checkpoint IO Hydra builds from
the config's plain settings, and the choices they depend on (the device, the validation interval)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

import hydra
import lightning.pytorch as pl
import torch
from hydra.errors import InstantiationException
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar

from degen_train.callbacks.plain_progress import PlainProgress
from degen_train.config.schema import TrainConfig
from degen_train.run.sections import TrainerConfig
from degen_train.storage.checkpoints import AtomicCheckpointIO, BackgroundCheckpointIO

log = logging.getLogger("degen_train")

def instantiate(cfg: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, but our own input errors surface as themselves, not wrapped."""
    try:
        return hydra.utils.instantiate(cfg, **kwargs)
    except InstantiationException as error:
        if isinstance(error.__cause__, ValueError | OSError):
            raise error.__cause__ from None
        raise


def build_strategy(section: Mapping[str, Any]) -> Any:
    """strategy: a strategy Hydra builds (``_target_``), or the name Lightning knows it by."""
    if section.get("_target_"):
        return instantiate(section)
    return section["name"]


def build_trainer(config: TrainConfig, *, interactive: bool | None = None) -> pl.Trainer:
    """The Trainer with our callbacks, loggers and checkpoint IO, built from the typed config's plain settings (the
    sections Hydra instantiates keep only their given keys: TrainConfig.plain_settings).

    ``interactive``: is the output a terminal (default: ask stderr)? If not, the progress bar becomes plain
    log lines every ``trainer.log_every_n_steps`` steps (a bar in a file is carriage returns and escapes).
    """
    settings = config.plain_settings()
    trainer = settings["trainer"]
    callbacks = [instantiate(c) for c in (settings.get("callbacks") or {}).values() if c is not None]
    bar_wanted = trainer.get("enable_progress_bar", True) and any(isinstance(c, ProgressBar) for c in callbacks)
    interactive = sys.stderr.isatty() if interactive is None else interactive
    overrides: dict[str, Any] = {}
    if not trainer.get("enable_progress_bar", True) or not interactive:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
        overrides["enable_progress_bar"] = False
    if bar_wanted and not interactive:
        callbacks.append(PlainProgress(every_n_steps=trainer["log_every_n_steps"]))
    if trainer.get("val_check_interval") == "auto":  # the schema says its type and default (run/sections.py)
        overrides["val_check_interval"] = validation_interval(config.trainer)
    loggers = [instantiate(c) for c in (settings.get("logger") or {}).values() if c is not None]
    if not loggers:  # logger=none: nothing for a learning-rate monitor to write to
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    return instantiate(
        trainer,
        callbacks=callbacks,
        logger=loggers or False,
        strategy=build_strategy(settings["strategy"]),
        plugins=[checkpoint_io(config), *slurm_without_auto_requeue()],  # staged, verified, weights-only checkpoints
        **overrides,
    )


AUTO_VALIDATIONS, LONGEST_INTERVAL = 5, 100


def validation_interval(trainer: TrainerConfig) -> int:
    """trainer.val_check_interval=auto: the training batches between validations, every max_steps / 5 updates and at
    most every 100 (a 60-step run validates at 12, 24, ... instead of once at its end)."""
    updates = min(LONGEST_INTERVAL, max(1, int(trainer.max_steps) // AUTO_VALIDATIONS))
    return updates * int(trainer.accumulate_grad_batches)


def on_gpu(trainer: TrainerConfig) -> bool:
    """Whether this run trains on CUDA devices (trainer.accelerator gpu/cuda, or auto with one present)."""
    accelerator = str(trainer.accelerator or "auto")
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())


def checkpoint_io(config: TrainConfig) -> Any:
    """Staged, verified, weights-only checkpoint files, written on a writer thread when callbacks.checkpoint.background
    says so (auto: on a GPU)."""
    checkpoint = config.callbacks.checkpoint if config.callbacks is not None else None
    background = checkpoint.background if checkpoint is not None else "auto"
    if background is True or (background == "auto" and on_gpu(config.trainer)):
        return BackgroundCheckpointIO()
    return AtomicCheckpointIO()


def slurm_without_auto_requeue() -> list[Any]:
    """Under SLURM, Lightning's environment with its auto-requeue off: the Preemption callback owns SIGUSR1.

    Lightning's own requeue writes ``RUN/hpc_ckpt_N.ckpt`` beside the run's verified checkpoints, resumes from it only
    when no ckpt_path is given, and restores it in any later ``validate()`` (the export then held stale weights).
    """
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []

