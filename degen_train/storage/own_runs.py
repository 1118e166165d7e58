"""The runs this user trained on this machine, for tools that treat other folders as data from elsewhere.

degen-report analyses a run with the corpus its config names only when the run is listed here (or with
--trust-config): a handed-over folder, never listed, cannot make it read a file of its author's choosing. Each run
segment appends (its folder, its run id) to a per-user file; the id is also in the run's provenance, so a folder
copied or replaced at the same path is not taken for the listed one.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

log = logging.getLogger("degen_train")


def registry() -> Path:
    """$DEGEN_TRAIN_STATE/own_runs.jsonl, else ~/.local/state/degen_train/own_runs.jsonl (per user)."""
    folder = os.environ.get("DEGEN_TRAIN_STATE") or Path.home() / ".local" / "state" / "degen_train"
    return Path(folder) / "own_runs.jsonl"


def new_run_id() -> str:
    return uuid.uuid4().hex


def remember(run_dir: Path, run_id: str) -> None:
    """List ``run_dir`` as this user's; a registry that cannot be written only costs the report's trust (logged)."""
    path = registry()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps({"path": str(Path(run_dir).resolve()), "run_id": run_id}) + "\n")
    except OSError as error:
        log.warning("could not list %s among your runs (%s): degen-report will need --trust-config for it", run_dir,
                    error)  # fmt: skip


def is_own(run_dir: Path) -> bool:
    """Whether this user's registry lists ``run_dir`` with the run id its summary.json records."""
    try:
        run_id = json.loads((Path(run_dir) / "summary.json").read_text())["provenance"]["run_id"]
        lines = registry().read_text().splitlines()
    except (OSError, ValueError, KeyError, TypeError):
        return False
    entry = {"path": str(Path(run_dir).resolve()), "run_id": run_id}
    return any(_entry(line) == entry for line in lines)


def _entry(line: str) -> dict | None:
    try:
        return json.loads(line)
    except ValueError:
        return None
