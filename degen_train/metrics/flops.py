"""FLOPs of the model's useful work and the peak they are measured against (for MFU)."""

from __future__ import annotations

import torch
from torch import nn

from degen_train.devices.matmul_peak import measured_matmul_peak


def body_and_head_parameters(model: nn.Module, head: nn.Module) -> tuple[int, int]:
    """(P_body, P_head): weights applied at every position (no lookups, no vocabulary head) and the head's.

    Embedding lookups cost no multiply-adds; the vocabulary head runs only at labelled positions. A head
    tied to the input embeddings counts the V·H matrix once, in the head.
    """
    lookups = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    in_head = {id(p): p for p in [*head.parameters(), model.get_output_embeddings().weight]}
    body = sum(p.numel() for p in model.parameters() if id(p) not in lookups and id(p) not in in_head)
    return body, sum(p.numel() for p in in_head.values())


def model_flops(*, body: int, head: int, layers: int, hidden: int, batch: int, length: int, predicted: int) -> float:
    """Useful training FLOPs of one batch: 6·P_body·B·T + 12·L·H·T²·B (attention) + 6·P_head·N.

    Kaplan et al. 2020 / Chowdhery et al. 2022 (PaLM, appendix B) count: forward 2 FLOPs per weight and
    token, backward twice that; attention scores and values 12·L·H·T per token; the vocabulary head only at
    the N predicted positions (MLM targets, every position of a decoder).
    """
    return 6.0 * body * batch * length + 12.0 * layers * hidden * length * length * batch + 6.0 * head * predicted


def peak_flops(device: torch.device, dtype: torch.dtype, configured: float | None) -> tuple[float, str]:
    """The per-device peak and where it came from: the config, a GPU data sheet, or a measured matmul."""
    if configured:
        return float(configured), "config"
    if device.type == "cuda":
        from lightning.fabric.utilities.throughput import get_available_flops

        known = get_available_flops(device, dtype)
        if known:
            return float(known), "data sheet"
    return measured_matmul_peak(str(device), dtype), f"measured {str(dtype).removeprefix('torch.')} matmul"


