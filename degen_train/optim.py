"""AdamW without decay on biases and LayerNorm, and warmup + decay schedules over ``total_steps``."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

SCHEDULES = ("linear", "cosine", "constant")


def parameter_groups(modules: Iterable[nn.Module], weight_decay: float) -> list[dict]:
    """Two groups: decayed weights; biases and normalisation gains undecayed (BERT's recipe)."""
    decay, no_decay, seen = [], [], set()
    for module in modules:
        for sub in module.modules():
            for name, param in sub.named_parameters(recurse=False):
                if not param.requires_grad or id(param) in seen:
                    continue
                seen.add(id(param))
                is_norm = isinstance(sub, nn.LayerNorm | nn.GroupNorm) or "norm" in type(sub).__name__.lower()
                (no_decay if name == "bias" or is_norm else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(
    modules: Iterable[nn.Module],
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    fused: bool | None = None,
) -> torch.optim.Optimizer:
    if lr <= 0:
        raise ValueError(f"optimizer.lr must be > 0, got {lr}")
    groups = parameter_groups(modules, weight_decay)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused)


def lr_factor(step: int, *, warmup_steps: int, total_steps: int, schedule: str, min_ratio: float) -> float:
    """Linear warmup to 1, then linear / cosine decay to ``min_ratio`` at ``total_steps`` (or constant)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    if schedule == "linear":
        return min_ratio + (1 - min_ratio) * (1 - progress)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, *, schedule: str, warmup_steps: int, total_steps: int, min_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    if schedule not in SCHEDULES:
        raise ValueError(f"scheduler.name={schedule!r} is not one of {', '.join(SCHEDULES)}")
    if total_steps <= 0:
        raise ValueError(f"scheduler.total_steps must be > 0, got {total_steps} (set trainer.max_steps)")

    def factor(step: int) -> float:
        return lr_factor(
            step, warmup_steps=warmup_steps, total_steps=total_steps, schedule=schedule, min_ratio=min_ratio
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
