"""Preemption (SLURM, Kubernetes, scancel, Ctrl-C): finish the update, write a verified checkpoint, exit 75.

Lightning's own SIGTERM handling checks the signal once per epoch (an endless loader never ends one) and then
exits with code 0, saving nothing. Here SIGTERM and SIGINT only set a flag; at the end of the update in progress
every process agrees (one all-reduce), ``last.ckpt`` is written through the run's checkpoint callback (staged,
fsynced, with its sidecar), and the run stops with ``RunPreempted``: the command exits with PREEMPTED_EXIT, the
code that says "resume me", and ``ckpt_path=auto`` continues bit-identically. A second Ctrl-C stops at once.

SLURM's warning signal (``sbatch --signal=USR1@90``) is taken the same way, and the job is then requeued with
``scontrol requeue``: this replaces Lightning's auto-requeue, which wrote ``RUN/hpc_ckpt_N.ckpt`` outside
``checkpoints/`` (unverified, never resumed from, and restored over the final weights by the last validation).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from degen_train.callbacks.checkpoint import RunCheckpoint
from degen_train.core.exit_codes import PREEMPTED_EXIT  # noqa: F401 - said here too, where it is raised

log = logging.getLogger("degen_train")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
REQUEUE_SIGNALS = ("SIGUSR1", "SIGUSR2")


def slurm_job_to_requeue() -> str | None:
    """The id ``scontrol requeue`` takes for this SLURM job (array task ids included), or None outside SLURM."""
    array_job, array_task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array_job}_{array_task}" if array_job and array_task else os.environ.get("SLURM_JOB_ID")
    if job is not None and not re.fullmatch(r"[0-9]+(_[0-9]+)?", job):
        raise ValueError(f"SLURM job id {job!r} is not a job id (digits, or ARRAYJOB_TASK): refusing to requeue it")
    return job


def requeue_slurm_job(job: str) -> str:
    """``scontrol requeue JOB``; returns what happened, for the run's last message."""
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"requeueing SLURM job {job} failed ({error}); resubmit it"
    if result.returncode != 0:
        said = result.stderr.strip() or f"exit code {result.returncode}"
        return f"requeueing SLURM job {job} failed (scontrol: {said}); resubmit it"
    return f"SLURM job {job} requeued"


class RunPreempted(Exception):
    """The run stopped on a signal after writing a checkpoint it resumes from."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path, requeued: str = "") -> None:
        then = f"; {requeued}" if requeued else ""
        super().__init__(f"{signal_name} received: stopped after step {step}, checkpoint {checkpoint} written{then}")
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint


class PreparationStopped(BaseException):
    """A signal stopped the run before training (data preparation, the tokenizer): whatever is cached stays.

    A BaseException, as KeyboardInterrupt is: raised from a signal handler wherever the program is, it must not be
    caught by a library's ``except Exception`` on the way (OmegaConf's, inside the build's instantiate, re-created it
    from its message alone and ended the run with a ConfigTypeError, exit 1)."""

    def __init__(self, signal_name: str, cache: str = "") -> None:
        super().__init__(
            f"{signal_name} received before training started (while preparing the data): nothing of the run was "
            f"written; what was built so far stays in the cache ({cache}: a finished tokenizer or examples table, or "
            f"the finished batches of an interrupted build), and the same command goes on from it"
        )
        self.signal_name = signal_name


@contextmanager
def _handling(handler: Any) -> Iterator[None]:
    """``handler`` for SIGTERM, SIGINT and SLURM's requeue signals while the block runs, the previous ones after it;
    outside the main thread (where no handler can be set): nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    requeue = tuple(getattr(signal, name) for name in REQUEUE_SIGNALS if hasattr(signal, name))
    previous = {signum: signal.getsignal(signum) for signum in (*SIGNALS, *requeue)}
    for signum in previous:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, kept in previous.items():
            signal.signal(signum, kept)


def stopping_before_training(cache: str) -> Any:  # a context manager
    """A signal until training starts: stop where the program is (a build in progress keeps what it finished), as
    PreparationStopped (exit 75), instead of dying silently with 143."""

    def stop(signum: int, _frame: Any) -> None:
        raise PreparationStopped(signal.Signals(signum).name, cache)

    return _handling(stop)


PENDING: dict[str, str | None] = {"signal": None}  # a signal received between the model's build and training's start


def deferring_until_training() -> Any:  # a context manager
    """From the model's build to training's first update (the move to the devices, FSDP2's wrapping, compilation,
    the checkpoint's load, the sanity check: issue 72.5, where a SIGTERM exited 143 with nothing kept): a signal is
    kept, said, and handed to the Preemption callback when training starts, which stops after the first update with
    a checkpoint (exit 75)."""

    def keep(signum: int, _frame: Any) -> None:
        PENDING["signal"] = signal.Signals(signum).name
        log.warning("%s received while training starts: the run stops after its first update, with a checkpoint",
                    PENDING["signal"])  # fmt: skip

    PENDING["signal"] = None
    return _handling(keep)


class Preemption(Callback):
    """Turns SIGTERM/SIGINT (and SLURM's requeue signal) into a checkpoint at the end of the update, a RunPreempted.

    ``requeue_signal``: the signal SLURM sends before the time limit (``--signal=USR1@90``); after the checkpoint the
    job is requeued when it runs under SLURM (``requeue=true``). None: the signal keeps its default action.
    """

    def __init__(self, requeue_signal: str | None = "SIGUSR1", requeue: bool = True) -> None:
        if requeue_signal is not None and requeue_signal not in REQUEUE_SIGNALS:
            raise ValueError(
                f"callbacks.preemption.requeue_signal={requeue_signal!r}: choose one of {', '.join(REQUEUE_SIGNALS)}"
                " or null"
            )
        self.requeue_signal = getattr(signal, requeue_signal) if requeue_signal else None
        self.requeue = requeue
        self.received: str | None = None
        self.requeue_asked = False  # kept when SLURM's SIGTERM follows its warning signal before the update ends
        self._previous: dict[int, Any] = {}

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        # After Lightning has installed its own handlers (replaced here for the run, restored at the end).
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (*SIGNALS, *([self.requeue_signal] if self.requeue_signal else [])):
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)
        pending, PENDING["signal"] = PENDING["signal"], None  # kept while training started: acted on now
        if pending is not None:
            self.received = pending
            requeue = signal.Signals(self.requeue_signal).name if self.requeue_signal is not None else None
            self.requeue_asked |= pending == requeue

    def _on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received and signum == signal.SIGINT:  # a second Ctrl-C: the user will not wait
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.received = name
        self.requeue_asked |= self.requeue_signal is not None and signum == self.requeue_signal
        log.warning("%s received: the run stops after the update in progress, with a checkpoint", name)

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, *args: Any) -> None:
        batch_idx = args[-1]
        if (batch_idx + 1) % trainer.accumulate_grad_batches:  # only between updates
            return
        # 0: go on; 1: stop; 2: stop and requeue (SLURM's signal). The largest over processes wins: the signal may
        # reach one process only, and every process must stop at the same update.
        wants = 0 if not self.received else 2 if self.requeue_asked else 1
        if trainer.world_size > 1:
            flag = torch.tensor([float(wants)], device=module.device)
            wants = int(trainer.strategy.reduce(flag, reduce_op="max").item())
        if not wants:  # one process: no tensor and no device sync per update
            return
        checkpoint = next((c for c in trainer.checkpoint_callbacks if isinstance(c, RunCheckpoint)), None)
        if checkpoint is None:
            raise RuntimeError("preempted, but the run has no checkpoint callback (callbacks.checkpoint) to save with")
        path = checkpoint.save_now(trainer)
        requeued = ""
        if wants == 2 and self.requeue and trainer.is_global_zero:  # after the checkpoint: the requeued job reads it
            job = slurm_job_to_requeue()
            requeued = requeue_slurm_job(job) if job else "not a SLURM job: nothing requeued"
            log.warning("%s", requeued)
        raise RunPreempted(self.received or "a signal on another process", trainer.global_step, path, requeued)

    def teardown(self, trainer: pl.Trainer, module: pl.LightningModule, stage: str) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
