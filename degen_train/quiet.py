"""Silence what our users should not have to read: advertisements and known, harmless deprecation notes."""

from __future__ import annotations

import logging
import warnings

# (logger name, message start) of log records that say nothing about the run.
DROPPED_RECORDS = (("lightning.pytorch.utilities.rank_zero", "💡 Tip:"),)
# Deprecations raised inside libraries we pin, about code we do not own.
IGNORED_WARNINGS = (r".*isinstance\(treespec, LeafSpec\)` is deprecated",)


class _DropMessages(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefix)


_silenced = False


def silence_known_noise() -> None:
    """Install the filters once per process (every train() call asks)."""
    global _silenced
    if _silenced:
        return
    _silenced = True
    for name, prefix in DROPPED_RECORDS:
        logging.getLogger(name).addFilter(_DropMessages(prefix))
    for pattern in IGNORED_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
