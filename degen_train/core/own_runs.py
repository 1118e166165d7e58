"""The runs this user trained on this machine, for tools that treat other folders as data from elsewhere.

degen-report analyses a run with the corpus its config names only when the run is listed here (or with
--trust-config): a handed-over folder, never listed, cannot make it read a file of its author's choosing. Each run
segment appends (its folder, its run id, the sha256 of the config.yaml it wrote) to a per-user file. A folder is this
user's own only while its config.yaml is the one registered: a folder copied or replaced at the same path, or a
config.yaml edited or swapped afterwards, is not taken for the listed run.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

from degen_train.core.handed_files import json_record
from degen_train.core.io import file_sha256

log = logging.getLogger("degen_train")
RECORDED = "config.yaml"  # the file whose settings a tool reads from a run: it is what the registry vouches for


def registry() -> Path:
    """$DEGEN_TRAIN_STATE/own_runs.jsonl, else ~/.local/state/degen_train/own_runs.jsonl (per user)."""
    folder = os.environ.get("DEGEN_TRAIN_STATE") or Path.home() / ".local" / "state" / "degen_train"
    return Path(folder) / "own_runs.jsonl"


def new_run_id() -> str:
    return uuid.uuid4().hex


def remember(run_dir: Path, run_id: str) -> None:
    """List ``run_dir`` (with the hash of the config.yaml it has just written) as this user's; a registry that cannot
    be written only costs the report's trust (logged)."""
    path = registry()
    entry = {"path": str(Path(run_dir).resolve()), "run_id": run_id, "config_sha256": file_sha256(run_dir / RECORDED)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
    except OSError as error:
        log.warning("could not list %s among your runs (%s): degen-report will need --trust-config for it", run_dir,
                    error)  # fmt: skip


def is_own(run_dir: Path) -> bool:
    """Whether this user's registry lists ``run_dir`` with the config.yaml it holds now (and, once it has one, the run
    id its summary.json records)."""
    run_dir = Path(run_dir)
    try:
        config_sha = file_sha256(run_dir / RECORDED)
        lines = registry().read_text().splitlines()
    except OSError:
        return False
    run_id = _summary_run_id(run_dir)
    path = str(run_dir.resolve())
    for entry in map(_entry, lines):
        if (isinstance(entry, dict) and entry.get("path") == path and entry.get("config_sha256") == config_sha
                and (run_id is None or entry.get("run_id") == run_id)):  # fmt: skip
            return True
    return False


def _summary_run_id(run_dir: Path) -> str | None:
    try:
        return json_record(run_dir / "summary.json", what="run summary")["provenance"]["run_id"]
    except (OSError, ValueError, KeyError, TypeError):  # HandedOverFileError is a ValueError
        return None


def _entry(line: str) -> dict | None:
    try:
        return json.loads(line)
    except ValueError:
        return None
