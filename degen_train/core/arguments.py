"""argparse types that bound a number where the option is declared: ``--stride 0`` or ``--seeds 1000000`` is one
line naming the option, the value and its range, before anything heavy loads (issue 72.8)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def whole(low: int, high: int) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (from {low:,} to {high:,})") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value:,} is not from {low:,} to {high:,}")
        return value

    parse.__name__ = f"whole number from {low} to {high}"
    return parse


def layer_choice(text: str) -> int | str:
    """``last``, ``first_last`` or a layer index from 0 (the embeddings) to 1,000."""
    if text in ("last", "first_last"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not last, first_last or a layer index (0 = embeddings)"
        ) from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{value} is not a layer index from 0 (the embeddings) upwards")
    return value


def parts_of(choices: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of ``choices`` (empty: none)."""

    def parse(text: str) -> tuple[str, ...]:
        parts = tuple(part for part in text.split(",") if part)
        unknown = [part for part in parts if part not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"cannot skip {', '.join(unknown)}: the parts that can be skipped are "
                                             f"{', '.join(choices)}")  # fmt: skip
        return parts

    parse.__name__ = f"comma-separated parts of {', '.join(choices)}"
    return parse
