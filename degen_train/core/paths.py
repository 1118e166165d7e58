"""The folders a command writes into: one that can be a folder, holds no links, and can be written."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def check_output_folder(path: str | Path, key: str) -> None:
    """Refuse an output folder that cannot be one: ``path`` or a parent is an existing file (one line, naming it)."""
    path = Path(path).expanduser()
    for candidate in (path, *path.parents):
        if candidate.exists():
            if not candidate.is_dir():
                what = "is" if candidate == path else f"lies inside {candidate}, which is"
                raise NotADirectoryError(
                    f"{key}={path}: it {what} a file, not a folder; "
                    f"give {key} a folder path (created if missing)"
                )
            return


# The files a run appends to in its folder (a link or another user's file there would be written through).
APPENDED = ("train.log", "logs/metrics.csv")


WANDB_FOLDER = "wandb"


def refuse_links_in(run_dir: Path) -> None:
    """A folder degen_train writes into must hold its own files only: refuse a symbolic link anywhere in it (a
    resumed run, a report or an analysis would write or append through it, outside the folder) and an appended file
    that another user owns, naming each."""
    run_dir = Path(run_dir).expanduser()
    if not run_dir.is_dir():
        return
    links = links_in(run_dir)
    if links:
        raise ValueError(
            f"{run_dir} holds symbolic links ({shown_links(links)}): degen_train writes and "
            f"appends to its own files only, never through a link. Replace each link by a copy of its file, or remove "
            f"it"
        )
    odd = [p for root, _, names in os.walk(run_dir) for p in (Path(root) / n for n in names)
           if not (p.is_symlink() or stat.S_ISREG(p.lstat().st_mode))]  # fmt: skip
    if odd:  # a resume reads its own metrics log: a FIFO there would hang it, a device never end
        raise ValueError(f"{odd[0]} is not a plain file (a FIFO, a device or a socket): a run folder holds its own "
                         f"files only, and a resume reads and appends to them; remove it")  # fmt: skip
    for name in APPENDED:
        path = run_dir / name
        if path.exists() and path.stat().st_uid != os.geteuid():
            raise ValueError(f"{path} belongs to another user (uid {path.stat().st_uid}): a run appends only to files "
                             f"it owns; copy the folder to make it yours")  # fmt: skip


def links_in(folder: Path, *, runs_below: bool = False) -> list[Path]:
    """The symbolic links at or under ``folder``, wandb's own aside: a wandb/ folder (at the top, or in any run folder
    below when ``runs_below``: a sweep's) makes its latest-run and log links itself and replaces them on each start
    rather than writing through them."""
    def wandbs(path: Path) -> bool:
        parts = path.relative_to(folder).parts
        return WANDB_FOLDER in (parts if runs_below else parts[:1])

    if folder.is_symlink():
        return [folder]
    found = []
    for root, folders, files in os.walk(folder, followlinks=False):  # never into a linked folder (a link to /)
        found += [Path(root) / name for name in [*folders, *files] if (Path(root) / name).is_symlink()]
    return sorted(p for p in found if not wandbs(p))


def shown_links(links: list[Path], most: int = 5) -> str:
    """``LINK -> TARGET, ...`` of the first ``most`` links, as an error names them."""
    shown = ", ".join(f"{p} -> {os.readlink(p)}" for p in links[:most])
    return shown + (", ..." if len(links) > most else "")


def writable_folder(folder: str | Path, option: str, *, contents: bool = True) -> Path:
    """``folder``, created when missing; a folder that cannot be written (a read-only run folder handed over, a
    mount) is refused in one line naming it and the option that chooses another, before any work. A link at the
    folder, or (``contents``) anywhere inside it, is refused: what a command writes lands in the folder it was given
    (a handed-over sweep's ``report/`` linked to someone's folder would be written through)."""
    folder = Path(folder).expanduser()
    if folder.is_symlink():
        raise ValueError(f"{folder} is a link to {os.readlink(folder)}: degen_train writes into the folder it was "
                         f"given, never through a link; remove the link or give {option} another folder")
    if contents and folder.is_dir():
        refuse_links_in(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".degen-write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise ValueError(f"{folder} cannot be written ({error.strerror or error}): give {option} a folder you can "
                         f"write") from None  # fmt: skip
    from degen_train.core.io import guard_out_folder

    guard_out_folder(folder)  # a file there that degen-train did not write is kept, never replaced
    return folder
