"""Checkpoint files that are written whole or not at all, verified before use, and never run code.

Every checkpoint ``NAME.ckpt`` is staged in its own folder, fsynced and renamed into place; then a
sidecar ``NAME.ckpt.meta.json`` records its size, sha256 and step. A file whose sidecar agrees is
*verified*: ``ckpt_path=last`` takes the newest verified checkpoint of a run, so a kill at any moment
leaves a run that resumes. Loads are weights-only: a pickle that asks for any Python object other
than tensors and plain containers is refused before it can run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io import CheckpointIO

from degen_train.io import file_sha256, fsync_directory, staged_file

log = logging.getLogger("degen_train")
SIDECAR_SUFFIX = ".meta.json"


class CheckpointError(ValueError):
    """A user-given or found checkpoint cannot be used; the message says why and what to do."""


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


class _HashingWriter:
    """A write-only file object that hashes what passes through it (torch.save writes sequentially)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.digest, self.size = stream, hashlib.sha256(), 0
        self.error: OSError | None = None  # torch.save reports a failed write as a RuntimeError: keep the cause

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        try:
            return self.stream.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.stream.flush()


def save_checkpoint_file(checkpoint: dict[str, Any], path: Path) -> None:
    """Write ``checkpoint`` to ``path`` atomically (same-folder staging, fsync, rename), then its sidecar."""
    path = Path(path)
    sidecar_of(path).unlink(missing_ok=True)  # an old sidecar must never vouch for a new file
    writer: _HashingWriter | None = None
    try:
        with staged_file(path, "wb") as stream:
            writer = _HashingWriter(stream)
            torch.save(checkpoint, writer)
    except (OSError, RuntimeError) as error:
        cause = writer.error if writer is not None and writer.error is not None else error
        if not isinstance(cause, OSError):
            raise
        raise OSError(
            cause.errno,
            f"could not write checkpoint {path}: {cause.strerror or cause}; nothing was written "
            f"under that name and earlier checkpoints are untouched",
        ) from error
    meta = {"size": writer.size, "sha256": writer.digest.hexdigest(), "global_step": checkpoint.get("global_step")}
    with staged_file(sidecar_of(path), "w") as stream:
        json.dump(meta, stream)


def recorded_step(path: Path) -> int | None:
    """The step ``path``'s sidecar records, unverified (cheap: for ordering, not for trusting)."""
    try:
        return int(json.loads(sidecar_of(path).read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def verified_step(path: Path) -> int | None:
    """The step recorded in ``path``'s sidecar if the file's size and hash agree with it, else None."""
    try:
        meta = json.loads(sidecar_of(path).read_text())
        if path.stat().st_size != meta["size"] or file_sha256(path) != meta["sha256"]:
            return None
        return int(meta["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_checkpoint_file(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """torch.load, weights only, with a message that says what is wrong with a bad file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist or is not a file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes): its write was cut short; use an earlier one")
    try:
        loaded = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"(?:Unsupported global|GLOBAL) ([\w.]+)", str(error))
        if found is None:  # not a refusal: the bytes are not a pickle at all
            raise CheckpointError(
                f"checkpoint {path} is not a readable PyTorch checkpoint ({str(error).splitlines()[0][:200]}): "
                f"it is torn or not a checkpoint; use an earlier one"
            ) from None
        raise CheckpointError(
            f"refused to load {path}: it holds a Python object that is not a tensor or plain container "
            f"({found.group(1)}). Checkpoints are loaded weights-only, so a file can never run code here; "
            f"degen_train's own checkpoints hold only weights and plain values"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        raise CheckpointError(
            f"checkpoint {path} is not a readable PyTorch checkpoint ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:200]}): it is torn or not a checkpoint; use an earlier one"
        ) from None
    if not isinstance(loaded, dict) or "state_dict" not in loaded:
        raise CheckpointError(f"checkpoint {path} is not a Lightning checkpoint (no 'state_dict' entry)")
    return loaded


def newest_checkpoint(folder: Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint in ``folder`` that can be resumed from, and notes on the ones passed over.

    Verified files (sidecar agrees) come first, newest step first; a file without a valid sidecar (an
    older run, or a kill between the rename and the sidecar) is used only if it loads.
    """
    files = sorted(folder.glob("*.ckpt")) if folder.is_dir() else []
    # Newest recorded step first (last.ckpt first among equals); hash only until one verifies.
    ordered = sorted(files, key=lambda p: (_or(recorded_step(p), -1), p.name == "last.ckpt"), reverse=True)
    notes: list[str] = []
    for path in ordered:
        if verified_step(path) is not None:
            return path, notes
        notes.append(f"{path.name}: no sidecar, or its size or hash disagrees")
    for path in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            load_checkpoint_file(path)
        except CheckpointError as error:
            notes.append(str(error))
            continue
        return path, notes
    return None, notes


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


class AtomicCheckpointIO(CheckpointIO):
    """Lightning's checkpoint I/O with our atomic writes, sidecars and weights-only loads."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        save_checkpoint_file(checkpoint, Path(path))

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> dict:
        return load_checkpoint_file(Path(path), map_location=map_location or "cpu")

    def remove_checkpoint(self, path: Any) -> None:
        remove_checkpoint_file(Path(path))


def remove_checkpoint_file(path: Path) -> None:
    sidecar_of(path).unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    fsync_directory(path.parent)
