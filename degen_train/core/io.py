"""Writes that never leave a half-written file or folder behind."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

CACHE_ELSEWHERE = "point data.cache_dir at a larger disk"


class JsonLineError(ValueError):
    """A line of a JSON-lines file that is not JSON: its number and the parser's reason."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}, line {line}, is not JSON ({reason})")
        self.path, self.line, self.reason = path, line, reason


def utf8_text(path: Path, *, what: str = "file") -> str:
    """A text file's content, decoded as UTF-8 (a byte-order mark dropped); a byte sequence that is not UTF-8 is a
    ValueError naming the file, the line and the bytes. A FIFO, a device or a file past its bound is refused by name
    before it is read (core/handed_files.bounded_text_bytes)."""
    from degen_train.core.handed_files import bounded_text_bytes

    data = bounded_text_bytes(Path(path), what=what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{path}, line {line}: bytes {data[error.start:error.end]!r} are not UTF-8 (a {what} must be UTF-8 text: "
            f"re-save it as UTF-8)"
        ) from None


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON-lines file; JsonLineError at the first bad line."""
    for number, line in enumerate(utf8_text(path, what="JSON-lines file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as error:
            raise JsonLineError(path, number, str(error)) from None


class DiskFull(OSError):
    """A write limit (no space, a file-size limit, a quota) met under a named folder; what was being written is gone,
    nothing else is touched."""


# Write limits that end a write whatever is written: (errno, how the message names it, what the Rust tokenizers
# library and datasets say in place of an OSError).
WRITE_LIMITS = {
    errno.ENOSPC: ("no space left on device", ("No space left on device", "os error 28"), "free space"),
    errno.EFBIG: ("a file over this process's size limit (ulimit -f) or the filesystem's",
                  ("File too large", "os error 27"), "raise the file-size limit (ulimit -f)"),
    errno.EDQUOT: ("the disk quota is exceeded", ("Disk quota exceeded", "os error 122"), "free space in your quota"),
}  # fmt: skip


def write_limit(error: BaseException | None) -> int | None:
    """The errno of a write limit (WRITE_LIMITS) anywhere in the chain, else None: datasets wraps it
    (DatasetGenerationError), the Rust tokenizers library gives a bare Exception ending in "(os error 28)"."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in WRITE_LIMITS:
            return error.errno
        for number, (_, said, _) in WRITE_LIMITS.items():
            if any(text in str(error) for text in said):
                return number
        error = error.__cause__ or error.__context__
    return None


def is_disk_full(error: BaseException | None) -> bool:
    """A write limit (full disk, file-size limit, quota) anywhere in the chain."""
    return write_limit(error) is not None


def as_write_limit(error: BaseException, folder: Path, remedy: str) -> DiskFull | None:
    """The one-line DiskFull to show for ``error`` when it is a write limit met writing ``folder`` (already one: as
    it is), else None: what a command's main() says instead of a traceback."""
    if isinstance(error, DiskFull):
        return error
    return disk_full_error(folder, remedy, error) if is_disk_full(error) else None


def disk_full_error(folder: Path, remedy: str = "", error: BaseException | None = None) -> DiskFull:
    """The one-line message for a write limit met under ``folder`` (a full disk unless ``error`` says another):
    which limit, how much is free there, what to do."""
    number = write_limit(error) or errno.ENOSPC
    try:
        free = f"{shutil.disk_usage(_existing(folder)).free / 2**20:.1f} MiB free there"
    except OSError:
        free = "free space unknown"
    alternative = f" (or {remedy})" if remedy else ""
    what, _, fix = WRITE_LIMITS[number]
    return DiskFull(
        number,
        f"{what} writing {folder} ({free}); nothing half-written was kept: {fix}{alternative} and run the same "
        f"command again",
    )


def _existing(path: Path) -> Path:
    return next((p for p in (path, *path.parents) if p.exists()), Path("/"))


@contextmanager
def atomic_directory(target: Path, *, replace: bool = False, when_full: str = "") -> Iterator[Path]:
    """Yield a staging folder beside ``target``; it becomes ``target`` only if the block succeeds.

    replace=False keeps an existing ``target`` (a cache another process filled first);
    replace=True swaps the new folder in and only then deletes the old one.
    A full disk is raised as DiskFull naming ``target``, with ``when_full`` as the other way out.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield staging
        open_to_umask(staging)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if not isinstance(error, DiskFull) and is_disk_full(error):  # name the folder, not "os error 28"
            raise disk_full_error(target, when_full, error) from error
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
    try:
        os.replace(staging, target)
    except OSError as error:
        # Another process renamed the same entry in after our check (two builds at once, or a stale NFS view of the
        # folder): a cache entry is the same whoever built it, so theirs is kept and our staging folder goes.
        shutil.rmtree(staging, ignore_errors=True)
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not target.is_dir():
            raise


def open_to_umask(folder: Path) -> None:
    """Give ``folder`` and what is in it the permissions the user's umask allows, as ``cp`` would: mkdtemp makes
    0700 and some writers (safetensors through save_pretrained) 0600, which keeps colleagues out of an export."""
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    for path in folder.rglob("*"):
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        os.chmod(path, 0o777 & ~mask if path.is_dir() else stat.S_IMODE(mode) | (0o666 & ~mask))


def cache_key(*parts: Any) -> str:
    """A short stable hash of ``parts`` (their reprs, separated): the one key maker of every cache."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(repr(part).encode())
        hasher.update(b"\0")
    return hasher.hexdigest()[:16]


def file_sha256(path: Path, chunk_size: int = 1 << 20) -> str:
    """The sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def current_umask() -> int:
    """This process's umask, read without changing it where Linux shows it (/proc), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Folders a command was given to write into (--out: core/paths.writable_folder). A file there that degen-train did not
# write is never replaced: when a command writes one of the same name, the user's is kept beside it, renamed (issue
# 72.8, X16, G10: a user's metrics.json or report.md in the --out folder was overwritten). What degen-train wrote is
# listed in the folder's WRITTEN file, so a rerun replaces its own files and only those.
OUT_FOLDERS: set[Path] = set()
WRITTEN = ".degen-train-written.json"


def guard_out_folder(folder: Path) -> None:
    """Hold ``folder``'s files that degen-train did not write (module comment above) for the rest of this process."""
    OUT_FOLDERS.add(Path(folder).absolute())


def _out_folder_of(path: Path) -> Path | None:
    path = path.absolute()
    return next((folder for folder in OUT_FOLDERS if path.is_relative_to(folder)), None)


def _written(folder: Path) -> set[str]:
    """The names degen-train wrote in ``folder``; none when the list is absent, not a plain small file, or unreadable
    (then every file there is kept aside before it is replaced: the safe side)."""
    listed = folder / WRITTEN
    try:
        if not stat.S_ISREG(listed.lstat().st_mode) or listed.lstat().st_size > 2**20:
            return set()
        names = json.loads(listed.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _keep_theirs(path: Path) -> None:
    """Before ``path`` is replaced in a guarded folder: a file degen-train did not write there is renamed aside."""
    folder = _out_folder_of(path)
    if folder is None or not os.path.lexists(path) or str(path.absolute().relative_to(folder)) in _written(folder):
        return
    stamp, count = time.strftime("%Y%m%d-%H%M%S"), 0
    aside = path.with_name(f"{path.name}.kept-{stamp}")
    while os.path.lexists(aside):
        count += 1
        aside = path.with_name(f"{path.name}.kept-{stamp}-{count}")
    os.replace(path, aside)
    logging.getLogger("degen_train").warning("%s was not written by degen-train: kept as %s, beside the new one",
                                             path, aside.name)  # fmt: skip


def _note_written(path: Path) -> None:
    folder = _out_folder_of(path)
    if folder is None:
        return
    names = sorted(_written(folder) | {str(path.absolute().relative_to(folder))})
    handle, staging = tempfile.mkstemp(prefix=f".{WRITTEN}.", suffix=".tmp", dir=folder)
    os.chmod(staging, 0o666 & ~current_umask())  # as the files it lists (staged_file)
    with os.fdopen(handle, "w") as stream:
        json.dump(names, stream)
    os.replace(staging, folder / WRITTEN)


@contextmanager
def staged_file(path: Path, mode: str = "w") -> Iterator[IO]:
    """Open a staging file beside ``path``; on success it is fsynced and renamed over ``path``.

    Staging in the destination folder keeps the rename atomic on every filesystem (a temp folder on
    another filesystem would need a copy, which a kill can tear). On failure nothing is left behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(staging, 0o666 & ~current_umask())  # mkstemp's 0600 would hide run files from collaborators
        with os.fdopen(handle, mode) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        _keep_theirs(path)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise
    _note_written(path)
    fsync_directory(path.parent)


def fsync_directory(folder: Path) -> None:
    """Make a rename or removal in ``folder`` durable (a no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def atomic_write_json(path: Path, payload: Any) -> None:
    """Write JSON through a staged file: readers see the old content or the new, never a torn one. A NaN or an
    infinity is written as null (strict JSON: what a handed-over record's reader accepts, config/records.py)."""
    with staged_file(path, "w") as stream:
        json.dump(finite_or_null(payload), stream, indent=2, sort_keys=True, default=str, allow_nan=False)
        stream.write("\n")


def finite_or_null(value: Any) -> Any:
    """``value`` with every non-finite float (a diverged loss, an overflowed perplexity) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return value


def atomic_write_text(path: Path, text: str) -> None:
    with staged_file(path, "w") as stream:
        stream.write(text)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with staged_file(path, "wb") as stream:
        stream.write(data)


def resolve_pretrained(name: str) -> str:
    """A degen_train run directory means its ``hf/`` export; other paths and hub names pass through. A value that
    looks like a local path but does not exist is refused here, at once, instead of being tried on the hub."""
    path = Path(str(name)).expanduser()
    if (path / "hf" / "config.json").exists():
        return str(path / "hf")
    if path.exists():
        return str(path)
    if looks_like_local_path(str(name)):
        raise FileNotFoundError(
            f"{name}: no such folder ({path.resolve()}); give a run folder, a model folder, or a hub name (ORG/NAME)"
        )
    return str(name)


def looks_like_local_path(value: str) -> bool:
    """Starts like a path (/, ./, ../, ~), has more than one '/', or begins with a folder that exists here
    (`runs/teacher` when ./runs exists): a hub name is NAME or ORG/NAME."""
    if value.startswith(("/", "./", "../", "~")) or value.count("/") > 1:
        return True
    return "/" in value and Path(value.split("/", 1)[0]).is_dir()


def leave_no_run_folder(folder: Path) -> None:
    """For a command that writes nothing (debug=plan: issue 72.8, P14b, P16): Hydra has opened RUN/train.log and made
    the run folder before the program runs; the log handler is closed and removed (the terminal keeps every line),
    and the log and the folder are removed where they hold nothing and nothing older than this process (with the
    parents Hydra's default made below the working directory: outputs/DATE/)."""
    import psutil

    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, RunLogFileHandler)]:
        root.removeHandler(handler)
        handler.close()
        log_file = Path(handler.baseFilename)
        if log_file.is_file() and not log_file.is_symlink() and log_file.stat().st_size == 0:
            log_file.unlink()
    started = psutil.Process().create_time()
    here = Path.cwd().resolve()
    folder = folder.absolute()
    # the folder, and the parents Hydra's default made below the working directory (outputs/DATE/), never above
    made = [folder, *(p for p in folder.parents if p.resolve() != here and p.resolve().is_relative_to(here))]
    for candidate in made:
        try:
            if candidate.is_symlink() or candidate.stat().st_mtime < started or any(candidate.iterdir()):
                return
            candidate.rmdir()
        except OSError:  # another process's, or not ours to remove
            return


class RunLogFileHandler(logging.FileHandler):
    """Hydra's RUN/train.log handler, which stays silent when the run folder cannot be written.

    Hydra opens the log before any of our code runs; a read-only run folder would end the program with
    "Unable to configure handler". Silent here, the run reaches its own check, which names the folder.
    """

    def __init__(self, filename: str, *args: Any, **kwargs: Any) -> None:
        try:
            if os.path.islink(filename):  # never append through a link (the run refuses the folder, naming it)
                raise OSError(f"{filename} is a symbolic link")
            super().__init__(filename, *args, **kwargs)
        except OSError:
            logging.Handler.__init__(self)
            self.baseFilename, self.stream = os.path.abspath(filename), None

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not None:
            super().emit(record)
