"""Gradient clipping that reuses the norm the divergence guard already took, and clips fused optimizers."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def clip_gradients(module: Any, optimizer: torch.optim.Optimizer, value: float | None, algorithm: str | None,
                   norm: Tensor | None) -> None:  # fmt: skip
    """Clip ``optimizer``'s gradients to ``value`` (by norm, or by value with ``algorithm="value"``).

    ``norm``: this step's gradient norm when the divergence guard took it: clipping scales by min(1, value/norm)
    on the device instead of a second pass. Lightning refuses to clip for a fused optimizer because of fp16 loss
    scaling; with no scaler (fp32, bf16) the gradients are unscaled and clipping them here is exact. Otherwise
    Lightning's own ``module.clip_gradients``."""
    if not value:
        return
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    no_scaler = getattr(module.trainer.precision_plugin, "scaler", None) is None
    if algorithm != "value" and norm is not None and no_scaler:
        # FSDP2's DTensor gradients cannot be scaled by a plain-tensor factor: a Python number there (a host read).
        factor = (value / (norm.float() + 1e-6)).clamp(max=1.0)
        grads = [p.grad for p in params]
        if grads and hasattr(grads[0], "full_tensor"):
            factor = float(factor)
        if grads:  # a skipped step has no gradients left to clip
            torch._foreach_mul_(grads, factor)
        return
    if any(group.get("fused") for group in optimizer.param_groups) and no_scaler:
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, value)
        else:
            torch.nn.utils.clip_grad_norm_(params, value)
        return
    module.clip_gradients(optimizer, value, algorithm)
