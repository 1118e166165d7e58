"""A sweep whose members run in worker processes (hydra/launcher=joblib) stops as one command: the parent's SIGTERM or
SIGINT reaches every member, each writes its last.ckpt and says how to resume (callbacks/preemption.py), no member
starts after it, and the workers end with the sweep instead of training on orphaned or idling after it (issue 63: two
loky workers were still there minutes after the parent had gone, and a second SIGTERM did nothing).

A worker never dies of the signal: loky ends every other worker when one dies, which would cut their checkpoints
short. So a worker takes the signal as "the sweep is stopping" (``in_worker``), its member stops at the end of its
update, and the members queued after it return at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

log = logging.getLogger("degen_train.run.sweep")
FORWARDED = (signal.SIGTERM, signal.SIGINT)
TRACKERS = ("joblib.externals.loky.backend.resource_tracker", "multiprocessing.resource_tracker")
STOPPED: dict[str, int | bool | None] = {"signal": None, "installed": False, "worker": False}


def forward_stop_signals() -> None:
    """In the sweep's parent: SIGTERM and SIGINT are passed on to every worker (a second one too) and the sweep goes
    on to its end, which comes at once: each member checkpoints and stops, none starts after. The command then exits
    75 ("resume me"), saying so."""

    def forward(number: int, _frame: FrameType | None) -> None:
        for pid in child_pids():
            _signal(pid, number)
        if STOPPED["signal"] is None:
            print(f"degen-train: {signal.Signals(number).name}: the sweep's members write their checkpoints and stop; "
                  f"none starts after them", file=sys.stderr, flush=True)  # fmt: skip
        STOPPED["signal"] = number

    for number in FORWARDED:
        signal.signal(number, forward)
    STOPPED["installed"] = True
    # The resource trackers this launch starts clean up what the workers leave (semaphores, memmapping folders) when
    # they end; that is their work, said in a warning per kind: not the user's to read.
    quiet = ",".join(f"ignore::UserWarning:{module}" for module in TRACKERS)
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), quiet]))


def in_worker() -> bool:
    """In a loky worker: from its first member on, a SIGTERM or SIGINT between members marks the sweep stopped instead
    of ending the process (during a member, the preemption callback's own handler takes it). True once stopped: the
    member returns without training."""
    import multiprocessing

    if not multiprocessing.current_process().name.startswith("LokyProcess"):
        return False
    if not STOPPED["installed"]:
        def mark(number: int, _frame: FrameType | None) -> None:
            STOPPED["signal"] = number

        for number in FORWARDED:
            signal.signal(number, mark)
        STOPPED["installed"] = True
    return STOPPED["signal"] is not None


def worker_stopped(number: int) -> bool:
    """In a loky worker whose member stopped on a signal: the sweep is stopping (``in_worker`` returns True from now
    on) and the member returns instead of raising SystemExit, which loky reads as a dead worker."""
    import multiprocessing

    if not multiprocessing.current_process().name.startswith("LokyProcess"):
        return False
    STOPPED["signal"] = number
    return True


def end_workers() -> None:
    """After the sweep (run to its end, stopped or failed; its members have all returned): the idle worker processes
    are ended, none left behind the command."""
    if not STOPPED["installed"] or "joblib" not in sys.modules:
        return
    for pid in child_pids():
        _signal(pid, signal.SIGKILL)  # idle: they hold no file open for writing
        _ended(pid)


def child_pids(parent: int | None = None) -> list[int]:
    """The worker processes ``parent`` (this one) started: psutil's children where it is installed, else Linux's
    /proc; the resource trackers left out (they end when this process does, and ignore SIGTERM by design)."""
    parent = os.getpid() if parent is None else parent
    try:
        import psutil

        children = {child.pid: " ".join(child.cmdline()) for child in psutil.Process(parent).children()}
    except ImportError:
        children = {pid: _cmdline(pid) for pid in _proc_children(parent)}
    except Exception:  # noqa: BLE001 - a child that ended while listed
        children = {}
    return [pid for pid, line in children.items() if "resource_tracker" not in line]


def _proc_children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat") if Path("/proc").is_dir() else ():
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(entry.parent.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def _ended(pid: int) -> bool:
    """Whether ``pid`` (a child) has ended; reaps it when it has."""
    try:
        done, _ = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped already (by loky's own bookkeeping)
        return True
    return done == pid
