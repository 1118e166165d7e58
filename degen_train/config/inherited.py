"""A branch's config starts from its parent's: the parent's own command-line overrides (RUN/overrides.json), then
the branch's. Read before Hydra composes, so it lives with the config, below the run that branches."""

from __future__ import annotations

import json
from pathlib import Path

# Parent overrides a branch does not inherit: where and how the parent was launched, published, or resumed.
NOT_INHERITED = ("hydra.", "ckpt_path", "branch_from", "run_dir", "push_to_hub.")


def inherited_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` with the branch's parent's own overrides first, when they name one ``branch_from=RUN@STEP``
    (a sweep over several parents, or no recorded overrides: as given). A parent's override that would build code
    (``_target_``) is refused: the parent's record is data."""
    branch = [o.split("=", 1)[1].strip("'\"") for o in overrides if o.lstrip("+~").startswith("branch_from=")]
    if len(branch) != 1 or "," in branch[0] or "@" not in branch[0]:
        return list(overrides)
    parent = Path(branch[0].rpartition("@")[0]).expanduser()
    recorded = parent / "overrides.json"
    if not recorded.is_file():
        return list(overrides)
    try:
        parent_overrides = [str(o) for o in json.loads(recorded.read_text())]
    except (OSError, ValueError) as error:
        raise ValueError(f"branch_from={branch[0]}: {recorded} is not readable ({error})") from None
    kept = []
    for override in parent_overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if "_target_" in key:
            raise ValueError(f"branch_from={branch[0]}: {recorded} holds {override!r}, which would build code; a "
                             f"parent's overrides may only set values")  # fmt: skip
        if not key.startswith(NOT_INHERITED):
            kept.append(override)
    return [*kept, *overrides]
