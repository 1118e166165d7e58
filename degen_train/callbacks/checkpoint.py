"""Periodic checkpoints that rotate by step across restarts and never pile up ``-v1`` copies."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

from degen_train.storage.checkpoints import recorded_step, remove_checkpoint_file


class RunCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose ``save_top_k`` means "the k newest periodic files in the folder".

    Lightning's own bookkeeping lives in the checkpoint it resumed from, so files written after that
    checkpoint by a killed run are never rotated out; a file of the same name (a step redone after a
    resume) would become ``-v1``. Here a same-step file is overwritten (training is deterministic, so it
    is the same state) and after every save the folder itself is rotated: periodic files sorted by step,
    the newest ``save_top_k`` kept. ``last.ckpt`` is never rotated.
    """

    def __init__(self, *, background: bool | str = "auto", **kwargs: Any) -> None:
        """``background``: write periodic checkpoints on a writer thread (true), in the step (false), or on a thread
        when the run trains on a GPU (auto), where a synchronous 1.3 GB write stalls the device for seconds; the
        trainer's checkpoint I/O is chosen from it (build.checkpoint_io)."""
        kwargs.setdefault("enable_version_counter", False)
        super().__init__(**kwargs)
        self.background = background

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        start = time.perf_counter()
        for logger in trainer.loggers:  # rows up to this step reach the disk before a resume can start here
            logger.save()
        super()._save_checkpoint(trainer, filepath)
        for callback in trainer.callbacks:  # what the step waited for (a writer thread's share: the state's copy)
            if hasattr(callback, "spent") and hasattr(callback, "periodic"):
                callback.spent("checkpoint", time.perf_counter() - start)
        if trainer.is_global_zero and self.save_top_k > 0 and Path(filepath).stem != self.CHECKPOINT_NAME_LAST:
            # through the checkpoint I/O: a writer thread deletes only after the newer file is on disk
            self.rotate(Path(filepath), remove=trainer.strategy.checkpoint_io.remove_checkpoint)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        super().on_train_batch_end(trainer, *args, **kwargs)
        failed = getattr(trainer.strategy.checkpoint_io, "raise_if_failed", None)
        if failed is not None:  # a write on the writer thread failed: stop at this step, naming the file
            failed()

    def save_now(self, trainer: pl.Trainer) -> Path:
        """``last.ckpt`` at this step, outside the periodic schedule (a preemption); every process calls it."""
        path = Path(str(self.dirpath)) / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"
        if self._last_global_step_saved != trainer.global_step or not path.exists():
            self._save_checkpoint(trainer, str(path))
            self._last_global_step_saved = trainer.global_step
        wait = getattr(trainer.strategy.checkpoint_io, "wait", None)
        if wait is not None:  # a writer thread: the checkpoint must be on disk before the process exits
            wait()
        return path

    def rotate(self, newest: Path, *, remove: Callable[[Path], None] = remove_checkpoint_file) -> list[Path]:
        """Delete periodic checkpoints beyond the ``save_top_k`` newest by step; returns what it deleted."""
        on_disk = newest.parent.glob(f"*{self.FILE_EXTENSION}")
        # The newest may still be on the writer thread: counted whether or not it is on disk yet.
        periodic = list({p for p in on_disk if p.stem != self.CHECKPOINT_NAME_LAST} | {newest})
        by_step = sorted(periodic, key=lambda p: (_step_of(p), p == newest), reverse=True)
        stale = [p for p in by_step[self.save_top_k :] if p != newest]
        for path in stale:
            remove(path)
            self.best_k_models.pop(str(path), None)
        return stale


def _step_of(path: Path) -> int:
    """The step a checkpoint holds: from its sidecar, else the last number in its name, else -1."""
    step = recorded_step(path)
    if step is not None:
        return step
    numbers = re.findall(r"\d+", path.stem)
    return int(numbers[-1]) if numbers else -1
