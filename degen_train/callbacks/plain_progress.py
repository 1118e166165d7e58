"""Progress as plain log lines, for output that is not a terminal (a batch job's log, a pipe)."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from degen_train.callbacks.throughput import sweep_left

log = logging.getLogger("degen_train")


class PlainProgress(Callback):
    """One line every ``every_n_steps`` optimizer steps: step/total, loss, tokens/s, MFU, elapsed, ETA.

    A progress bar written to a file is carriage returns and escape codes (87 KB for 300 steps); these lines
    read the same in ``tail -f`` as in the finished log.
    """

    def __init__(self, every_n_steps: int = 10) -> None:
        self.every_n_steps = max(1, every_n_steps)
        self._start: float | None = None
        self._start_step = 0
        self._last_logged = -1

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._start, self._start_step = time.perf_counter(), trainer.global_step

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step, total = trainer.global_step, trainer.max_steps
        due = step % self.every_n_steps == 0 or step == total
        if not trainer.is_global_zero or not due or step == self._last_logged or self._start is None:
            return
        self._last_logged = step
        metrics = trainer.callback_metrics
        elapsed = time.perf_counter() - self._start
        done = step - self._start_step
        eta = elapsed / done * (total - step) if done > 0 and total > 0 else None
        parts = [f"step {step}/{total}" if total > 0 else f"step {step}"]
        if "train/loss" in metrics:
            parts.append(f"loss {float(metrics['train/loss']):.4f}")
        if "train/tokens_per_s" in metrics:
            parts.append(f"{float(metrics['train/tokens_per_s']):,.0f} tokens/s")
        if "train/mfu" in metrics:
            parts.append(f"MFU {float(metrics['train/mfu']):.1%}")
        parts.append(f"elapsed {timedelta(seconds=round(elapsed))}")
        if eta is not None:
            parts.append(f"ETA {timedelta(seconds=round(eta))}")
        left = sweep_left(trainer)
        if left is not None:  # a sweep's member (a joblib member has no terminal: this line is its only progress)
            parts.append(f"sweep_left {left}")
        log.info(" | ".join(parts))

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        values = {k: float(v) for k, v in metrics.items() if k.startswith("val/") and k.count("/") == 1}
        if values:
            shown = ", ".join(f"{k} {v:.4f}" for k, v in sorted(values.items()))
            when = "final validation" if trainer.state.fn == "validate" else "validation"
            log.info("%s at step %d: %s", when, trainer.global_step, shown)
