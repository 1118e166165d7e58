"""One clock for every training loop: each step's seconds on the device's own timeline.

A host clock between callbacks times the launches, not the work: with a GPU queue several steps deep, one step's
interval holds another's kernels (issue 55.4: the hand loop synchronised every step, degen-train did not, so the two
were timed by two clocks). On CUDA a StepClock records an event on the current stream at each step's end, so the
interval between two marks is what the device took from one step's end to the next, whatever the host did, and
nothing waits for the device while training: finished events are read when the device has passed them, the rest at
``seconds()`` (one synchronise, at the window's end). On a CPU the work is done when the call returns and the host
clock is the device's.
"""

from __future__ import annotations

import time
from collections import deque

import torch

PENDING_LIMIT = 64  # events held before the finished ones are read (a bounded list however long the run)


class StepClock:
    """Marks at each step's end; ``seconds()``: the intervals between consecutive marks (a break starts anew)."""

    def __init__(self, device: torch.device | str) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.kind = "cuda events" if self.cuda else "host clock"
        self._pending: deque = deque()  # CUDA events (or host times) not yet turned into intervals
        self._done: list[float] = []
        self._last: object | None = None  # the mark the next interval starts from

    def mark(self) -> None:
        """A step ended (its work enqueued): the next interval starts here."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._pending.append(event)
            if len(self._pending) > PENDING_LIMIT:
                self._read(wait=False)
        else:
            self._pending.append(time.perf_counter())
            self._read(wait=False)

    def begin(self) -> None:
        """A step starts: mark it when no interval is open (the first step, or the first after an interruption), so
        that step is timed too, as a loop timed from its start is."""
        if self._last is None and not self._pending:
            self.mark()

    def interrupt(self) -> None:
        """Work that is not a step ran since the last mark (validation, a probe): no interval spans it."""
        self._read(wait=True)
        self._last = None

    def seconds(self) -> list[float]:
        """Every interval so far, in order (waits for the device to reach the last mark)."""
        self._read(wait=True)
        return list(self._done)

    def _read(self, *, wait: bool) -> None:
        while self._pending:
            event = self._pending[0]
            if self.cuda:
                if not wait and not event.query():
                    return
                event.synchronize()
            self._pending.popleft()
            if self._last is not None:
                elapsed = self._last.elapsed_time(event) / 1e3 if self.cuda else event - self._last
                self._done.append(float(elapsed))
            self._last = event
