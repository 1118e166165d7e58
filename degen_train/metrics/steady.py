"""The steady rate of a training loop: per-step times after a warm-up that holds what only the first steps pay.

The first steps of a run pay its start-up (the loader's first batches, the allocator settling) and, under
``torch.compile``, each compiled block's compilation (tens of seconds on a GPU, during the steps that first meet the
blocks). A rate over all steps reports compilation as a slowdown. The steady rate is the median step time after
WARMUP_STEPS, and what the warm-up took beyond as many steady steps is reported beside it (its start-up and
compile seconds), so that a loop that compiles and one that does not are compared on the same window.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

WARMUP_STEPS = 10


@dataclass(frozen=True)
class SteadyWindow:
    median_seconds: float  # per step, over the steps after the warm-up
    warmup_seconds: float  # what the warm-up steps took beyond as many steady steps (start-up, compilation)
    timed_steps: int  # the steps the median is over
    quartiles: tuple[float, float] = (0.0, 0.0)  # the timed steps' first and third quartiles (their spread)

    @property
    def interquartile_seconds(self) -> float:
        return self.quartiles[1] - self.quartiles[0]


def steady_window(step_seconds: Sequence[float], *, warmup: int = WARMUP_STEPS) -> SteadyWindow | None:
    """The median step time after ``warmup`` steps and the warm-up's excess over it; with fewer steps than that,
    after the first step alone (a short run has no steady window to speak of). None without a timed step."""
    skip = warmup if len(step_seconds) > warmup else min(1, len(step_seconds) - 1)
    timed = list(step_seconds[skip:])
    if not timed:
        return None
    median = statistics.median(timed)
    quartiles = statistics.quantiles(timed, n=4, method="inclusive") if len(timed) > 1 else [median] * 3
    excess = max(0.0, sum(step_seconds[:skip]) - skip * median)
    return SteadyWindow(median, excess, len(timed), (quartiles[0], quartiles[2]))


def hour_long_rate(step_seconds: float, costs: dict[str, float], every_steps: dict[str, int]) -> dict[str, float]:
    """What periodic work takes from an hour of training: for each kind, its seconds per event (``costs``) times the
    events an hour holds at ``every_steps`` steps of ``step_seconds``; and the rate left, as a share of the steady one
    (an hour's steps over an hour plus the periodic seconds)."""
    hour = 3600.0
    spent = {kind: cost * hour / (every_steps[kind] * step_seconds) for kind, cost in costs.items()
             if kind in every_steps}  # fmt: skip
    return {**{f"{kind}_share": seconds / (hour + sum(spent.values())) for kind, seconds in spent.items()},
            "over_steady": hour / (hour + sum(spent.values()))}  # fmt: skip
