"""What a step logs: its values stacked into one vector (one collective, one transfer), the train row averaged over
an accumulation window, and the losses of each micro-batch kept for the divergence guard."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def stack_logged(logged: dict[str, Tensor]) -> Tensor:
    """The step's logged values as one float32 vector: every value must be on the loss's device, so a term makes
    its metrics from its inputs (tests/test_step_check.py)."""
    return torch.stack([value.float() for value in logged.values()])


class StepLog:
    """Per run: the last train row (kept in checkpoints), the loss columns since the last update, the window sum."""

    def __init__(self) -> None:
        self.last_train_metrics: dict[str, Any] = {}
        self.step_losses: list[Tensor] = []  # (L,) per micro-batch since the last update
        self.loss_names: list[str] = []
        self.window_sum: Tensor | None = None  # Σ of the accumulation window's micro-batch values so far

    def take_step_losses(self) -> tuple[list[str], Tensor]:
        """The losses ("loss" first, then each term's) of the micro-batches since the last update: (M, L)."""
        values, self.step_losses = torch.stack(self.step_losses), []
        return self.loss_names, values

    def metrics(self, module: Any, stage: str, logged: dict[str, Tensor], window_index: int | None) -> dict:
        """``{stage}/{name}: value``, a train row reduced over the processes (one collective) and, within an
        accumulation window (``window_index``), its mean so far: at the window's last micro-batch, the update's."""
        names, values = list(logged), stack_logged(logged)
        if stage == "train" and module.trainer.world_size > 1:  # train curves show the global batch
            values = module.trainer.strategy.reduce(values, reduce_op="mean")
        if stage == "train":
            losses = [i for i, name in enumerate(names) if name == "loss" or name.endswith("/loss")]
            losses.sort(key=lambda i: names[i] != "loss")  # the total first
            self.loss_names = [names[i] for i in losses]
            self.step_losses.append(values[losses])
            if window_index is not None:
                self.window_sum = values if window_index == 0 else self.window_sum + values
                values = self.window_sum / (window_index + 1)
        metrics = {f"{stage}/{name}": value for name, value in zip(names, values, strict=True)}
        if stage == "train":
            self.last_train_metrics = metrics
        return metrics
