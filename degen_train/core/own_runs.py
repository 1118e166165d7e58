"""The runs this user trained on this machine, for tools that treat other folders as data from elsewhere.

degen-report analyses a run with the corpus its config names only when the run is listed here (or with
--trust-config), and a branch or ``--reproduce`` carries an own run's protections as the user set them: a
handed-over folder, never listed, cannot make a command read a file of its author's choosing. Each run segment
appends (its folder, its run id, the sha256 of every file a door reads from it: config.yaml, overrides.json, and a
random token written once into the folder when it was created) to a per-user file. A folder is this user's own only
while every one of those files is the one registered: a folder recreated at the same path (another token), or a
config.yaml or overrides.json edited or swapped afterwards, is a stranger's. Each file is read through the one
reader of handed-over files (core/handed_files: plain, bounded, never through a link, a FIFO or a device), so the
trust question opens nothing the reader would refuse.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import uuid
from pathlib import Path

from degen_train.core.handed_files import RECORD_BYTES, HandedOverFileError, json_record, plain_file_bytes

log = logging.getLogger("degen_train")
RECORDED = "config.yaml"  # the file whose settings a tool reads from a run
VOUCHED = ("config.yaml", "overrides.json", "run_token")  # every file a door reads from a run, and the folder's token
TOKEN = "run_token"  # written once into a run folder, at its creation: a recreated folder has another one
CONFIG_BYTES = RECORD_BYTES  # a resolved config.yaml, like any record, within 16 MiB


def registry() -> Path:
    """$DEGEN_TRAIN_STATE/own_runs.jsonl, else ~/.local/state/degen_train/own_runs.jsonl (per user)."""
    folder = os.environ.get("DEGEN_TRAIN_STATE") or Path.home() / ".local" / "state" / "degen_train"
    return Path(folder) / "own_runs.jsonl"


def new_run_id() -> str:
    return uuid.uuid4().hex


def ensure_token(run_dir: Path) -> None:
    """RUN/run_token: a random token, written once when the folder is first a run's (kept across resumes)."""
    path = Path(run_dir) / TOKEN
    if os.path.lexists(path):
        return
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(16) + "\n")


def digests(run_dir: Path) -> dict[str, str | None]:
    """{file: sha256 of its bytes, or None where it is absent} for every VOUCHED file, each read by the one reader
    of handed-over files; HandedOverFileError where one is a link, a FIFO, a device or too large."""
    found: dict[str, str | None] = {}
    for name in VOUCHED:
        path = Path(run_dir) / name
        if not os.path.lexists(path):
            found[name] = None
            continue
        data = plain_file_bytes(path, limit=CONFIG_BYTES, what="run file", within=Path(run_dir))
        found[name] = hashlib.sha256(data).hexdigest()
    return found


def remember(run_dir: Path, run_id: str) -> None:
    """List ``run_dir`` (with the digests of the files it has just written and its token) as this user's; a registry
    that cannot be written only costs the trust (logged)."""
    path = registry()
    try:
        ensure_token(run_dir)
        entry = {"path": str(Path(run_dir).resolve()), "run_id": run_id, "digests": digests(run_dir)}
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
    except (OSError, HandedOverFileError) as error:
        log.warning("could not list %s among your runs (%s): degen-report will need --trust-config for it", run_dir,
                    error)  # fmt: skip


def is_own(run_dir: Path) -> bool:
    """Whether this user's registry lists ``run_dir`` with every vouched file it holds now (its token included: a
    folder without one is never own) and, once it has one, the run id its summary.json records. A file the reader
    refuses (a link, a FIFO, a device, too large) makes the folder a stranger's; the door's reader then says why."""
    run_dir = Path(run_dir)
    try:
        held = digests(run_dir)
        lines = registry().read_text().splitlines()
    except (OSError, HandedOverFileError):
        return False
    if held.get(TOKEN) is None:
        return False
    run_id = _summary_run_id(run_dir)
    path = str(run_dir.resolve())
    for entry in map(_entry, lines):
        if (isinstance(entry, dict) and entry.get("path") == path and entry.get("digests") == held
                and (run_id is None or entry.get("run_id") == run_id)):  # fmt: skip
            return True
    return False


def _summary_run_id(run_dir: Path) -> str | None:
    try:
        return json_record(run_dir / "summary.json", what="run summary", within=run_dir)["provenance"]["run_id"]
    except (OSError, ValueError, KeyError, TypeError):  # HandedOverFileError is a ValueError
        return None


def _entry(line: str) -> dict | None:
    try:
        return json.loads(line)
    except ValueError:
        return None
