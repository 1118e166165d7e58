"""Checkpoints that are written whole or not at all, verified before use, and never run code.

Every checkpoint ``NAME.ckpt`` is staged in its own folder, fsynced and renamed into place; then a
sidecar ``NAME.ckpt.meta.json`` records its size, sha256 and step. A file whose sidecar agrees is
*verified*: ``ckpt_path=last`` takes the newest verified checkpoint of a run, so a kill at any moment
leaves a run that resumes. Loads are weights-only: a pickle that asks for any Python object other
than tensors and plain containers is refused before it can run.

A *sharded* checkpoint (FSDP2, strategy.sharded_checkpoint=true) is a folder ``NAME.ckpt/``: the
tensors as torch.distributed.checkpoint shards, the rest in ``meta.pt``. It is staged as a whole folder
and renamed the same way; its sidecar records every file's size and sha256. Any run can resume from it:
FSDP2 reads its shards in place, any other strategy gets it gathered into the one-file layout.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io import CheckpointIO
from lightning.pytorch.plugins.io import AsyncCheckpointIO

from degen_train.core.handed_files import json_record
from degen_train.core.io import file_sha256, fsync_directory, staged_file
from degen_train.storage.sharded_io import UnsafeCheckpointError, gather_sharded, read_index

log = logging.getLogger("degen_train")
SIDECAR_SUFFIX = ".meta.json"
SHARDED_META = "meta.pt"  # Lightning's name for the non-tensor part of a distributed checkpoint


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
    retired = path.with_name(f".{path.name}.old")
    if path.is_dir():  # a sharded checkpoint of that name (a run resumed without FSDP2): set aside, not lost
        shutil.rmtree(retired, ignore_errors=True)
        path.rename(retired)
    writer: _HashingWriter | None = None
    try:
        with staged_file(path, "wb") as stream:
            writer = _HashingWriter(stream)
            torch.save(checkpoint, writer)
    except (OSError, RuntimeError) as error:
        if retired.is_dir() and not path.exists():
            retired.rename(path)
        cause = writer.error if writer is not None and writer.error is not None else error
        if not isinstance(cause, OSError):
            raise
        raise OSError(
            cause.errno,
            f"could not write checkpoint {path}: {cause.strerror or cause}; nothing was written under that name. "
            f"{whole_checkpoints(path.parent)}",
        ) from error
    shutil.rmtree(retired, ignore_errors=True)
    meta = {"size": writer.size, "sha256": writer.digest.hexdigest(), "global_step": checkpoint.get("global_step")}
    with staged_file(sidecar_of(path), "w") as stream:
        json.dump(meta, stream)


def whole_checkpoints(folder: Path) -> str:
    """Which checkpoints in ``folder`` are whole (their sidecar's size and hash agree), newest first, and how to go on
    from them: said when a write failed, so that nobody trusts a file that is not there."""
    files = sorted(folder.glob("*.ckpt")) if folder.is_dir() else []
    whole = sorted(((step, p.name) for p in files if (step := verified_step(p)) is not None), reverse=True)
    if not whole:
        return f"No whole checkpoint is in {folder}: a resume would start from step 0"
    listed = ", ".join(f"{name} (step {step})" for step, name in whole)
    return f"Whole checkpoints in {folder}: {listed}; ckpt_path=auto resumes from the newest once the cause is fixed"


MAX_STEP = 2**53  # far beyond any run's updates, and every int below it is exact as a JSON number


def sidecar_step(value: object) -> int | None:
    """A sidecar's ``global_step`` as a step count: a whole number in [0, MAX_STEP], else None (1e400 reads as an
    infinity, which int() turns into an OverflowError on every resume of the folder)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not (0 <= value <= MAX_STEP) or value != int(value):
        return None
    return int(value)


def recorded_step(path: Path) -> int | None:
    """The step ``path``'s sidecar records, unverified (cheap: for ordering, not for trusting)."""
    try:
        return sidecar_step(json_record(sidecar_of(path), what="checkpoint sidecar")["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def verified_step(path: Path) -> int | None:
    """The step recorded in ``path``'s sidecar if the file's (or every shard's) size and hash agree, else None."""
    try:
        meta = json_record(sidecar_of(path), what="checkpoint sidecar")  # a plain file, bounded, never a link
        if path.is_dir():
            files = {f.name for f in path.iterdir()}
            if files != set(meta["files"]):
                return None
            for name, (size, digest) in meta["files"].items():
                if (path / name).stat().st_size != size or file_sha256(path / name) != digest:
                    return None
        elif path.stat().st_size != meta["size"] or file_sha256(path) != meta["sha256"]:
            return None
        return sidecar_step(meta["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def sharded_staging(path: Path) -> Path:
    """Where every process writes its shards of ``path`` before rank 0 renames the folder into place."""
    return path.with_name(f".{path.name}.staging")


def finish_sharded_checkpoint(staging: Path, path: Path, rest: dict[str, Any]) -> None:
    """Rank 0, after every process wrote its shards into ``staging``: add ``meta.pt`` (the non-tensor state),
    fsync, swap the folder in for ``path`` (the old one removed only after), then write the sidecar."""
    sidecar_of(path).unlink(missing_ok=True)  # an old sidecar must never vouch for a new folder
    with staged_file(staging / SHARDED_META, "wb") as stream:
        torch.save(rest, stream)
    files = {}
    for shard in sorted(staging.iterdir()):
        with open(shard, "rb") as stream:
            os.fsync(stream.fileno())
        files[shard.name] = [shard.stat().st_size, file_sha256(shard)]
    fsync_directory(staging)
    retired = path.with_name(f".{path.name}.old")
    shutil.rmtree(retired, ignore_errors=True)
    if path.is_dir():
        path.rename(retired)
    elif path.exists():
        path.unlink()
    staging.rename(path)
    fsync_directory(path.parent)
    shutil.rmtree(retired, ignore_errors=True)
    meta = {"files": files, "size": sum(size for size, _ in files.values()), "global_step": rest.get("global_step")}
    with staged_file(sidecar_of(path), "w") as stream:
        json.dump(meta, stream)


def gather_sharded_checkpoint(path: Path) -> dict[str, Any]:
    """A sharded checkpoint folder as one in-memory checkpoint in the one-file layout (whole tensors, optimizer
    state keyed by position), for a run that does not shard, or for degen-convert. One process, no group."""
    rest = checkpoint_header(path)  # refuses a folder without its index, meta.pt or a shard; the index is checked
    try:
        tensors = gather_sharded(path)
    except UnsafeCheckpointError as error:
        raise _refusal(path, error) from None
    except (OSError, RuntimeError, ValueError) as error:
        raise CheckpointError(
            f"checkpoint {path} could not be gathered ({type(error).__name__}: {str(error).splitlines()[0][:200]}):"
            f" a shard file is missing or torn (files there: {', '.join(sorted(f.name for f in path.iterdir()))})"
        ) from None
    optimizers = sorted((k for k in tensors if k.startswith("optimizer_")), key=lambda k: int(k.split("_")[1]))
    return {
        **rest,
        "state_dict": tensors["state_dict"],
        "optimizer_states": [by_position(tensors[k]) for k in optimizers],
    }


def load_checkpoint_file(path: Path, map_location: Any = "cpu", *, require_state_dict: bool = True) -> dict[str, Any]:
    """torch.load, weights only, with a message that says what is wrong with a bad file; a sharded checkpoint
    folder is gathered into the one-file layout."""
    path = Path(path)
    if path.is_dir() and require_state_dict:
        return gather_sharded_checkpoint(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist or is not a file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes): its write was cut short; use an earlier one")
    try:
        loaded = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        raise _refusal(path, error) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        raise CheckpointError(
            f"checkpoint {path} is not a readable PyTorch checkpoint ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:200]}): it is torn or not a checkpoint; use an earlier one"
        ) from None
    if not isinstance(loaded, dict) or ("state_dict" not in loaded and require_state_dict):
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
        claimed = verified_step(path)
        if claimed is None:
            notes.append(f"{path.name}: no sidecar, or its size or hash disagrees")
            continue
        try:
            held = int(checkpoint_header(path).get("global_step", -1))
        except CheckpointError as error:  # a refused pickle, a torn file: said as such, never as a stale sidecar
            notes.append(f"{path.name}: passed over: {error}")
            continue
        except (OSError, ValueError, TypeError):
            held = None
        if held == claimed:
            return path, notes
        notes.append(f"{path.name}: its sidecar claims step {claimed}, the file holds step {held} (an edited or stale "
                     f"sidecar): passed over")  # fmt: skip
    for path in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            load_checkpoint_file(path)
        except CheckpointError as error:
            notes.append(str(error))
            continue
        return path, notes
    return None, notes


def refuse_lightning_hpc_checkpoints(run_dir: Path) -> None:
    """Refuse a run folder holding Lightning's SLURM-requeue checkpoints (``hpc_ckpt_N.ckpt``), naming them.

    Lightning restores such a file in any ``validate()`` under SLURM, over the weights just trained, so the export
    would hold them; and they carry no sidecar. degen_train's own requeue writes ``checkpoints/last.ckpt`` instead.
    """
    stale = sorted(run_dir.glob("hpc_ckpt_*.ckpt")) if run_dir.is_dir() else []
    if stale:
        last = run_dir / "checkpoints" / "last.ckpt"
        step = verified_step(last) if last.exists() else None
        resume = f"{last} (step {step})" if step is not None else f"the newest checkpoint in {last.parent}"
        raise CheckpointError(
            f"{', '.join(str(p) for p in stale)}: written by Lightning's SLURM auto-requeue outside the run's "
            f"checkpoints/, unverified, and restored over the final weights by the last validation. Move it out of "
            f"{run_dir} (or delete it); ckpt_path=auto then resumes from {resume}"
        )


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


class CheckpointWriteFailed(OSError):
    """A checkpoint write on the writer thread failed; the message names the file, the step and the whole ones."""


class BackgroundCheckpointIO(AsyncCheckpointIO):
    """AtomicCheckpointIO on a writer thread (Lightning's AsyncCheckpointIO): the training thread takes a copy of
    the state (tensor clones, on their device) and goes on; serialising, the sha256 sidecar, the fsyncs and the rename
    run beside training. A write is still whole or absent. A failed write is logged at once from the writer thread,
    naming its file, and ``raise_if_failed`` (called by the checkpoint callback after every step) stops the run at the
    next step with that file and the checkpoints that are whole; ``wait()`` returns once every write handed over is on
    disk (raising the same), for what must follow a checkpoint (a preemption's exit)."""

    def __init__(self) -> None:
        super().__init__(AtomicCheckpointIO())
        self.failure: CheckpointWriteFailed | None = None
        self.a_write_failed = False  # sticky: no checkpoint is deleted for a newer one once a write has failed
        self.raised = False  # the first failure stops the run; a later one (a write handed over before it was known,
        # failing as the run stops) is logged and never replaces it in the raised error

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        from lightning_utilities.core.apply_func import apply_to_collection

        self._ensure_setup()
        copied = apply_to_collection(checkpoint, torch.Tensor, lambda t: t.detach().clone())  # on the caller's thread
        step = checkpoint.get("global_step")

        def write() -> None:
            try:
                save_checkpoint_file(copied, Path(path))
            except BaseException as error:  # noqa: BLE001 - kept and raised on the training thread
                failure = CheckpointWriteFailed(getattr(error, "errno", None), f"the checkpoint {path} (step {step}) "
                                                f"could not be written on the writer thread: {error}")  # fmt: skip
                log.error("%s", failure.strerror)
                self.a_write_failed = True
                if self.failure is None and not self.raised:
                    self.failure = failure

        self.raise_if_failed()  # no new write is handed over once one is known to have failed
        assert self._executor is not None
        self._executor.submit(write)
        self.raise_if_failed()

    def remove_checkpoint(self, path: Any) -> None:
        """Deleted on the writer thread after the writes handed over before it, and only while none has failed: a
        rotation never removes an older checkpoint for a newer one that did not reach the disk."""
        self._ensure_setup()
        assert self._executor is not None

        def remove() -> None:
            if self.a_write_failed:
                log.warning("kept %s: a newer checkpoint could not be written", path)
                return
            remove_checkpoint_file(Path(path))

        self._executor.submit(remove)

    def raise_if_failed(self) -> None:
        """Raise the first failed write (once), with the checkpoints in its folder that are whole."""
        if self.failure is not None:
            failure, self.failure, self.raised = self.failure, None, True
            raise failure

    def wait(self) -> None:
        if self._executor is not None:
            self._executor.submit(lambda: None).result()  # one writer thread: every earlier write has finished
        self.raise_if_failed()

    def teardown(self) -> None:
        super().teardown()  # waits for the writer thread
        self.raise_if_failed()


def remove_checkpoint_file(path: Path) -> None:
    sidecar_of(path).unlink(missing_ok=True)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    fsync_directory(path.parent)


def checkpoint_header(path: Path) -> dict[str, Any]:
    """A checkpoint's plain values (its ``degen_train`` entry, loops, step): a sharded folder's ``meta.pt``
    without its shards, or the one file (memory-mapped: its tensors are not read)."""
    path = Path(path)
    if path.is_dir():
        if not (path / SHARDED_META).is_file():
            raise CheckpointError(f"checkpoint {path} is a folder without {SHARDED_META}: not a degen_train checkpoint")
        check_shards_present(path)
        return load_checkpoint_file(path / SHARDED_META, require_state_dict=False)
    return load_checkpoint_file(path)


def _refusal(path: Path, error: pickle.UnpicklingError) -> CheckpointError:
    """The message for a pickle that names a global outside the allow-list, or that is not a pickle at all."""
    found = re.search(r"(?:Unsupported global|GLOBAL) ([\w.]+)", str(error))
    if found is None:  # not a refusal: the bytes are not a pickle at all
        return CheckpointError(
            f"checkpoint {path} is not a readable PyTorch checkpoint ({str(error).splitlines()[0][:200]}): "
            f"it is torn or not a checkpoint; use an earlier one"
        )
    return CheckpointError(
        f"refused to load {path}: it holds a Python object that is not a tensor or plain container "
        f"({found.group(1)}). Checkpoints are loaded weights-only (a sharded folder's index with an allow-list of "
        f"the checkpoint format's own classes), so a file can never run code here; degen_train's own checkpoints "
        f"hold only weights and plain values"
    )


def check_shards_present(path: Path) -> None:
    """Refuse a sharded checkpoint folder missing a shard file its own index names (copied in part, say), or
    whose index names anything but the checkpoint format's classes (read with an allow-list, never unpickled
    freely)."""
    try:
        metadata = read_index(path)
    except pickle.UnpicklingError as error:
        raise _refusal(path / ".metadata", error) from None
    except (OSError, RuntimeError, ValueError, EOFError, AttributeError) as error:
        raise CheckpointError(f"checkpoint {path} has no readable shard index (.metadata): {error}") from None
    named = {info.relative_path for info in (metadata.storage_data or {}).values()}
    missing = sorted(name for name in named if not (path / name).is_file())
    if missing:
        raise CheckpointError(
            f"checkpoint {path} lacks shard files {', '.join(missing)} that its index names: it was copied or "
            f"written in part; copy the whole folder, or resume from an earlier checkpoint"
        )


def by_position(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter names (torch.distributed.checkpoint) -> keyed by position (torch)."""
    order = [name for group in state["param_groups"] for name in group["params"]]
    index = {name: position for position, name in enumerate(order)}
    return {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": [{**g, "params": [index[name] for name in g["params"]]} for g in state["param_groups"]],
    }


def by_name(state: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """The reverse of by_position, for the optimizer whose parameters, in order, are named ``order``."""
    return {
        "state": {order[position]: value for position, value in state["state"].items()},
        "param_groups": [{**g, "params": [order[position] for position in g["params"]]} for g in state["param_groups"]],
    }
