"""Every random draw is a pure function of the seed and a position: ``mix_seed(seed, salt, ...)``.

Each consumer of randomness has its own salt, so no two of them ever draw the same stream. The values are
arbitrary but fixed: changing one changes the draws of every run (and breaks exact resume of old runs).
"""

from __future__ import annotations

DROPOUT_SALT = 0xD409  # dropout of a micro-batch: (seed, salt, step, micro-batch, rank)
EPOCH_ORDER_SALT = 0x5A3D  # the batch order of an epoch: (seed, epoch, salt)
CROP_SALT = 0x5C1  # COCO-LM's SCL crop of an example: (example seed, salt)
REPLACEMENT_SALT = 0xC0C0  # generator samples that corrupt an example: (example seed, salt)
VALIDATION_DROPOUT_SALT = 0x7A1D  # dropout a validation pass keeps (SimCSE's views): (seed, salt, batch, rank)
VALIDATION_SEED_OFFSET = 7_919  # validation masking: seed + offset, so it differs from training and never changes
# An example's masking seed is mix_seed(seed, epoch, index): the position itself, no salt (data/sampling.py).

_MASK64 = (1 << 64) - 1


def mix_seed(*values: int) -> int:
    """Hash integers to a 63-bit seed with splitmix64 rounds (stable across processes and runs)."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (int(value) & _MASK64)) & _MASK64
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        state = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        state = ((state ^ (state >> 27)) * 0x94D049BB133111EB) & _MASK64
        state ^= state >> 31
    return state & ((1 << 63) - 1)
