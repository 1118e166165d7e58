"""Throughput's clock and peak: the time between steps is training time, except what is measured there (the
isotropy probe) and validation; MFU is against a card's dense data-sheet peak. On an H200 the probe inside the
timed steps took BERT-base's reported rate from ~360k tokens/s to 133k under model.compile (docs/gpu.md)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from degen_train.callbacks import throughput as throughput_module
from degen_train.callbacks.isotropy_monitor import IsotropyMonitor
from degen_train.callbacks.throughput import Throughput

BATCH = {"input_ids": torch.zeros(2, 8, dtype=torch.long), "host_counts": (16, 3)}


def _steps(callback: Throughput, clock: list[float], times: list[float], probe_after: dict[int, float]) -> None:
    trainer = SimpleNamespace(world_size=1, _logger_connector=SimpleNamespace(should_update_logs=False))
    for index, now in enumerate(times):
        clock[0] = now
        callback.on_train_batch_end(trainer, SimpleNamespace(), None, BATCH, index)
        if index in probe_after:
            callback.exclude(probe_after[index])


def _callback(monkeypatch: pytest.MonkeyPatch) -> tuple[Throughput, list[float]]:
    clock = [0.0]
    monkeypatch.setattr(throughput_module.time, "perf_counter", lambda: clock[0])
    callback = Throughput(window=2)
    callback._shape, callback._measured, callback.peak = (100, 10, 2, 8), True, 1e9
    return callback, clock


def test_a_probe_between_steps_is_left_out_of_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    callback, clock = _callback(monkeypatch)
    # steps end at 10, 11, 12 (+ a 5 s probe after the second) and 18: three 1 s steps after the first
    _steps(callback, clock, [10.0, 11.0, 17.0, 18.0], probe_after={1: 5.0})
    assert callback.totals["seconds"] == pytest.approx(3.0)
    assert callback.mean_tokens_per_s == pytest.approx(3 * 16 / 3.0)
    assert callback.marks[-1][0] - callback.marks[0][0] == pytest.approx(2.0)  # the window's span too
    assert callback.summary(1)["seconds_per_batch"] == pytest.approx(1.0)  # 3 timed batches in 3 s


def test_without_a_probe_every_second_between_steps_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    callback, clock = _callback(monkeypatch)
    _steps(callback, clock, [10.0, 11.0, 17.0, 18.0], probe_after={})
    assert callback.totals["seconds"] == pytest.approx(8.0)
    assert callback.summary(1)["seconds_per_batch"] == pytest.approx(8.0 / 3)


def test_the_isotropy_monitor_hands_its_measuring_time_to_throughput(monkeypatch: pytest.MonkeyPatch) -> None:
    monitor, callback = IsotropyMonitor(every_n_steps=1), Throughput()
    monkeypatch.setattr(monitor, "_measure", lambda trainer, module: time.sleep(0.05) or {"x": 1.0})
    trainer = SimpleNamespace(callbacks=[monitor, callback])
    assert monitor.measure(trainer, torch.nn.Linear(1, 1)) == {"x": 1.0}
    assert 0.05 <= callback._excluded < 5.0


@pytest.mark.parametrize(
    ("card", "dtype", "peak"),
    [
        ("NVIDIA H200", torch.bfloat16, 989.5e12),  # H200 data sheet: 1,979 TFLOP/s with sparsity
        ("NVIDIA H200 NVL", torch.bfloat16, 835.5e12),
        ("NVIDIA H100 80GB HBM3", torch.bfloat16, 989.4e12),  # H100 SXM
        ("NVIDIA H100 PCIe", torch.float16, 756e12),
        ("NVIDIA H100 NVL", torch.float32, 417.5e12),  # TF32: float32 matmul precision "high" in the test
    ],
)
def test_hopper_cards_get_their_dense_data_sheet_peak(
    monkeypatch: pytest.MonkeyPatch, card: str, dtype: torch.dtype, peak: float
) -> None:
    """The first GPU sitting's card, "NVIDIA H200", is not in Lightning's table: its MFU was measured against a
    matmul (519 TFLOP/s) and read 1.9x too high."""
    from degen_train.metrics.flops import peak_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: card)
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    value, source = peak_flops(torch.device("cuda"), dtype, None)
    assert value == peak and source == f"data sheet ({card}, dense)"


def test_an_mfu_above_a_measured_peak_is_not_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 56.6: 131.8% MFU was printed on a loaded CPU, against a matmul peak measured under that load. An MFU is
    shown against a data sheet's (or the config's) peak, or a measured one it stays under."""
    callback, clock = _callback(monkeypatch)
    _steps(callback, clock, [0.0, 1.0, 2.0, 3.0], {})
    useful = callback.totals["model_flops"] / callback.totals["seconds"]
    callback.peak, callback.peak_source = useful / 1.318, "measured float32 matmul"
    with caplog.at_level("WARNING"):
        assert callback.summary(1)["mfu"] is None
    assert "MFU not reported: the run did 132% of the measured float32 matmul peak" in caplog.text
    callback.peak_source = "data sheet (NVIDIA H100 80GB HBM3, dense)"  # a data sheet is kept as it is
    assert callback.summary(1)["mfu"] == pytest.approx(1.318)
    callback.peak, callback.peak_source = useful / 0.4, "measured float32 matmul"
    assert callback.summary(1)["mfu"] == pytest.approx(0.4)
