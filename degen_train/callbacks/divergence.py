"""Catch divergence at the step it happens: a non-finite loss or gradient norm, or (optionally) a loss spike."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback


class DivergenceError(RuntimeError):
    """Training stopped because the loss or the gradients stopped being finite (or too many steps were skipped)."""


class DivergenceGuard(Callback):
    """Checks every optimizer step, before the update: one host sync per step, none per term.

    ``on_nonfinite``: ``stop`` raises at the first non-finite loss or gradient norm, naming the step and the
    terms, so no non-finite update, checkpoint or export is ever written; ``skip`` drops that update (the
    weights and the optimizer state stay as they were; the schedule goes on) and stops after ``max_skips``.
    ``spike_sigma`` (off when null): also skip a step whose loss is above mean + spike_sigma·std of the
    last ``spike_window`` accepted steps, once ``spike_window // 2`` of them are known.
    Under data parallelism every rank decides alike: the losses are the global batch's and the gradient
    norm is taken after the all-reduce. With an fp16 loss scaler, overflowing gradients are its business.
    """

    def __init__(
        self,
        *,
        on_nonfinite: Literal["stop", "skip"],
        max_skips: int,
        spike_sigma: float | None,
        spike_window: int,
    ) -> None:
        # Checked, with their defaults, in schema.py (DivergenceCallbackConfig) and conf/callbacks/default.yaml.
        self.on_nonfinite, self.max_skips = on_nonfinite, max_skips
        self.spike_sigma, self.spike_window = spike_sigma, spike_window
        self.skipped = 0
        self.history: deque[float] = deque(maxlen=spike_window)

    def on_before_optimizer_step(self, trainer: pl.Trainer, module: pl.LightningModule, optimizer: Any) -> None:
        names, values = module.take_step_losses()  # (micro-batches, losses), already averaged over ranks
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        grad_norm = torch.nn.utils.get_total_norm(grads) if grads else values.new_zeros(())
        if hasattr(grad_norm, "full_tensor"):  # FSDP2: sharded gradients give a DTensor norm; make it whole
            grad_norm = grad_norm.full_tensor()
        checks = torch.stack(
            [torch.isfinite(grad_norm).float(), torch.isfinite(values).all().float(), values[:, 0].mean().float()]
        )
        grad_ok, loss_ok, loss = checks.tolist()  # the one host sync of the step
        if getattr(trainer.precision_plugin, "scaler", None) is not None:
            grad_ok = True  # fp16: the scaler skips overflowing steps and lowers its scale by itself
        step = trainer.global_step
        if not (grad_ok and loss_ok):
            finite = dict(zip(names, torch.isfinite(values).all(0).tolist(), strict=True))
            bad = [name.removesuffix("/loss") for name, ok in finite.items() if not ok and name != "loss"]
            if bad:
                what = f"loss in term(s) {', '.join(bad)}"
            elif not finite.get("loss", True):
                what = "total loss (every term is finite: the weighted sum overflows)"
            else:
                what = f"gradient norm ({grad_norm.item()}) with a finite loss"
            self._refuse(module, optimizer, f"step {step}: non-finite {what}", stoppable=True)
        elif self._is_spike(loss):
            mean, std = _mean_std(self.history)
            reason = f"step {step}: loss {loss:.4g} is above mean {mean:.4g} + {self.spike_sigma}·std {std:.4g}"
            self._refuse(module, optimizer, reason, stoppable=False)
        else:
            self.history.append(loss)
        module.step_grad_norm = grad_norm  # clipping reuses it (skipped steps have no gradients to clip)
        module.log("train/grad_norm", grad_norm, on_step=True, batch_size=1)
        module.log("train/skipped_steps", float(self.skipped), on_step=True, batch_size=1)  # cumulative

    def _is_spike(self, loss: float) -> bool:
        if self.spike_sigma is None or len(self.history) < max(2, self.spike_window // 2):
            return False
        mean, std = _mean_std(self.history)
        return loss > mean + self.spike_sigma * std

    def _refuse(self, module: Any, optimizer: Any, reason: str, *, stoppable: bool) -> None:
        """Stop (non-finite values under on_nonfinite=stop) or skip this update; loss spikes are always skipped."""
        if self.on_nonfinite == "stop" and stoppable:
            raise DivergenceError(
                f"{reason}. Training stopped before this update: the checkpoints so far hold finite weights "
                f"and no export was written. Lower optimizer.lr, or set callbacks.divergence.on_nonfinite=skip"
            )
        self.skipped += 1
        for group in optimizer.param_groups:  # AdamW leaves a parameter without a gradient untouched
            for param in group["params"]:
                param.grad = None
        module.print(f"skipped the update of {reason} ({self.skipped} skipped so far)")
        if self.skipped > self.max_skips:
            raise DivergenceError(
                f"{reason}: {self.skipped} updates skipped, more than callbacks.divergence.max_skips="
                f"{self.max_skips}; the run is diverging. Lower optimizer.lr, or raise max_skips"
            )

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "history": list(self.history)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))
        self.history.extend(float(v) for v in state_dict.get("history", []))


def _mean_std(values: deque[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1))
