"""core.rng.RandomStreams: what a periodic piece of work draws never moves the training streams (issue 57)."""

from __future__ import annotations

import random

import numpy as np
import torch

from degen_train.core.rng import RandomStreams


def draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), torch.rand(()).item()


def test_the_streams_after_kept_work_are_those_before_it() -> None:
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    expected = draws()
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    with RandomStreams().kept():
        torch.manual_seed(99)  # what validation does per batch
        draws()
    assert draws() == expected


def test_take_and_restore_across_hooks_and_a_restore_without_a_take_changes_nothing() -> None:
    streams = RandomStreams()
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    streams.take()
    torch.rand(100)
    streams.restore()
    streams.restore()  # a second restore (nothing taken) leaves the stream alone
    assert torch.equal(torch.rand(4), expected)
