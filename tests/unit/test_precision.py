"""A lower precision the hardware emulates is refused (or warned about) at start, from two measured rates."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from degen_train.devices import precision
from degen_train.devices.precision import check_precision, compute_dtype, precision_verdict
from tests.helpers import run

# The measurement: an AMD EPYC without avx512_bf16/AMX, 1024×1024 matmul.
EPYC_FP32, EPYC_BF16 = 52.6e9, 0.9e9


def verdict(low: float, fp32: float, *, allowed: bool = False) -> precision.PrecisionVerdict:
    return precision_verdict(
        setting="trainer.precision=bf16-mixed", dtype="bfloat16", low_rate=low, fp32_rate=fp32, allowed=allowed
    )


def test_emulated_bf16_is_refused_naming_both_rates_and_the_fix() -> None:
    result = verdict(EPYC_BF16, EPYC_FP32)
    assert result.action == "refuse"
    for part in ("0.9 GFLOP/s", "52.6 GFLOP/s", "0.02×", "about 58× slower", "trainer.precision=32-true"):
        assert part in result.message, (part, result.message)
    assert "allow_slow_precision=true" in result.message


def test_allowed_slow_precision_warns_instead() -> None:
    assert verdict(EPYC_BF16, EPYC_FP32, allowed=True).action == "warn"


@pytest.mark.parametrize(
    ("ratio", "action"),
    [(0.49, "refuse"), (0.5, "warn"), (0.99, "warn"), (1.0, "ok"), (2.6, "ok")],  # REFUSE_BELOW 0.5, WARN_BELOW 1
)
def test_the_decision_is_the_ratio_of_the_two_rates(ratio: float, action: str) -> None:
    assert verdict(ratio * 100e9, 100e9).action == action


def config(precision_name: str, **extra: object) -> object:
    return OmegaConf.create(
        {"trainer": {"precision": precision_name, "accelerator": "cpu"}, "strategy": {}, "allow_slow_precision": False,
         **extra}
    )


def test_compute_dtype_reads_the_trainer_and_fsdp2_settings() -> None:
    assert compute_dtype(config("bf16-mixed")) == torch.bfloat16
    assert compute_dtype(config("16-mixed")) == torch.float16
    assert compute_dtype(config("32-true")) == torch.float32
    fsdp_bf16 = OmegaConf.create(
        {"trainer": {"precision": "32-true"}, "strategy": {"name": "fsdp", "mixed_precision": "bf16"}}
    )
    assert compute_dtype(fsdp_bf16) == torch.bfloat16


def test_float32_runs_measure_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "measured_matmul_peak", lambda *a, **k: pytest.fail("measured"))
    assert check_precision(config("32-true")) is None


def test_a_slow_precision_stops_the_run_before_any_data_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rates = {torch.bfloat16: EPYC_BF16, torch.float32: EPYC_FP32}
    monkeypatch.setattr(precision, "measured_matmul_peak", lambda device, dtype: rates[dtype])
    with pytest.raises(ValueError, match=r"trainer.precision=bf16-mixed: bfloat16 matmul at 0.9 GFLOP/s"):
        run(tmp_path / "run", "trainer.precision=bf16-mixed", "trainer.accelerator=cpu")
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_the_real_check_on_this_machine_logs_both_rates(caplog: pytest.LogCaptureFixture) -> None:
    """Only that it completes and logs both rates: whether this CPU has native bf16 is the machine's business."""
    with caplog.at_level(logging.INFO, logger="degen_train"):
        result = check_precision(config("bf16-mixed", allow_slow_precision=True))
    assert result is not None and result.action in ("ok", "warn")
    line = next(r.getMessage() for r in caplog.records if "precision check" in r.getMessage())
    assert "bfloat16 matmul at" in line and "float32 at" in line and line.count("GFLOP/s") == 2
