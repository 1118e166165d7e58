"""The loader's side of gradient accumulation: micro-batches read a window at a time, each carrying the counts of its
whole window and its own (what each loss term's mean divides by: degen_train/losses/accumulation.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch import Tensor


class AccumulationWindows:
    """The loader's micro-batches, read k at a time: each carries its window's summed counts and its own."""

    def __init__(
        self, loader: Iterable[dict[str, Any]], *, size: int, counter: Callable[[dict], dict[str, Tensor]]
    ) -> None:
        self.loader, self.size, self.counter = loader, size, counter

    def __iter__(self) -> Iterator[dict[str, Any]]:
        batches = iter(self.loader)
        while window := list(itertools.islice(batches, self.size)):
            own = [self.counter(batch) for batch in window]
            summed = {kind: sum(counts[kind] for counts in own) for kind in own[0]}
            for batch, counts in zip(window, own, strict=True):
                yield {**batch, "window_counts": summed, "micro_counts": counts}
