"""Nested settings as dotted keys: ``{"model": {"hidden_size": 64}}`` → ``{"model.hidden_size": 64}``."""

from __future__ import annotations

from typing import Any


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of ``tree`` under its dotted key; an empty mapping is a leaf of its own (``{}``)."""
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): tree}
