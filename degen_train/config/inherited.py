"""A branch's config starts from its parent's: the parent's own command-line overrides (RUN/overrides.json), then
the branch's. Read before Hydra composes, so it lives with the config, below the run that branches.

The parent folder may be anyone's: its overrides are read as data by the one reader of handed-over files
(handed_over.py), and only the settings it keeps, written out again from their checked values, reach Hydra. Where the
branch writes, logs and uploads, and how it is launched, are never the parent's (one line names what was left out).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from degen_train.config.handed_over import read_overrides_file

log = logging.getLogger("degen_train")
# Besides where a run writes, logs, uploads and is launched: the parent's own parent is not the branch's.
NOT_INHERITED = ("branch_from",)


def branch_parent(overrides: list[str]) -> str | None:
    """RUN@STEP when ``overrides`` name one parent (``branch_from=RUN@STEP``); None for no branch or a sweep of them."""
    branch = [o.split("=", 1)[1].strip("'\"") for o in overrides if o.lstrip("+~").startswith("branch_from=")]
    if len(branch) != 1 or "," in branch[0] or "@" not in branch[0]:
        return None
    return branch[0]


def inherited_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` with the branch's parent's own overrides first, when they name one ``branch_from=RUN@STEP``
    (a sweep over several parents, or no recorded overrides: as given). Raises ValueError naming the parent's file
    and entry when it holds a setting the house does not allow (a ``_target_`` it never builds there, an
    interpolation, an unknown key, a value of the wrong type)."""
    branch = branch_parent(overrides)
    if branch is None:
        return list(overrides)
    recorded = Path(branch.rpartition("@")[0]).expanduser() / "overrides.json"
    if not os.path.lexists(recorded):  # a link, FIFO or device there is refused by the reader, naming it
        return list(overrides)
    advice = (f" (branch_from={branch}: a parent's recorded overrides are read as data; remove that entry from "
              f"{recorded}, or branch from a run you trust)")  # fmt: skip
    reading = read_overrides_file(recorded, also_not_read=NOT_INHERITED, advice=advice)
    if reading.dropped_line():
        log.warning("branch_from=%s: %s", branch, reading.dropped_line())
    return [*(setting.override() for setting in reading.settings), *overrides]
