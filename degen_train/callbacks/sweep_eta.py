"""What a sweep will cost, said once its first member has timed a few steps: members × steps × the measured step time
÷ the members side by side (issue 65.6: a researcher's sweep at WikiText-2's 30,522-entry vocabulary was heading for
75 minutes where the README's took 2, and nothing said so). The sweep's own process announces its plan in the
environment its members inherit (run/sweep.py); a member's progress line carries the sweep's time left."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("degen_train.throughput")
PLAN_VARIABLE = "DEGEN_TRAIN_SWEEP_PLAN"  # {"members": N, "jobs": J, "dir": SWEEP}: set by the sweep's process
AFTER_STEPS = 5  # timed steps (the first, with its start-up costs, left out) before the estimate is said
MARKER = ".sweep_estimate.json"


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


def estimate_line(sweep: dict[str, Any], steps: int, seconds_per_step: float) -> str:
    """'sweep estimate: 6 members × 300 steps × 0.42 s a step ÷ 2 side by side ≈ 6.3 min'."""
    total = sweep["members"] * steps * seconds_per_step / max(int(sweep["jobs"]), 1)
    return (f"sweep estimate: {sweep['members']} members × {steps} steps × {seconds_per_step:.3g} s a step ÷ "
            f"{sweep['jobs']} side by side ≈ {_duration(total)} of training (this member's first steps; validation, "
            f"checkpoints and the probes come on top)")  # fmt: skip


def announce(steps: int, seconds_per_step: float) -> None:
    """Say the sweep's estimate once per sweep: the first member to time its steps writes the marker (O_EXCL) and
    logs the line; the others stay quiet."""
    sweep = plan()
    if sweep is None:
        return
    marker = Path(sweep["dir"]) / MARKER
    try:
        descriptor = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:  # said already (or the folder cannot take it: the estimate is no reason to stop)
        return
    with os.fdopen(descriptor, "w") as stream:
        json.dump({"steps": steps, "seconds_per_step": seconds_per_step, **sweep}, stream)
    log.warning(estimate_line(sweep, steps, seconds_per_step))


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
    return _duration(seconds)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
