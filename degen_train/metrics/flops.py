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


# Dense tensor-core FLOP/s per GPU, from NVIDIA's H100 and H200 data sheets (their "with sparsity" figures halved),
# most specific name first. Lightning's table does not know "NVIDIA H200" (the SXM card's name: an H200 sitting fell
# back to a measured matmul, 519 TFLOP/s, and reported MFU 1.9x too high) and lists the sparse figures of the H200s
# and the H100 NVL; MFU is quoted against dense peaks (PaLM, appendix B).
HOPPER_DENSE_PEAKS: dict[str, dict[str, float]] = {
    "h200 nvl": {"16-bit": 835.5e12, "tf32": 417.5e12, "fp32": 60e12},
    "h200": {"16-bit": 989.5e12, "tf32": 494.7e12, "fp32": 67e12},
    "h100 nvl": {"16-bit": 835.5e12, "tf32": 417.5e12, "fp32": 60e12},
    "h100 pcie": {"16-bit": 756e12, "tf32": 378e12, "fp32": 51.2e12},
    "h100": {"16-bit": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12},  # SXM: "NVIDIA H100 80GB HBM3"
}


def hopper_dense_peak(device_name: str, dtype: torch.dtype) -> float | None:
    """The dense peak of a Hopper card by its CUDA name, for bf16/fp16 and float32 (TF32 unless the float32 matmul
    precision is "highest"); None for other cards and dtypes."""
    chip = device_name.lower()
    if dtype in (torch.bfloat16, torch.float16):
        kind = "16-bit"
    elif dtype == torch.float32:
        kind = "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    else:
        return None
    for name, peaks in HOPPER_DENSE_PEAKS.items():
        if all(part in chip for part in name.split()):
            return peaks[kind]
    return None


def peak_flops(device: torch.device, dtype: torch.dtype, configured: float | None) -> tuple[float, str]:
    """The per-device peak and where it came from: the config, a GPU data sheet, or a measured matmul."""
    if configured:
        return float(configured), "config"
    if device.type == "cuda":
        from lightning.fabric.utilities.throughput import get_available_flops

        name = torch.cuda.get_device_name(device)
        hopper = hopper_dense_peak(name, dtype)
        if hopper:
            return hopper, f"data sheet ({name}, dense)"
        known = get_available_flops(device, dtype)
        if known:
            return float(known), "data sheet"
    return measured_matmul_peak(str(device), dtype), f"measured {str(dtype).removeprefix('torch.')} matmul"
