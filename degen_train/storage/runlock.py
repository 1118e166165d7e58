"""One writer per run folder: an advisory lock that dies with its holder."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from degen_train.core.paths import check_output_folder, links_in, refuse_links_in, shown_links

LOCK_NAME = ".lock"


class RunDirBusy(RuntimeError):
    """Another live process is writing to this run folder."""


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on RUN/.lock while the block runs.

    The kernel drops the lock when its process ends however it ends (kill -9 included), so a crashed run
    never leaves a folder locked; the file stays and records the last holder's pid and host.
    """
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise PermissionError(
            f"cannot write to the run folder {run_dir} ({error.strerror}): choose a writable hydra.run.dir"
        ) from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirBusy(_busy_message(run_dir, descriptor)) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps(holder).encode(), 0)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def _busy_message(run_dir: Path, descriptor: int) -> str:
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0) or b"{}")
    except ValueError:
        holder = {}
    who = f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} (since {holder.get('since', '?')})"
    return (
        f"the run folder {run_dir} is in use by {who}: one run writes to a folder at a time. Wait for it to "
        f"finish, or give this run another hydra.run.dir"
    )


def is_run_folder(folder: Path) -> bool:
    return (folder / "config.yaml").is_file() and (folder / "checkpoints").is_dir()


def refuse_links_in_sweep(sweep_dir: Path, key: str = "hydra.sweep.dir") -> None:
    """A sweep folder is written by Hydra and the sweeper before any run starts (multirun.yaml, Optuna's
    optimization_results.yaml, each KEY=VALUE run folder, its train.log): refuse a link at the folder or anywhere in it
    (a wandb/ folder's own links aside), naming each, before anything is written there."""
    sweep_dir = Path(sweep_dir).expanduser()
    if sweep_dir.is_symlink():
        raise ValueError(f"{key}={sweep_dir} is a link to {os.readlink(sweep_dir)}: a sweep writes into the folder it "
                         f"was given, never through a link; remove the link or give {key} another folder")  # fmt: skip
    if not sweep_dir.is_dir():
        return
    links = links_in(sweep_dir, runs_below=True)
    if links:
        raise ValueError(
            f"{key}={sweep_dir} holds symbolic links ({shown_links(links)}): Hydra and the "
            f"sweeper would write its files (multirun.yaml, optimization_results.yaml, each run's folder and "
            f"train.log) through them. Replace each link by a copy of its file, or remove it"
        )


def refuse_run_inside_a_run(folder: Path, what: str) -> None:
    """A run's folder holds one run: a new run inside another's (a branch into PARENT/sub or PARENT/checkpoints)
    would mix its files with the parent's. Refused naming both."""
    folder = Path(folder).expanduser().resolve()
    for parent in folder.parents:
        if is_run_folder(parent):
            raise ValueError(
                f"{what} {folder} lies inside the run folder {parent}: a run's folder holds that run alone. Give "
                f"hydra.run.dir a folder beside it (e.g. {parent}-branch)"
            )


def refuse_writes_into_other_runs(cfg: Mapping[str, Any], run_dir: Path) -> None:
    """A run writes its checkpoints and logs into its own folder, never into another run's (a folder with
    config.yaml and checkpoints/): such a path, from a copied or handed-over config, is refused naming the key.
    ``cfg``: the run's settings as a mapping (TrainConfig.plain_settings())."""
    own = run_dir.resolve()
    refuse_run_inside_a_run(own, "the run folder")
    checkpoint = (cfg["callbacks"] or {}).get("checkpoint")
    places = {"callbacks.checkpoint.dirpath": checkpoint.get("dirpath") if checkpoint else None}
    places["trainer.default_root_dir"] = cfg["trainer"].get("default_root_dir")
    for name, logger in (cfg.get("logger") or {}).items():
        places[f"logger.{name}.save_dir"] = (logger or {}).get("save_dir")
    for key, value in places.items():
        if not value:
            continue
        path = Path(str(value)).expanduser().resolve()
        if path == own or own in path.parents:
            continue
        for folder in (path, *path.parents):
            if is_run_folder(folder):
                raise ValueError(
                    f"{key}={value} lies in another run's folder ({folder}); this run writes into {run_dir}. Set "
                    f"{key} inside it, or remove the override"
                )


def is_launching_process() -> bool:
    """True in the process that owns the run folder: global rank 0, as the launcher's environment says.

    Read before the trainer exists (Lightning sets the same value from RANK / LOCAL_RANK / SLURM_PROCID).
    """
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    return getattr(rank_zero_only, "rank", 0) == 0


def check_output_folders_in(arguments: list[str]) -> None:
    """check_output_folder for ``hydra.run.dir=`` / ``hydra.sweep.dir=`` on a command line (Hydra would fail later
    with a bare traceback); values that interpolate (``${now:...}``) are left to Hydra. The run folder is also
    checked for links and for lying inside another run's folder (a branch's parent): before Hydra opens its
    train.log, so a refused command appends nothing to the parent's log."""
    values = {}
    for argument in arguments:
        key, _, value = argument.partition("=")
        values[key.lstrip("+")] = value.strip("'\"")
        if key.lstrip("+") in ("hydra.run.dir", "hydra.sweep.dir") and value and "${" not in value:
            check_output_folder(value.strip("'\""), key.lstrip("+"))
    sweep_dir = values.get("hydra.sweep.dir")
    if sweep_dir and "${" not in sweep_dir:
        refuse_links_in_sweep(Path(sweep_dir))
    run_dir = values.get("hydra.run.dir")
    if not run_dir or "${" in run_dir:
        return
    refuse_links_in(Path(run_dir))
    if (Path(run_dir).expanduser() / "multirun.yaml").exists():  # its runs would fail later, with a branch's advice
        raise ValueError(f"hydra.run.dir={run_dir} is a sweep's folder (it holds multirun.yaml): a single run goes "
                         f"into a folder of its own; continue the sweep with -m hydra.sweep.dir={run_dir}")  # fmt: skip
    if values.get("branch_from"):  # the parent itself as the branch's folder (its train.log would be appended to)
        parent = Path(values["branch_from"].rpartition("@")[0]).expanduser().resolve()
        if is_run_folder(parent) and Path(run_dir).expanduser().resolve() == parent:
            raise ValueError(f"branch_from={values['branch_from']} into the parent's own folder: give the branch "
                             f"another hydra.run.dir (e.g. {parent}-branch)")  # fmt: skip
    refuse_run_inside_a_run(Path(run_dir), "hydra.run.dir")
    try:  # Hydra would make it with a traceback: a folder that cannot be made (read-only, not yours) is named here
        Path(run_dir).expanduser().mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"cannot write to the run folder {run_dir} ({error.strerror or error}): choose a writable "
                         f"hydra.run.dir") from None  # fmt: skip
