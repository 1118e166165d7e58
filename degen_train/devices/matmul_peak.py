"""What the hardware does: the measured rate of a square matmul, the MFU denominator where no data sheet is known."""

from __future__ import annotations

import functools
import time

import torch
from torch import Tensor


@functools.cache
def measured_matmul_peak(device: str = "cpu", dtype: torch.dtype = torch.float32, size: int = 2048) -> float:
    """FLOP/s of a square matmul on ``device``: the MFU denominator where no data-sheet peak is known.

    The side starts at 256 and doubles up to ``size`` while one product takes under 50 ms, so an emulated
    dtype (bf16 on a CPU without native support: ~1 GFLOP/s) is measured in about a second, not minutes.
    """
    side = min(256, size)
    while True:
        a = torch.randn(side, side, device=device, dtype=dtype)
        b = torch.randn(side, side, device=device, dtype=dtype)
        _sync(a @ b)  # warm-up: first-call dispatch and allocation
        start = time.perf_counter()
        _sync(a @ b)
        if side >= size or time.perf_counter() - start > 0.05:
            break
        side *= 2
    best = float("inf")
    for _ in range(3):  # best of three: this machine's drifts only ever slow a round down
        start = time.perf_counter()
        for _ in range(2):
            out = a @ b
        _sync(out)
        best = min(best, (time.perf_counter() - start) / 2)
    return 2.0 * side**3 / best


def _sync(tensor: Tensor) -> None:
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)
