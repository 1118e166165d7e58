"""Tokens per second (non-padding tokens of the global batch) in the logs and the progress bar."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, TQDMProgressBar


class TokenThroughput(Callback):
    """Logs ``train/tokens_per_s`` over the last ``window`` steps and keeps the run's mean."""

    def __init__(self, window: int = 20) -> None:
        self.window = window
        self.marks: list[tuple[float, int]] = []
        self.total_tokens = 0
        self.total_seconds = 0.0
        self._last: float | None = None

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, batch: dict, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        tokens = int(batch["attention_mask"].sum()) * trainer.world_size
        if self._last is not None:  # the first batch pays start-up costs: not counted
            self.total_tokens += tokens
            self.total_seconds += now - self._last
        self._last = now
        self.marks = (self.marks + [(now, tokens)])[-(self.window + 1) :]
        if len(self.marks) > 1:
            span = self.marks[-1][0] - self.marks[0][0]
            rate = sum(t for _, t in self.marks[1:]) / max(span, 1e-9)
            module.log("train/tokens_per_s", rate, prog_bar=True, on_step=True, batch_size=1)

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._last = None  # validation time is not training time

    def state_dict(self) -> dict[str, Any]:  # a resumed run's mean covers all of its segments
        return {"total_tokens": self.total_tokens, "total_seconds": self.total_seconds}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.total_tokens = int(state_dict.get("total_tokens", 0))
        self.total_seconds = float(state_dict.get("total_seconds", 0.0))

    @property
    def mean_tokens_per_s(self) -> float:
        return self.total_tokens / self.total_seconds if self.total_seconds else 0.0


class StepProgressBar(TQDMProgressBar):
    """A progress bar over optimizer steps to ``max_steps`` (the loader is endless), with ETA."""

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        if trainer.max_steps > 0:
            total = trainer.max_steps * trainer.accumulate_grad_batches
            done = trainer.global_step * trainer.accumulate_grad_batches
            self.train_progress_bar.reset(total=total)
            self.train_progress_bar.n = done
            self.train_progress_bar.refresh()

    def get_metrics(self, trainer: pl.Trainer, module: pl.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, module)
        metrics.pop("v_num", None)
        return metrics
