"""The cross-process pieces every term and helper uses, in one room: whether a process group is running, sums
over processes (plain, or differentiable so a process's loss on another's rows reaches their owner), a
differentiable gather. Each is the identity in one process, so a term reads the same with or without DDP/FSDP2.
"""

from __future__ import annotations

import torch
from torch import Tensor


def is_distributed() -> bool:
    """A process group is running (DDP, FSDP2, or torchrun's processes)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def world_size() -> int:
    return torch.distributed.get_world_size() if is_distributed() else 1


def sum_over_processes(tensor: Tensor, *, op: str = "sum") -> Tensor:
    """``tensor`` summed (or ``op="max"``: its maximum) over processes, in place, outside autograd: counts,
    statistics of sampled states."""
    if is_distributed():
        reduce = torch.distributed.ReduceOp.MAX if op == "max" else torch.distributed.ReduceOp.SUM
        torch.distributed.all_reduce(tensor, op=reduce)
    return tensor


def sum_with_gradient(tensor: Tensor) -> Tensor:
    """Σ over processes, differentiable: every process computes the same global value, and the backward sums the
    gradient over processes, so with DDP's averaging the update equals one process holding the global batch."""
    if not is_distributed():
        return tensor
    from torch.distributed.nn.functional import all_reduce

    return all_reduce(tensor)


def gather_with_gradient(local: Tensor) -> tuple[Tensor, int]:
    """All processes' rows, and this process's offset in them.

    The gather is differentiable: the gradient a process's loss puts on another process's rows is sent
    back to their owner (summed over processes), so with DDP's averaging the update equals one process
    holding the global batch. A detached gather would drop those terms (a biased gradient). One process:
    its own rows at offset 0.
    """
    if not is_distributed():
        return local, 0
    from torch.distributed.nn.functional import all_gather

    rank = torch.distributed.get_rank()
    return torch.cat(all_gather(local.contiguous())), rank * local.shape[0]
