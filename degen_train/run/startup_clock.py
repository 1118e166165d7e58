"""``time to first step``: how long a run takes from its process's start to its first training batch, by stage
(issue 73.3: a warm sweep member should pay its imports and the model's build, the data read from the cache).

The first run of a process counts from the process's start (the kernel's, psutil's create_time), so the
interpreter's start and every import count; a later run of the same process (a sweep's next member under Hydra's
basic launcher) counts from its own train(), its imports paid before. The stages are train()'s own. Logged once, at
the first training batch of this segment, and kept in summary.json as ``time_to_first_step_s``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from lightning.pytorch.callbacks import Callback

log = logging.getLogger("degen_train")
_CLOCKS_STARTED = [0]  # this process's train() calls so far: only the first counts from the process's start


def _now() -> float:
    return time.time()


class StartupClock(Callback):
    """Marks of train()'s stages (``mark``), said with the whole at the first training batch."""

    def __init__(self) -> None:
        import psutil

        now = _now()
        first = _CLOCKS_STARTED[0] == 0
        _CLOCKS_STARTED[0] += 1
        self.since = "the process started" if first else "this run's start (its process's imports paid before)"
        self.process_start = psutil.Process().create_time() if first else now  # wall clock, as time.time()
        self.marks: list[tuple[str, float]] = [("imports and the config's check", now)] if first else []
        self.time_to_first_step: float | None = None

    def mark(self, stage: str) -> None:
        """``stage`` ended now (its time runs from the previous mark)."""
        self.marks.append((stage, _now()))

    def stages(self, now: float) -> list[tuple[str, float]]:
        """(stage, seconds) from the process's start to ``now``, the trainer's own start last."""
        ends = [*self.marks, ("the trainer's start (its setup, the sanity check, the loaders)", now)]
        starts = [self.process_start, *(at for _, at in ends[:-1])]
        return [(stage, end - start) for (stage, end), start in zip(ends, starts, strict=True)]

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.time_to_first_step is not None:
            return
        now = _now()
        self.time_to_first_step = now - self.process_start
        parts = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in self.stages(now))
        log.info("time to first step: %.1f s since %s (%s)", self.time_to_first_step, self.since, parts)
