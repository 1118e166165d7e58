"""Every process a checked script starts ends with the check, daemons included.

A job runs in its own session (cluster/simulated.sbatch), so its process group ends at its time limit; but a script
may start processes that leave that group (``setsid sleep 600 &``, a double-forked daemon). The check makes itself
their **child subreaper** (Linux's prctl PR_SET_CHILD_SUBREAPER): an orphan below it is re-parented to the check,
not to init, so after each job every process below the check is still found by walking /proc's parent links, and
ended. A PID namespace would do the same without /proc, but needs privileges a user's shell does not have; where
prctl is absent (not Linux) the check says it cannot vouch for what a script left running."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Make this process the subreaper of everything below it; False where the kernel does not offer it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process /proc shows."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the second field is the command in parentheses (it may hold spaces and parentheses): the ppid follows the
        # last ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            found[int(entry.name)] = int(fields[1])
    return found


def descendants(root: int | None = None) -> list[int]:
    """Every living process below ``root`` (default: this one)."""
    root = os.getpid() if root is None else root
    parents = _parents()
    below, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        below += children
        frontier += children
    return below


def command_of(pid: int) -> str:
    """``PID COMMAND`` (its first 80 characters), or the pid alone where it is gone."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    return f"{pid} " + " ".join(w.decode(errors="replace") for w in words if w)[:80]


def end_descendants(grace: float = 2.0) -> list[str]:
    """SIGTERM then SIGKILL every process below this one, reaping each; what was still running (command_of, read
    before it was ended)."""
    left = descendants()
    commands = [command_of(pid) for pid in left]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _living(left):
            _reap()
            time.sleep(0.05)
    _reap()
    return commands


def _living(pids: list[int]) -> bool:
    for pid in pids:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text()
        except OSError:
            continue
        if state[state.rfind(")") + 2 :][:1] != "Z":
            return True
    return False


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
