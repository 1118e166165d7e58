"""Preemption (SLURM, Kubernetes, scancel, Ctrl-C): finish the update, write a verified checkpoint, exit 75.

Lightning's own SIGTERM handling checks the signal once per epoch (an endless loader never ends one) and then
exits with code 0, saving nothing. Here SIGTERM and SIGINT only set a flag; at the end of the update in progress
every process agrees (one all-reduce), ``last.ckpt`` is written through the run's checkpoint callback (staged,
fsynced, with its sidecar), and the run stops with ``RunPreempted``: the command exits with PREEMPTED_EXIT, the
code that says "resume me", and ``ckpt_path=auto`` continues bit-identically. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from degen_train.callbacks.checkpoint import RunCheckpoint

log = logging.getLogger("degen_train")

PREEMPTED_EXIT = 75  # sysexits' EX_TEMPFAIL: a temporary failure, the caller is invited to retry (resume)
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunPreempted(Exception):
    """The run stopped on a signal after writing a checkpoint it resumes from."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path) -> None:
        super().__init__(f"{signal_name} received: stopped after step {step}, checkpoint {checkpoint} written")
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint


class Preemption(Callback):
    """Turns SIGTERM/SIGINT into a checkpoint at the end of the current update and a RunPreempted."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        # After Lightning has installed its own handlers (replaced here for the run, restored at the end).
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received and signum == signal.SIGINT:  # a second Ctrl-C: the user will not wait
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.received = name
        log.warning("%s received: the run stops after the update in progress, with a checkpoint", name)

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, *args: Any) -> None:
        batch_idx = args[-1]
        if (batch_idx + 1) % trainer.accumulate_grad_batches:  # only between updates
            return
        stop = bool(self.received)
        if trainer.world_size > 1:  # every process stops at the same update (the signal may reach one only)
            flag = torch.tensor([float(stop)], device=module.device)
            stop = bool(trainer.strategy.reduce(flag, reduce_op="max").item())
        if not stop:  # one process: no tensor and no device sync per update
            return
        checkpoint = next((c for c in trainer.checkpoint_callbacks if isinstance(c, RunCheckpoint)), None)
        if checkpoint is None:
            raise RuntimeError("preempted, but the run has no checkpoint callback (callbacks.checkpoint) to save with")
        path = checkpoint.save_now(trainer)
        raise RunPreempted(self.received or "a signal on another process", trainer.global_step, path)

    def teardown(self, trainer: pl.Trainer, module: pl.LightningModule, stage: str) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
