"""Where a run came from: config, code, library versions, data and tokenizer fingerprints, world size, seed.

Written into every checkpoint, summary.json and the hf/ export (hf/degen_train.json), so that any of
them says how to make it again (``degen-train --reproduce RUN``).
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

from degen_train.core.own_runs import new_run_id
from degen_train.core.package_dir import PACKAGE_DIR
from degen_train.data.tokenizer import tokenizer_identity

LIBRARIES = ("degen_train", "torch", "transformers", "lightning", "datasets", "tokenizers")


@functools.cache
def code_version(repo: Path = PACKAGE_DIR) -> dict[str, Any]:
    """The git commit of the code and whether the work tree differs from it (None outside a checkout)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {"git_sha": sha, "dirty": bool(status) if status is not None else None}


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def run_provenance(
    config: dict[str, Any], *, corpus: dict[str, Any], tokenizer: Any, world_size: int
) -> dict[str, Any]:
    """The record of one run: its resolved config and everything outside the config that shaped it."""
    return {
        "config": config,
        "code": code_version(),
        "versions": library_versions(),
        "corpus": corpus,
        "tokenizer_sha": tokenizer_identity(tokenizer),
        "vocab_size": len(tokenizer),
        "world_size": world_size,
        "seed": config.get("seed"),
        "run_id": new_run_id(),  # this segment's; listed in the user's own-runs registry (own_runs.py)
    }
