"""Means over the whole accumulation window, so B/k × k micro-batches train exactly as one batch of B.

Lightning divides each micro-batch's loss by k and sums the gradients. A term that divided by its own
micro-batch's count (masked tokens, sequences, pairs) would then weight a micro-batch with few targets as
much as one with many: not the global-batch mean. Here the loader reads a window's k micro-batches first
(``data.windows.AccumulationWindows``), every term counts what its means divide by in each of them (``LossTerm.count``),
the module sums those counts over the window and the processes in one all-reduce, and ``distributed_mean``
divides by the window's count — HF transformers' fix for the same bug (``num_items_in_batch``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from degen_train.devices.collectives import is_distributed, sum_over_processes

# What a mean divides by, counted from a collated batch (before any term's prepare_batch).
STANDARD_COUNTS: dict[str, Callable[[dict[str, Any]], Tensor]] = {
    "targets": lambda batch: (batch["labels"] != -100).sum(),  # MLM's masked tokens, a decoder's next tokens
    "tokens": lambda batch: batch["attention_mask"].sum(),  # every real token (ELECTRA's detection, COCO's copy)
    "sequences": lambda batch: torch.tensor(batch["input_ids"].shape[0]),  # NSP, SimCSE
}


@dataclass
class Window:
    """The current accumulation window: counts over its micro-batches and every process, and the gradient scale.

    ``scale`` = processes × k: DDP averages gradients over processes and Lightning divides the loss by k.
    ``checks`` collects (term, kind, counted in the forward, counted by the loader) on the first window after a
    start, so a term whose ``count`` disagrees with its forward is named instead of training a wrong mean.
    """

    counts: dict[str, Tensor]
    micro: dict[str, Tensor]
    scale: float
    index: int = 0  # of the micro-batch within the window
    term: str = ""
    checks: list[tuple[str, str, Tensor, Tensor]] | None = field(default=None)


_ACTIVE: ContextVar[Window | None] = ContextVar("accumulation_window", default=None)


def active_window() -> Window | None:
    return _ACTIVE.get()


@contextlib.contextmanager
def averaging_over(window: Window | None) -> Iterator[None]:
    """Within this block, distributed_mean divides by ``window``'s counts (nothing changes for None)."""
    token = _ACTIVE.set(window)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def window_mean(window: Window, total: Tensor, count: Tensor, over: str | None) -> Tensor:
    """total / (the window's global count of ``over``) · processes · k."""
    if over is None:
        raise RuntimeError(
            f"loss term {window.term!r} takes a mean without naming what it counts (distributed_mean(..., over=...)): "
            f"gradient accumulation needs it to divide by the whole window's count"
        )
    if over not in window.counts:
        raise RuntimeError(
            f"loss term {window.term!r} averages over {over!r}, which it does not list in its averages_over: "
            f"add it there (and to its count() if it is not one of {', '.join(STANDARD_COUNTS)})"
        )
    if window.checks is not None:
        window.checks.append((window.term, over, count.detach().reshape(-1)[:1].float(), window.micro[over]))
    return total / window.counts[over].clamp_min(1).to(total.dtype) * window.scale


def verify_counts(checks: list[tuple[str, str, Tensor, Tensor]]) -> None:
    """Raise if any term's forward counted another number than its ``count`` did for the same micro-batch."""
    if not checks:
        return
    found = torch.stack([torch.cat([a.float(), b.float().reshape(-1)[:1].to(a.device)]) for _, _, a, b in checks])
    for (term, kind, _, _), (forward, loader) in zip(checks, found.tolist(), strict=True):
        if forward != loader:
            raise RuntimeError(
                f"loss term {term!r}: its forward divides by {forward:g} {kind} in a micro-batch where its count() "
                f"finds {loader:g}; under gradient accumulation the two must agree (fix the term's count())"
            )


def reduce_counts(counts: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    """The window's counts summed over every process: one all-reduce of all of them, flattened."""
    names = sorted(counts)
    flat = [counts[name].to(device=device, dtype=torch.float64).reshape(-1) for name in names]
    if is_distributed() and flat:
        joined = sum_over_processes(torch.cat(flat))
        flat = list(joined.split([f.numel() for f in flat]))
    return {name: part.reshape(counts[name].shape) for name, part in zip(names, flat, strict=True)}


def accumulation_warnings(terms: dict[str, Any], weights: dict[str, float], accumulate: int) -> list[str]:
    """One line per weighted term that draws on the batch's other samples, which accumulation cannot give it."""
    if accumulate <= 1:
        return []
    return [
        f"loss term {key!r} uses {term.mixes_samples}: with trainer.accumulate_grad_batches={accumulate} it sees one "
        f"micro-batch's samples at a time, not the global batch's (its mean is still over the whole window); "
        f"raise data.batch_size or the process count instead for the large-batch contrast"
        for key, term in terms.items()
        if weights.get(key) and term.mixes_samples
    ]


class WindowTracker:
    """The accumulation window each micro-batch belongs to, opened at a window's first micro-batch with the
    loader's counts summed over the processes once; the terms' ``count`` is checked against their forward on the
    first window after each (re)start (``close``)."""

    def __init__(self) -> None:
        self.window: Window | None = None
        self.counts_verified = False

    def window_for(self, batch: dict, batch_idx: int, *, accumulate: int, world_size: int,
                   device: torch.device) -> Window | None:  # fmt: skip
        """Pops the loader's ``window_counts``/``micro_counts`` from ``batch``; None without accumulation."""
        counts, micro = batch.pop("window_counts", None), batch.pop("micro_counts", None)
        if counts is None:  # no accumulation: each term's mean is over this batch (and the processes)
            return None
        index = batch_idx % accumulate
        if index == 0 or self.window is None:
            scale = float(world_size * accumulate)
            checks = None if self.counts_verified else []
            self.window = Window(counts=reduce_counts(counts, device), micro=micro, scale=scale, checks=checks)
        self.window.index, self.window.micro = index, micro
        return self.window

    def close(self, window: Window | None, accumulate: int) -> None:
        """After a micro-batch's forward: at the window's last one, verify the counts once (one host sync)."""
        if window is not None and window.index == accumulate - 1 and window.checks is not None:
            verify_counts(window.checks)
            window.checks, self.counts_verified = None, True
