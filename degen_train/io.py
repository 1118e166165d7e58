"""Writes that never leave a half-written file or folder behind."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_directory(target: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a staging folder beside ``target``; it becomes ``target`` only if the block succeeds.

    replace=False keeps an existing ``target`` (a cache another process filled first);
    replace=True swaps the new folder in and only then deletes the old one.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if target.exists():
        if not replace:
            shutil.rmtree(staging, ignore_errors=True)
            return
        retired = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, retired)
        os.replace(staging, target)
        shutil.rmtree(retired, ignore_errors=True)
        return
    os.replace(staging, target)


def atomic_write_json(path: Path, payload: Any) -> None:
    """Write JSON to a temporary file in the same folder, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump(payload, stream, indent=2, sort_keys=True, default=str)
            stream.write("\n")
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


def resolve_pretrained(name: str) -> str:
    """A degen_train run directory means its ``hf/`` export; other paths and hub names pass through."""
    path = Path(str(name)).expanduser()
    if (path / "hf" / "config.json").exists():
        return str(path / "hf")
    return str(path) if path.exists() else str(name)
