"""A branch's config starts from its parent's: the parent's own command-line overrides (RUN/overrides.json), then
the branch's. Read before Hydra composes, so it lives with the config, below the run that branches.

The parent folder may be anyone's: its overrides are read as data by the one reader of handed-over files
(handed_over.py), each by the role its key declares (roles.py), and only the settings it keeps, written out again from
their checked values, reach Hydra. Where the branch writes, logs and uploads, and how it is launched, are never the
parent's (one line names what was left out). Of the inputs the parent read, the branch inherits its data: the corpus
its checkpoint was trained on (the branch's resume check refuses any other) and its own tokenizer (RUN/tokenizer,
set by run/branching.py); any other input (an STS file, a text to continue, a task folder) is the user's to give. A
parent this user trained here (listed in their own runs) passes its inputs on.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from degen_train.config.handed_over import Door, read_overrides_file
from degen_train.core.handed_files import printable
from degen_train.core.own_runs import is_own

log = logging.getLogger("degen_train")
# What every branch decides itself besides what its command line gives: its parent (branch_from) and the tokenizer,
# the parent's own RUN/tokenizer (run/branching.py).
BRANCH_DECIDES = ("branch_from", "data.tokenizer.path")
INHERITED_INPUTS = ("data.",)  # the parent's corpus: what its checkpoint was trained on


def branch_parent(overrides: list[str]) -> str | None:
    """RUN@STEP when ``overrides`` name one parent (``branch_from=RUN@STEP``); None for no branch or a sweep of them."""
    branch = [o.split("=", 1)[1].strip("'\"") for o in overrides if o.lstrip("+~").startswith("branch_from=")]
    if len(branch) != 1 or "," in branch[0] or "@" not in branch[0]:
        return None
    return branch[0]


def given_keys(overrides: list[str]) -> dict[str, Any]:
    """{key: value} of what a command line's overrides set (groups as dotted keys; a value Hydra's parser cannot read
    as one, a sweep's say, as its text): a handed-over file's input at one of them is the user's."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    keys: dict[str, Any] = {}
    for override in overrides:
        key, _, text = override.partition("=")
        key = key.lstrip("+~").replace("/", ".")
        if not key or override.startswith("-"):
            continue
        try:
            keys[key] = parser.parse_overrides([override])[0].value()
        except (HydraException, RecursionError):
            keys[key] = text
    return keys


def inherited_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` with the branch's parent's own overrides first, when they name one ``branch_from=RUN@STEP``
    (a sweep over several parents, or no recorded overrides: as given). Raises ValueError naming the parent's file
    and entry when it holds a setting the house does not allow (a ``_target_`` it never builds there, an
    interpolation, an unknown key, a value of the wrong type, an input or code, a looser protection)."""
    branch = branch_parent(overrides)
    if branch is None:
        return list(overrides)
    parent = Path(branch.rpartition("@")[0]).expanduser()
    recorded = parent / "overrides.json"
    if not os.path.lexists(recorded):  # a link, FIFO or device there is refused by the reader, naming it
        return list(overrides)
    advice = (f" (branch_from={branch}: a parent's recorded overrides are read as data; remove that entry from "
              f"{recorded}, or branch from a run you trust)")  # fmt: skip
    given = given_keys(overrides) | dict.fromkeys(BRANCH_DECIDES)
    door = Door(given=given, inherit=INHERITED_INPUTS, trusted=is_own(parent), advice=advice)
    reading = read_overrides_file(recorded, door=door)
    if reading.dropped_line():
        log.warning("branch_from=%s: %s", branch, reading.dropped_line())
    if reading.inherited:
        whose = ("your own run (listed in your runs)" if door.trusted else
                 "the parent's data, as its checkpoint was trained on it")  # fmt: skip
        shown = printable(", ".join(f"{key}={value}" for key, value in reading.inherited.items()), 400)
        log.warning("branch_from=%s: inputs inherited from %s: %s", branch, whose, shown)
    return [*(setting.override() for setting in reading.settings), *overrides]
