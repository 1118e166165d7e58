"""Load HF weights quietly and say in one plain line what did not come from the checkpoint.

transformers 5 prints a coloured "LOAD REPORT" table and a progress bar on every load; in a batch log the colour
codes are raw bytes and the table buries the one fact that matters (which weights start untrained).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from transformers.utils import logging as transformers_logging

log = logging.getLogger("degen_train")


def grouped(keys: Iterable[str], depth: int = 2) -> str:
    """Weight names grouped by their first ``depth`` parts: 'cls.predictions (6), pooler.dense (2)'."""
    counts: dict[str, int] = {}
    for key in sorted(keys):
        prefix = ".".join(key.split(".")[:depth])
        counts[prefix] = counts.get(prefix, 0) + 1
    return ", ".join(f"{prefix} ({count})" for prefix, count in counts.items())


def load_pretrained(loader: Any, source: str, what: str, *, missing: list[str] | None = None, **kwargs: Any) -> Any:
    """``loader.from_pretrained(source, **kwargs)`` without transformers' report and bars; logs
    '<what>: weights from SOURCE; newly initialised: ...; not used: ...' when something did not load. The names of
    the newly initialised weights are appended to ``missing`` when a list is given."""
    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        model, info = loader.from_pretrained(source, output_loading_info=True, **kwargs)
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    if missing is not None:
        missing.extend(info.get("missing_keys") or [])
    parts = [f"{what}: weights from {source}"]
    if info.get("missing_keys"):
        parts.append(f"newly initialised: {grouped(info['missing_keys'])}")
    if info.get("unexpected_keys"):
        parts.append(f"in the checkpoint but not used: {grouped(info['unexpected_keys'])}")
    if info.get("mismatched_keys"):
        mismatched = (k[0] if isinstance(k, tuple) else k for k in info["mismatched_keys"])
        parts.append(f"shape differs, re-initialised: {grouped(mismatched)}")
    log.info("; ".join(parts))
    return model
