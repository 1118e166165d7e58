"""Silence what our users should not have to read: advertisements and known, harmless deprecation notes."""

from __future__ import annotations

import logging
import os
import sys
import warnings

# (logger name, message start) of log records that say nothing about the run.
# Lightning's lines about accelerators this machine does not have ("GPU available: False, used: False") go; the
# line about the one in use stays.
DROPPED_RECORDS = (
    ("lightning.pytorch.utilities.rank_zero", "💡 Tip:"),
    ("lightning.pytorch.utilities.rank_zero", "GPU available: False"),
    ("lightning.pytorch.utilities.rank_zero", "TPU available: False"),
    ("lightning.pytorch.utilities.rank_zero", "HPU available: False"),
)
# Deprecations raised inside libraries we pin, about code we do not own; and Lightning's "checkpoint directory
# exists and is not empty", which every resume triggers by design (a fresh run into another run's folder is
# refused by runlock before Lightning gets there); and "the dirpath has changed", which every branch and every
# copied run triggers (RunCheckpoint keeps its own files by step, not Lightning's best-k record).
IGNORED_WARNINGS = (
    r".*isinstance\(treespec, LeafSpec\)` is deprecated",
    r"Checkpoint directory .* exists and is not empty",
    r"The dirpath has changed from",
)


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
    if not sys.stderr.isatty():  # datasets' Map/Filter bars are carriage-return redraws in a batch log
        if "datasets" in sys.modules:
            sys.modules["datasets"].disable_progress_bars()
        else:  # read by datasets when it loads: the command line is answered before it does
            os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
