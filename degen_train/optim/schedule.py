"""Warm-up + decay schedules over ``total_steps``: linear, cosine, constant, and warm-up–stable–decay (WSD: the rate
held, then decayed over the last steps only). The arithmetic imports no torch; the decay's length is the section's
rule (section.py: ``wsd_decay_steps``, checked before the frameworks load); the scheduler itself is torch's
LambdaLR."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from degen_train.optim.section import wsd_decay_steps

if TYPE_CHECKING:
    import torch

def lr_factor(
    step: int,
    *,
    warmup_steps: int,
    total_steps: int,
    schedule: str,
    min_ratio: float,
    decay_steps: int = 0,
    decay_shape: str = "linear",
    warmup_init_div: float | None = None,
) -> float:
    """Linear warmup to 1, then linear / cosine decay to ``min_ratio`` at ``total_steps`` (or constant); ``wsd``:
    1 until ``total_steps − decay_steps``, then ``decay_shape`` down to ``min_ratio`` at ``total_steps``. The warm-up
    is (s + 1)/W, or with ``warmup_init_div`` d it is s/W + (1 − s/W)/d, starting at 1/d (Hägele et al. 2024's
    released wsd_schedule, epfml/schedules-and-scaling src/optim/utils.py, d = 100)."""
    if warmup_steps > 0 and step < warmup_steps:
        if warmup_init_div is not None:
            return step / warmup_steps + (1 - step / warmup_steps) / warmup_init_div
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "wsd":
        start = total_steps - decay_steps
        if step < start:
            return 1.0
        return decayed(min(1.0, (step - start) / max(1, decay_steps)), decay_shape, min_ratio)
    span = max(1, total_steps - warmup_steps)
    return decayed(min(1.0, (step - warmup_steps) / span), schedule, min_ratio)


def factor_of(scheduler: Mapping[str, Any], step: int) -> float:
    """``lr_factor`` at ``step`` of a house scheduler config (conf/scheduler/*.yaml), its WSD decay length included;
    ``scheduler``: the section's keys (a mapping)."""
    total, warmup = int(scheduler["total_steps"]), int(scheduler["warmup_steps"])
    decay = 0
    if scheduler["schedule"] == "wsd":
        fraction = float(scheduler.get("decay_fraction", 0.2))
        decay = wsd_decay_steps(total, warmup, scheduler.get("decay_steps"), fraction)
    return lr_factor(step, warmup_steps=warmup, total_steps=total, schedule=str(scheduler["schedule"]),
                     min_ratio=float(scheduler["min_ratio"]), decay_steps=decay,
                     decay_shape=str(scheduler.get("decay_shape", "linear")),
                     warmup_init_div=scheduler.get("warmup_init_div"))  # fmt: skip


def decayed(progress: float, shape: str, min_ratio: float) -> float:
    """m + (1 − m)·g(p) at progress p ∈ [0, 1] of a decay: g = 1 − p (linear), (1 + cos πp)/2 (cosine), 1 − √p
    (Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations")."""
    if shape == "linear":
        remaining = 1 - progress
    elif shape == "cosine":
        remaining = 0.5 * (1 + math.cos(math.pi * progress))
    else:
        remaining = 1 - math.sqrt(progress)
    return min_ratio + (1 - min_ratio) * remaining


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    schedule: str,
    warmup_steps: int,
    total_steps: int,
    min_ratio: float,
    decay_steps: int | None = None,
    decay_fraction: float = 0.2,
    decay_shape: str = "linear",
    warmup_init_div: float | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    import torch  # here, not at the top: the schedule's arithmetic is read by the typed config, before torch

    # the schedule's name, its shape and total_steps: checked by its section (section.py: SchedulerConfig)
    decay = wsd_decay_steps(total_steps, warmup_steps, decay_steps, decay_fraction) if schedule == "wsd" else 0

    def factor(step: int) -> float:
        return lr_factor(
            step,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
            schedule=schedule,
            min_ratio=min_ratio,
            decay_steps=decay,
            decay_shape=decay_shape,
            warmup_init_div=warmup_init_div,
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def steps_past_the_schedule(scheduler: Mapping[str, Any], max_steps: int) -> str | None:
    """Why steps beyond scheduler.total_steps would not train (the rate has decayed to 0 there), or None;
    ``scheduler``: the section's keys (a mapping)."""
    if "schedule" not in scheduler or scheduler.get("total_steps") is None:  # another scheduler than the house's
        return None
    total = int(scheduler["total_steps"])
    if max_steps <= total or scheduler["schedule"] == "constant":
        return None
    factor = factor_of(scheduler, total)
    if factor > 0:
        return None
    return (
        f"trainer.max_steps={max_steps} runs past scheduler.total_steps={total}, where the learning rate has decayed "
        f"to 0: steps {total}..{max_steps} would change nothing. To train a finished run longer, branch from it with "
        f"a longer schedule (branch_from=RUN@{total} trainer.max_steps={max_steps} scheduler.total_steps={max_steps} "
        f"hydra.run.dir=NEW, README: Branching); for a new run, leave scheduler.total_steps unset (it follows "
        f"trainer.max_steps)"
    )


def rate_of_this_schedule(scheduler: Any) -> None:
    """Set the learning rate the first update uses from this run's schedule at the restored step. A restored
    optimizer keeps the rate its checkpoint's last scheduler step set: a branch with a longer schedule would take
    its first update at the parent's final rate (0 after a full decay). A plain resume gets the same value back."""
    import torch

    if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        return
    rates = [base * rule(scheduler.last_epoch) for base, rule in zip(scheduler.base_lrs, scheduler.lr_lambdas,
                                                                     strict=True)]  # fmt: skip
    for group, rate in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    scheduler._last_lr = rates
