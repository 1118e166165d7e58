"""The weight averages against a transcription of Hägele et al. 2024's released averagers
(epfml/schedules-and-scaling, src/optim/weight_averaging.py: WeightAverager, ExponentialWeightAverager), driven
as its training loop drives them (base.py: ``step`` after every optimizer step), on the same weights."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from degen_train.callbacks.weight_averaging import WeightAverage


class ReleasedWindowAverage:
    """WeightAverager: a uniform mean restarted every ``horizon`` steps, sampled every ``interval``; the last
    completed window's mean is what eval_wa validates (get_latest_like)."""

    def __init__(self, tensors: list[torch.Tensor], horizon: int, interval: int) -> None:
        self.module = [t.detach().clone().float() for t in tensors]
        self.horizon, self.interval, self.count, self.saved = horizon, interval, 0, None

    def step(self, tensors: list[torch.Tensor]) -> None:
        if self.count % self.interval == 0:
            rate = 1 / ((self.count % self.horizon) // self.interval + 1)
            for avg, curr in zip(self.module, tensors, strict=True):
                avg.copy_(torch.lerp(avg, curr.float(), rate))
        self.count += 1
        if self.count % self.horizon == 0:
            self.saved = [a.clone() for a in self.module]


class ReleasedEMA:
    """ExponentialWeightAverager with warmup 0: the first step copies, then every ``interval``-th a lerp."""

    def __init__(self, tensors: list[torch.Tensor], interval: int, decay: float) -> None:
        self.module = [t.detach().clone().float() for t in tensors]
        self.interval, self.decay, self.count = interval, decay, 0

    def step(self, tensors: list[torch.Tensor]) -> None:
        if self.count == 0:
            for avg, curr in zip(self.module, tensors, strict=True):
                avg.copy_(curr.float())
        elif self.count % self.interval == 0:
            for avg, curr in zip(self.module, tensors, strict=True):
                avg.copy_(torch.lerp(avg, curr.float(), 1 - self.decay))
        self.count += 1


def drive(callback: WeightAverage, model: nn.Module, released: object, updates: int, seed: int = 0) -> list:
    """The same weights after each of ``updates`` updates, handed to both; returns (update, ours, released) triples
    where the released one has an average to validate."""
    module = SimpleNamespace(backbone=SimpleNamespace(model=model))
    callback.setup(SimpleNamespace(strategy=SimpleNamespace()), module, "fit")
    generator = torch.Generator().manual_seed(seed)
    seen = []
    for update in range(1, updates + 1):
        with torch.no_grad():
            for param in model.parameters():
                param.copy_(torch.randn(param.shape, generator=generator))
        callback.on_train_batch_end(SimpleNamespace(global_step=update), module)
        callback.on_train_batch_end(SimpleNamespace(global_step=update), module)  # a second micro-batch: no-op
        released.step(list(model.parameters()))
        expected = released.saved if isinstance(released, ReleasedWindowAverage) else released.module
        seen.append((update, callback.validated, expected))
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bf16 weights: the average stays float32
def test_the_window_average_equals_the_released_weight_averager(dtype: torch.dtype) -> None:
    model = nn.Linear(4, 3).to(dtype)
    callback = WeightAverage(kind="swa", every_n_steps=2, window=6)
    released = ReleasedWindowAverage(list(model.parameters()), horizon=6, interval=2)
    for update, ours, expected in drive(callback, model, released, updates=17):
        if expected is None:
            assert ours is None, update  # no window completed yet: nothing validated (as released)
            continue
        assert all(o.dtype == torch.float32 for o in ours)
        assert all(torch.allclose(o, e, atol=1e-6) for o, e in zip(ours, expected, strict=True)), update
    assert callback.samples == 9  # updates 1, 3, 5, ..., 17


def test_the_ema_equals_the_released_exponential_averager() -> None:
    model = nn.Linear(4, 3)
    callback = WeightAverage(kind="ema")  # the released defaults: decay 0.95 every 10 updates
    assert (callback.decay, callback.every_n_steps) == (0.95, 10)
    released = ReleasedEMA(list(model.parameters()), interval=10, decay=0.95)
    for update, ours, expected in drive(callback, model, released, updates=35):
        assert all(torch.allclose(o, e, atol=1e-6) for o, e in zip(ours, expected, strict=True)), update
    assert callback.samples == 4  # updates 1, 11, 21, 31


def test_the_swa_defaults_are_the_released_window_and_interval() -> None:
    callback = WeightAverage(kind="swa")
    assert (callback.window, callback.every_n_steps, callback.dtype) == (500, 5, "float32")
    assert (callback.validate, callback.export) == ("both", "current")
