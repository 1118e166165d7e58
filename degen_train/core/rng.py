"""Every random draw is a pure function of the seed and a position: ``mix_seed(seed, salt, ...)``.

Each consumer of randomness has its own salt, so no two of them ever draw the same stream. The values are
arbitrary but fixed: changing one changes the draws of every run (and breaks exact resume of old runs).
"""

from __future__ import annotations

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
