"""Catch divergence at the step it happens: a non-finite loss or gradient norm, or (optionally) a loss spike."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from degen_train.callbacks.throughput import logging_step
from degen_train.devices.device_reads import DeferredRead


class DivergenceError(RuntimeError):
    """Training stopped because the loss or the gradients stopped being finite (or too many steps were skipped)."""


class DivergenceGuard(Callback):
    """Checks every optimizer step, before the update, and never lets a non-finite update through.

    ``on_nonfinite``: ``stop`` raises at the first non-finite loss or gradient norm, naming the step and the
    terms, so no non-finite update, checkpoint or export is ever written; ``skip`` drops that update (the
    weights and the optimizer state stay as they were; the schedule goes on) and stops after ``max_skips``.
    ``spike_sigma`` (off when null): also skip a step whose loss is above mean + spike_sigma·std of the
    last ``spike_window`` accepted steps, once ``spike_window // 2`` of them are known.
    Under data parallelism every rank decides alike: the losses are the global batch's and the gradient
    norm is taken after the all-reduce. With an fp16 loss scaler, overflowing gradients are its business.

    Two ways, the same outcome. With an optimizer that can skip its own update on the device (fused AdamW's
    ``found_inf``, as the AMP grad scaler uses it) and no spike rule, the step is checked on the device and
    skipped there when it is not finite; the host reads that verdict one step later, when the device has long
    computed it, and before any checkpoint is written or training ends (``settle``): no wait in the step. Else
    (a CPU's default AdamW, Muon, the spike rule) the verdict is read at once: one host wait per step.
    """

    def __init__(
        self,
        *,
        on_nonfinite: Literal["stop", "skip"],
        max_skips: int,
        spike_sigma: float | None,
        spike_window: int,
    ) -> None:
        # Checked, with their defaults, in sections.py (DivergenceCallbackConfig) and conf/callbacks/default.yaml.
        self.on_nonfinite, self.max_skips = on_nonfinite, max_skips
        self.spike_sigma, self.spike_window = spike_sigma, spike_window
        self.skipped = 0
        self.history: deque[float] = deque(maxlen=spike_window)
        # The deferred steps not yet read: (step, term names, losses, gradient norm, the verdict on its way).
        self.pending: list[tuple[int, list[str], Tensor, Tensor, DeferredRead]] = []
        self._skips_on_device: Tensor | None = None  # the running count logged, updated without a host read
        self._module: Any = None
        self.deferred_steps = 0  # how many steps were checked the deferred way (the benches report it)

    def on_before_optimizer_step(self, trainer: pl.Trainer, module: pl.LightningModule, optimizer: Any) -> None:
        self._module = module
        names, values = module.take_step_losses()  # (micro-batches, losses), already averaged over ranks
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        grad_norm = torch.nn.utils.get_total_norm(grads) if grads else values.new_zeros(())
        if hasattr(grad_norm, "full_tensor"):  # FSDP2: sharded gradients give a DTensor norm; make it whole
            grad_norm = grad_norm.full_tensor()
        scaled = getattr(trainer.precision_plugin, "scaler", None) is not None
        if self._can_defer(optimizer, scaled):
            self.settle(wait=len(self.pending) >= MAX_PENDING)  # the verdicts that reached the host by now
            ok = torch.isfinite(grad_norm) & torch.isfinite(values).all()  # on the device
            optimizer.found_inf = (~ok).to(torch.float32)  # fused AdamW skips this update on the device if set
            self.pending.append((trainer.global_step, names, values.detach(), grad_norm.detach(), DeferredRead(ok)))
            self.deferred_steps += 1
            self._log(module, grad_norm, skipped_now=~ok)
            return
        optimizer.__dict__.pop("found_inf", None)
        self._check_now(trainer, module, optimizer, names, values, grad_norm, scaled)
        self._log(module, grad_norm, skipped_now=None)

    def _can_defer(self, optimizer: Any, scaled: bool) -> bool:
        """Whether every group runs the fused kernel (the one that reads ``found_inf``), with no spike rule and no
        fp16 scaler (which owns found_inf)."""
        fused = getattr(optimizer, "_step_supports_amp_scaling", False) and all(
            group.get("fused") for group in optimizer.param_groups
        )
        return bool(fused) and not scaled and self.spike_sigma is None

    def _check_now(self, trainer: Any, module: Any, optimizer: Any, names: list[str], values: Tensor,
                   grad_norm: Tensor, scaled: bool) -> None:  # fmt: skip
        checks = torch.stack(
            [torch.isfinite(grad_norm).float(), torch.isfinite(values).all().float(), values[:, 0].mean().float()]
        )
        grad_ok, loss_ok, loss = checks.tolist()  # the one host wait of the step
        grad_ok = grad_ok or scaled  # fp16: the scaler skips overflowing steps and lowers its scale by itself
        step = trainer.global_step
        if not (grad_ok and loss_ok):
            self._refuse(module, optimizer, _what(step, names, values, grad_norm), stoppable=True)
        elif self._is_spike(loss):
            mean, std = _mean_std(self.history)
            reason = f"step {step}: loss {loss:.4g} is above mean {mean:.4g} + {self.spike_sigma}·std {std:.4g}"
            self._refuse(module, optimizer, reason, stoppable=False)
        else:
            self.history.append(loss)
        module.step_grad_norm = grad_norm  # clipping reuses it (skipped steps have no gradients to clip)

    def _log(self, module: Any, grad_norm: Tensor, *, skipped_now: Tensor | None) -> None:
        if skipped_now is not None:  # the deferred way: a device count, so that the log needs no read either
            if self._skips_on_device is None or self._skips_on_device.device != grad_norm.device:
                self._skips_on_device = torch.tensor(float(self.skipped), device=grad_norm.device)
            self._skips_on_device = self._skips_on_device + skipped_now.float()
            module.step_grad_norm = grad_norm
        if not logging_step(module.trainer):  # self.log costs ~0.3 ms a value: only when the loggers write it
            return
        skipped = self._skips_on_device if skipped_now is not None else float(self.skipped)
        module.log("train/grad_norm", grad_norm, on_step=True, batch_size=1)
        module.log("train/skipped_steps", skipped, on_step=True, batch_size=1)  # cumulative

    def settle(self, *, wait: bool = True) -> None:
        """Act on the verdicts of the deferred steps, in order: every one (``wait``: waiting for those still on their
        way), or those already on the host. A non-finite step stops the run (its update was skipped on the device)
        or counts as skipped."""
        while self.pending and (wait or self.pending[0][-1].ready()):
            step, names, values, grad_norm, verdict = self.pending.pop(0)
            if not bool(verdict.value()):
                self.pending = []
                self._refuse(self._module, None, _what(step, names, values, grad_norm), stoppable=True)

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.settle()  # before the final validation and the export

    def _is_spike(self, loss: float) -> bool:
        if self.spike_sigma is None or len(self.history) < max(2, self.spike_window // 2):
            return False
        mean, std = _mean_std(self.history)
        return loss > mean + self.spike_sigma * std

    def _refuse(self, module: Any, optimizer: Any, reason: str, *, stoppable: bool) -> None:
        """Stop (non-finite values under on_nonfinite=stop) or skip this update; loss spikes are always skipped.
        ``optimizer`` None: the update was already skipped on the device (the deferred way)."""
        if self.on_nonfinite == "stop" and stoppable:
            raise DivergenceError(
                f"{reason}. Training stopped: that update was not applied, the checkpoints so far hold finite "
                f"weights and no export was written. Lower optimizer.lr, or set callbacks.divergence.on_nonfinite=skip"
            )
        self.skipped += 1
        if optimizer is not None:
            for group in optimizer.param_groups:  # AdamW leaves a parameter without a gradient untouched
                for param in group["params"]:
                    param.grad = None
        if module is not None:
            module.print(f"skipped the update of {reason} ({self.skipped} skipped so far)")
        if self.skipped > self.max_skips:
            raise DivergenceError(
                f"{reason}: {self.skipped} updates skipped, more than callbacks.divergence.max_skips="
                f"{self.max_skips}; the run is diverging. Lower optimizer.lr, or raise max_skips"
            )

    def state_dict(self) -> dict[str, Any]:
        self.settle()  # a checkpoint is written only after every step in it was found finite (or skipped)
        return {"skipped": self.skipped, "history": list(self.history)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))
        self.history.extend(float(v) for v in state_dict.get("history", []))


def _what(step: int, names: list[str], values: Tensor, grad_norm: Tensor) -> str:
    """'step S: non-finite ...': which loss (each term named) or the gradient norm."""
    finite = dict(zip(names, torch.isfinite(values).all(0).tolist(), strict=True))
    bad = [name.removesuffix("/loss") for name, ok in finite.items() if not ok and name != "loss"]
    if bad:
        what = f"loss in term(s) {', '.join(bad)}"
    elif not finite.get("loss", True):
        what = "total loss (every term is finite: the weighted sum overflows)"
    else:
        what = f"gradient norm ({grad_norm.item()}) with a finite loss"
    return f"step {step}: non-finite {what}"


MAX_PENDING = 8  # deferred verdicts kept unread at most: a device that far behind is waited for


def _mean_std(values: deque[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1))
