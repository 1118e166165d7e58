"""A lower precision the hardware cannot run fast is named before a run spends hours in it.

bf16 on a CPU without avx512_bf16/AMX (or on a pre-Ampere GPU) is emulated: measured at 60× slower than
float32 on one such CPU. The run measures the matmul rate of its compute precision anyway (the MFU
denominator); ``check_precision`` measures float32 beside it and refuses (or, when allowed, warns) before
any data is read.
"""

from __future__ import annotations

import contextlib
import logging
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from degen_train.devices.matmul_peak import measured_matmul_peak

log = logging.getLogger("degen_train")


def autocast_off(tensor: torch.Tensor) -> contextlib.AbstractContextManager:
    """A region that runs in its inputs' own dtype: autocast off on ``tensor``'s device, where it has autocast."""
    device = tensor.device.type
    if torch.amp.is_autocast_available(device):
        return torch.autocast(device_type=device, enabled=False)
    return contextlib.nullcontext()  # e.g. the meta device of the fake-device step check

# Lightning precision names -> the dtype the matrix products run in.
COMPUTE_DTYPE: dict[str, torch.dtype] = {
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "bf16": torch.bfloat16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
    "16": torch.float16,
}
# Below REFUSE_BELOW × float32's rate a run is refused (unless allow_slow_precision=true); below WARN_BELOW it
# is warned about: the lower precision then buys nothing but rounding. Between the two the cost is real but
# not ruinous, and rates this close drift with the machine's load.
REFUSE_BELOW = 0.5
WARN_BELOW = 1.0
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class PrecisionVerdict:
    action: str  # "ok" | "warn" | "refuse"
    message: str


def precision_verdict(
    *, setting: str, dtype: str, low_rate: float, fp32_rate: float, allowed: bool, device: str = "cpu"
) -> PrecisionVerdict:
    """ok / warn / refuse from the two measured matmul rates (FLOP/s): ratio = low_rate / fp32_rate.

    refuse when ratio < REFUSE_BELOW and not ``allowed`` (then warn); warn when ratio < WARN_BELOW; else ok.
    ``setting`` names the config key and value that chose ``dtype`` (e.g. trainer.precision=bf16-mixed).
    """
    ratio = low_rate / fp32_rate if fp32_rate > 0 else float("inf")
    rates = (
        f"{setting}: {dtype} matmul at {low_rate / 1e9:.1f} GFLOP/s on this {device}, float32 at "
        f"{fp32_rate / 1e9:.1f} GFLOP/s ({ratio:.2f}×)"
    )
    if ratio >= WARN_BELOW:
        return PrecisionVerdict("ok", rates)
    if ratio < REFUSE_BELOW and not allowed:
        return PrecisionVerdict(
            "refuse",
            f"{rates}. This hardware has no fast {dtype} (a CPU needs avx512_bf16 or AMX for bf16; a GPU, Ampere or "
            f"newer), so the run would be about {1 / max(ratio, 1e-9):.0f}× slower than in float32. Use "
            f"trainer.precision=32-true, or set allow_slow_precision=true to train in {dtype} anyway",
        )
    return PrecisionVerdict("warn", f"{rates}: slower than float32, so trainer.precision=32-true would be faster")


def compute_dtype(cfg: Mapping[str, Any]) -> torch.dtype:
    """The dtype the run's matrix products use: the trainer's precision, or FSDP2's bf16 parameters. ``cfg``: the
    run's settings as a mapping (TrainConfig.plain_settings(), or a composed config)."""
    dtype = COMPUTE_DTYPE.get(str(cfg["trainer"].get("precision", "32-true")), torch.float32)
    strategy = cfg.get("strategy") or {}
    if dtype == torch.float32 and strategy.get("mixed_precision") == "bf16":
        return torch.bfloat16
    return dtype


def run_device(cfg: Mapping[str, Any]) -> str | None:
    """Where the run's products will run: cpu, cuda, or None where it cannot be told here (mps, tpu, ...)."""
    accelerator = str(cfg["trainer"].get("accelerator", "auto"))
    if accelerator == "cpu":
        return "cpu"
    if accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return "cuda"
    return "cpu" if accelerator == "auto" else None


def check_precision(cfg: Mapping[str, Any]) -> PrecisionVerdict | None:
    """Measure float32 beside the run's lower precision (if any) and refuse or warn as precision_verdict says."""
    dtype, device = compute_dtype(cfg), run_device(cfg)
    if dtype == torch.float32 or device is None:
        return None
    setting = f"trainer.precision={cfg['trainer'].get('precision')}"
    if str(cfg["trainer"].get("precision")) not in COMPUTE_DTYPE:
        setting = "strategy.mixed_precision=bf16"
    if device == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported(including_emulation=False):
        low, fp32 = 0.0, 1.0  # torch says so itself: no native bf16 on this GPU
    else:
        low, fp32 = measured_matmul_peak(device, dtype), measured_matmul_peak(device, torch.float32)
    verdict = precision_verdict(
        setting=setting,
        dtype=str(dtype).removeprefix("torch."),
        low_rate=low,
        fp32_rate=fp32,
        allowed=bool(cfg["allow_slow_precision"]),
        device=device,
    )
    if verdict.action == "refuse":
        raise ValueError(verdict.message)
    (log.warning if verdict.action == "warn" else log.info)("precision check: %s", verdict.message)
    return verdict


def cpu_description() -> dict[str, Any]:
    """This CPU's model name and whether it has native bf16 (for benchmark records and the README)."""
    name, flags = platform.processor() or platform.machine(), set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    native = [flag for flag in NATIVE_BF16_FLAGS if flag in flags]
    return {"cpu": name, "threads": torch.get_num_threads(), "native_bf16": bool(native), "bf16_flags": native}
