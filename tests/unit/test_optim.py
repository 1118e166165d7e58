"""Parameter groups and the learning-rate schedule."""

from __future__ import annotations

import math

import pytest
from torch import nn

from degen_train.optim import build_scheduler, lr_factor, parameter_groups


def test_biases_and_layernorm_are_not_decayed() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2, bias=False))
    decay, no_decay = parameter_groups([model], 0.1)
    assert {id(p) for p in decay["params"]} == {id(model[0].weight), id(model[2].weight)}
    assert {id(p) for p in no_decay["params"]} == {id(model[0].bias), id(model[1].weight), id(model[1].bias)}
    assert no_decay["weight_decay"] == 0.0


def test_warmup_then_linear_and_cosine_decay() -> None:
    common = {"warmup_steps": 4, "total_steps": 14, "min_ratio": 0.0}
    assert lr_factor(0, schedule="linear", **common) == pytest.approx(0.25)
    assert lr_factor(3, schedule="linear", **common) == pytest.approx(1.0)
    assert lr_factor(9, schedule="linear", **common) == pytest.approx(0.5)  # halfway through 10 decay steps
    assert lr_factor(14, schedule="linear", **common) == pytest.approx(0.0)
    assert lr_factor(9, schedule="cosine", **common) == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))
    assert lr_factor(100, schedule="constant", **common) == 1.0


def test_unknown_schedule_names_the_choices() -> None:
    optimizer = __import__("torch").optim.SGD(nn.Linear(1, 1).parameters(), lr=1)
    with pytest.raises(ValueError, match=r"scheduler.name='steep' is not one of linear, cosine, constant"):
        build_scheduler(optimizer, schedule="steep", warmup_steps=0, total_steps=1, min_ratio=0)
