"""Every random draw is a pure function of the seed and a position: ``mix_seed(seed, salt, ...)``.

Each consumer of randomness has its own salt, so no two of them ever draw the same stream. The values are
arbitrary but fixed: changing one changes the draws of every run (and breaks exact resume of old runs).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor

DROPOUT_SALT = 0xD409  # dropout of a micro-batch: (seed, salt, step, micro-batch, rank)
EPOCH_ORDER_SALT = 0x5A3D  # the batch order of an epoch: (seed, epoch, salt)
CROP_SALT = 0x5C1  # COCO-LM's SCL crop of an example: (example seed, salt)
REPLACEMENT_SALT = 0xC0C0  # generator samples that corrupt an example: (example seed, salt)
VALIDATION_DROPOUT_SALT = 0x7A1D  # dropout a validation pass keeps (SimCSE's views): (seed, salt, batch, rank)
VALIDATION_SEED_OFFSET = 7_919  # validation masking: seed + offset, so it differs from training and never changes
# An example's masking seed is mix_seed(seed, epoch, index): the position itself, no salt (data/sampling.py).

_MASK64 = (1 << 64) - 1
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def mix_seed(*values: int) -> int:
    """Hash integers to a 63-bit seed with splitmix64 rounds (stable across processes and runs)."""
    state = _GOLDEN
    for value in values:
        state = (state ^ (int(value) & _MASK64)) & _MASK64
        state = (state + _GOLDEN) & _MASK64
        state = ((state ^ (state >> 30)) * _MIX1) & _MASK64
        state = ((state ^ (state >> 27)) * _MIX2) & _MASK64
        state ^= state >> 31
    return state & ((1 << 63) - 1)


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 that holds it."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shifted(state: Tensor, bits: int) -> Tensor:
    """state >> bits as on unsigned 64-bit integers (torch's >> on int64 keeps the sign)."""
    return (state >> bits) & ((1 << (64 - bits)) - 1)


def seed_states(seeds: Tensor) -> Tensor:
    """splitmix64(seed) of each seed: the first round of counter_uniforms, shared by all of a seed's counters."""
    return _splitmix(seeds.to(torch.int64))


def uniforms_at(states: Tensor, counters: Tensor) -> Tensor:
    """Uniforms in [0, 1), float64: splitmix64(state + counter), broadcast over ``states`` and ``counters``."""
    return _shifted(_splitmix(states + counters.to(torch.int64)), 11).to(torch.float64) * 2.0**-53


def counter_uniforms(seeds: Tensor, counters: Tensor) -> Tensor:
    """Uniforms in [0, 1), float64, one per (seed, counter) pair: splitmix64 of splitmix64(seed) + counter, on the
    tensors' device (int64 arithmetic wraps as unsigned arithmetic does). A draw depends on its pair alone, so
    a batch draws them all at once, on the GPU, with no host round trip, and equal under any batching."""
    return uniforms_at(seed_states(seeds), counters)


def _splitmix(state: Tensor) -> Tensor:
    state = state + _signed(_GOLDEN)
    state = (state ^ _shifted(state, 30)) * _signed(_MIX1)
    state = (state ^ _shifted(state, 27)) * _signed(_MIX2)
    return state ^ _shifted(state, 31)


class RandomStreams:
    """The global generators' states (Python's, NumPy's, torch's CPU and every initialised CUDA device's), taken and
    put back: a periodic piece of work (validation, a probe, a checkpoint) runs between ``take`` and ``restore``
    and leaves the training stream where it found it, so a run's weights do not depend on its cadences."""

    def __init__(self) -> None:
        self._states: tuple[Any, ...] | None = None

    def take(self) -> None:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        self._states = (random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda)

    def restore(self) -> None:
        if self._states is None:
            return
        python, numpy_state, cpu, cuda = self._states
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        self._states = None

    @contextmanager
    def kept(self) -> Iterator[None]:
        """``with RandomStreams().kept(): ...``: whatever the body draws, the streams after it are those before."""
        self.take()
        try:
            yield
        finally:
            self.restore()
