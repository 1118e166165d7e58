"""What a sweep will cost, said once its first member has timed a few steps: members × steps × the measured step time
÷ the members side by side (issue 65.6: a researcher's sweep at WikiText-2's 30,522-entry vocabulary was heading for
75 minutes where the README's took 2, and nothing said so). The sweep's own process announces its plan in the
environment its members inherit (run/sweep.py); a member's progress line carries the sweep's time left."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("degen_train.throughput")
PLAN_VARIABLE = "DEGEN_TRAIN_SWEEP_PLAN"  # {"members": N, "jobs": J, "dir": SWEEP}: set by the sweep's process
AFTER_STEPS = 5  # timed steps (the first, with its start-up costs, left out) before the estimate is said
MARKER = ".sweep_estimate.json"
WHOLE_MARKER = ".sweep_estimate_whole.json"  # the first member's whole time: preparation, training, evaluation
MEMBER: dict[str, float | None] = {"started": None}  # when this process's member began (run/sweep.run_in_sweep)


def member_started() -> None:
    MEMBER["started"] = time.perf_counter()


def startup_seconds(steps_done: int, seconds_per_step: float) -> float | None:
    """This member's time before its first timed step (data preparation, the model's build): its time so far less
    its steps'; None outside a sweep's member."""
    started = MEMBER["started"]
    return None if started is None else max(time.perf_counter() - started - steps_done * seconds_per_step, 0.0)


def plan() -> dict[str, Any] | None:
    """The sweep this process's run belongs to, or None (a run of its own)."""
    text = os.environ.get(PLAN_VARIABLE)
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) and {"members", "jobs", "dir"} <= set(found) else None


def estimate_seconds(sweep: dict[str, Any], steps: int, seconds_per_step: float, startup: float = 0.0) -> float:
    return sweep["members"] * (startup + steps * seconds_per_step) / max(int(sweep["jobs"]), 1)


def estimate_line(sweep: dict[str, Any], steps: int, seconds_per_step: float, startup: float = 0.0) -> str:
    """'sweep estimate: 6 members × (41 s start-up + 300 steps × 0.42 s a step) ÷ 2 side by side ≈ 6.3 min'."""
    total = estimate_seconds(sweep, steps, seconds_per_step, startup)
    return (f"sweep estimate: {sweep['members']} members × ({startup:.0f} s start-up + {steps} steps × "
            f"{seconds_per_step:.3g} s a step) ÷ {sweep['jobs']} side by side ≈ {duration(total)} (this member's "
            f"start-up and first steps; its validation, checkpoints and in-run evaluation are timed when it "
            f"finishes)")  # fmt: skip


def _claim(marker: Path, record: dict[str, Any]) -> bool:
    """Write ``record`` to ``marker`` if no member did before (O_EXCL); False where one did, or it cannot."""
    try:
        descriptor = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:  # said already (or the folder cannot take it: the estimate is no reason to stop)
        return False
    with os.fdopen(descriptor, "w") as stream:
        json.dump(record, stream)
    return True


def announce(steps: int, seconds_per_step: float) -> None:
    """Say the sweep's estimate once per sweep: the first member to time its steps writes the marker (O_EXCL) and
    logs the line; the others stay quiet."""
    sweep = plan()
    if sweep is None:
        return
    startup = startup_seconds(AFTER_STEPS, seconds_per_step) or 0.0
    total = estimate_seconds(sweep, steps, seconds_per_step, startup)
    record = {"steps": steps, "seconds_per_step": seconds_per_step, "startup": startup, "estimate": total, **sweep}
    if _claim(Path(sweep["dir"]) / MARKER, record):
        log.warning(estimate_line(sweep, steps, seconds_per_step, startup))


def member_finished() -> None:
    """The first member to finish says the sweep's estimate from its whole time (preparation, training, validation,
    in-run evaluation): members × that ÷ side by side."""
    sweep, started = plan(), MEMBER["started"]
    if sweep is None or started is None:
        return
    whole = time.perf_counter() - started
    total = sweep["members"] * whole / max(int(sweep["jobs"]), 1)
    if _claim(Path(sweep["dir"]) / WHOLE_MARKER, {"member_seconds": whole, "estimate": total, **sweep}):
        log.warning(f"sweep estimate, from the first member's whole run: {sweep['members']} members × "
                    f"{duration(whole)} ÷ {sweep['jobs']} side by side ≈ {duration(total)}")  # fmt: skip


def estimates_said(folder: Path) -> str:
    """'estimated 10.2 min at the first member's 5th step, 17.0 min from its whole run', from the markers the
    members wrote ('' where none did); read as data: plain small files, numbers only."""
    from degen_train.core.handed_files import HandedOverFileError, json_record

    said = []
    for marker, when in ((MARKER, f"at the first member's step {AFTER_STEPS}"), (WHOLE_MARKER,
                                                                                 "from its whole run")):  # fmt: skip
        try:
            record = json_record(folder / marker, limit=4096, what="sweep estimate", within=folder)
        except (HandedOverFileError, OSError, ValueError):
            continue
        estimate = record.get("estimate") if isinstance(record, dict) else None
        if isinstance(estimate, int | float) and 0 <= estimate < 1e9:
            said.append(f"estimated {duration(float(estimate))} {when}")
    return ", ".join(said)


def time_left(steps: int, done: int, seconds_per_step: float) -> str | None:
    """The sweep's time left as this member sees it: its own steps left, and the members not yet finished beyond
    those running now (counted by their summary.json in the sweep folder), ÷ the members side by side."""
    sweep = plan()
    if sweep is None or seconds_per_step <= 0:
        return None
    folder = Path(sweep["dir"])
    finished = sum(1 for _ in folder.glob("*/summary.json")) if folder.is_dir() else 0
    jobs = max(int(sweep["jobs"]), 1)
    waiting = max(int(sweep["members"]) - finished - jobs, 0)
    seconds = (steps - done) * seconds_per_step + waiting * steps * seconds_per_step / jobs
    return duration(seconds)


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
