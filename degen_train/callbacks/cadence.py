"""Periodic work on a clock: validation, the isotropy probe and periodic checkpoints every so many minutes.

A cadence in updates prices itself by the card: 100 updates are minutes of a CPU and seconds of an H200, where a
BERT-base checkpoint every 100 updates took a large share of the run. In minutes, the share of an hour that periodic
work takes no longer depends on the step's speed (bench-gpu's ``end_to_end`` prices it for an hour-long run).

The minutes become updates once per run segment: after the warm-up (metrics.steady.WARMUP_STEPS updates, which hold
start-up and compilation; nothing periodic runs in it), rank 0's median update time is broadcast and each interval is
``max(1, round(minutes · 60 / seconds per update))`` on every process, so every process validates, probes and saves
at the same update (Lightning's own time-based validation asks each process's clock, and processes whose clocks
disagree wait on each other's collectives). The updates chosen are logged and kept in summary.json (``cadence``).
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from degen_train.callbacks.isotropy_monitor import IsotropyMonitor
from degen_train.metrics.steady import WARMUP_STEPS

log = logging.getLogger("degen_train")
CLOCK = time.perf_counter  # read at each update's end (a test puts a clock of its own here)
NEVER = 2**62  # an interval no run reaches: nothing periodic runs in the warm-up


def updates_for(minutes: float, seconds_per_update: float) -> int:
    """The updates closest to ``minutes`` of training at ``seconds_per_update`` (at least one)."""
    return max(1, round(minutes * 60 / seconds_per_update))


class ClockCadence(Callback):
    """Validation, the isotropy probe and periodic checkpoints every ``*_minutes`` minutes of training (null: their
    own settings in updates), converted to updates after the warm-up, alike on every process."""

    def __init__(
        self,
        *,
        validation_minutes: float | None = None,
        isotropy_minutes: float | None = None,
        checkpoint_minutes: float | None = None,
        warmup_updates: int = WARMUP_STEPS,
    ) -> None:
        self.minutes = {"validation": validation_minutes, "isotropy": isotropy_minutes,
                        "checkpoint": checkpoint_minutes}  # fmt: skip
        bad = {k: v for k, v in self.minutes.items() if v is not None and not v > 0}
        if bad or warmup_updates < 2:
            raise ValueError(
                f"callbacks.cadence: {', '.join(f'{k}_minutes={v}' for k, v in bad.items()) or 'warmup_updates'} "
                f"must be > 0 (null: the work's own cadence in updates), and warmup_updates >= 2 (got {warmup_updates})"
            )
        self.warmup_updates = warmup_updates
        self.chosen: dict[str, dict[str, float]] = {}  # {work: {minutes, updates, seconds_per_update}}
        self._ends: list[float] = []  # the clock at each update's end in this segment
        self._last_step = -1

    @property
    def active(self) -> bool:
        return any(v is not None for v in self.minutes.values())

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._ends, self._last_step, self.chosen = [], trainer.global_step, {}
        if self.active:
            self._set(trainer, dict.fromkeys((k for k, v in self.minutes.items() if v is not None), NEVER))

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        if not self.active or trainer.global_step == self._last_step or self.chosen:
            return
        self._last_step = trainer.global_step
        self._ends.append(CLOCK())
        if len(self._ends) <= self.warmup_updates:
            return
        # The median update after the first (start-up), over the warm-up's updates: compilation's few slow ones aside
        gaps = [b - a for a, b in zip(self._ends, self._ends[1:], strict=False)]
        seconds = float(trainer.strategy.broadcast(statistics.median(gaps), src=0))
        intervals = {k: updates_for(m, seconds) for k, m in self.minutes.items() if m is not None}
        self._set(trainer, intervals)
        self.chosen = {k: {"minutes": float(self.minutes[k]), "updates": n, "seconds_per_update": seconds}  # type: ignore[arg-type]
                       for k, n in intervals.items()}  # fmt: skip
        said = ", ".join(f"{k} every {self.minutes[k]:g} min = every {n:,} updates" for k, n in intervals.items())
        log.info("cadence at %.3f s per update (the median of the warm-up's updates): %s", seconds, said)

    @staticmethod
    def _set(trainer: pl.Trainer, intervals: dict[str, int]) -> None:
        """Each periodic work's interval in updates (NEVER: none), where the work reads it."""
        for callback in trainer.callbacks:
            if "checkpoint" in intervals and isinstance(callback, ModelCheckpoint):
                callback._every_n_train_steps = 0 if intervals["checkpoint"] == NEVER else intervals["checkpoint"]
            if "isotropy" in intervals and isinstance(callback, IsotropyMonitor):
                callback.every_n_steps = intervals["isotropy"]
        if "validation" in intervals:  # Lightning counts validation in batches: updates × accumulation
            batches = intervals["validation"] * trainer.accumulate_grad_batches
            trainer.val_check_interval = trainer.val_check_batch = batches
