"""How many CPU threads each training process uses: the CPUs it may run on, shared by the processes on the node.

torch's default is every core the machine has, which on a shared node or a container with a CPU quota
oversubscribes the CPUs it is actually given (issue 24: a default run took 346-642 s of CPU on a loaded 2-core
machine and 126 s with one thread, for the same weights). ``threads=auto`` counts the CPUs of this process's
affinity mask and its cgroup quota, and divides them among the node's processes of the run.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("degen_train")

CGROUP_ROOT = Path("/sys/fs/cgroup")
# What the user exported, before any run of ours exported its own count: every run honours it, not only the first
# (issue 55.8: a second run took our export for the user's). A process we start (a DDP rank, a two-process job, a
# data worker) inherits our export too, so the user's value travels beside it (USERS_COUNT_VARIABLE, "" for none)
# and so does our export (OURS_VARIABLE): an OMP_NUM_THREADS equal to ours is never taken for the user's.
USERS_COUNT_VARIABLE = "DEGEN_TRAIN_USERS_OMP_NUM_THREADS"
OURS_VARIABLE = "DEGEN_TRAIN_OMP_NUM_THREADS"
_USERS_OMP_NUM_THREADS: str | None = os.environ.get(USERS_COUNT_VARIABLE, os.environ.get("OMP_NUM_THREADS")) or None


def cgroup_quota_cpus(cpu_max: str) -> float | None:
    """CPUs a cgroup v2 ``cpu.max`` line ("QUOTA PERIOD", or "max PERIOD" for none) grants; None without a quota."""
    fields = cpu_max.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = int(fields[0]), int(fields[1])
    return quota / period if quota > 0 and period > 0 else None


def _cgroup_quota() -> float | None:
    """The tightest CPU quota on this process's cgroup path (v2, then v1), or None."""
    quotas: list[float] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        hierarchy, _, path = line.partition("::")
        if hierarchy == "0":  # cgroup v2: walk from this process's group up to the root
            group = CGROUP_ROOT / path.lstrip("/")
            for folder in (group, *group.parents):
                if not folder.is_relative_to(CGROUP_ROOT):
                    break
                try:
                    quota = cgroup_quota_cpus((folder / "cpu.max").read_text())
                except (OSError, ValueError):
                    continue
                if quota is not None:
                    quotas.append(quota)
    try:  # cgroup v1, as most containers mount it
        quota_us = int((CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((CGROUP_ROOT / "cpu" / "cpu.cfs_period_us").read_text())
        if quota_us > 0 and period_us > 0:
            quotas.append(quota_us / period_us)
    except (OSError, ValueError):
        pass
    return min(quotas) if quotas else None


@dataclass(frozen=True)
class UsableCpus:
    affinity: int
    quota: float | None

    @property
    def count(self) -> int:
        """The CPUs this process can keep busy: its affinity mask, capped by the quota (rounded down: a thread on a
        fraction of a CPU is throttled), at least 1."""
        if self.quota is None:
            return self.affinity
        return max(1, min(self.affinity, math.floor(self.quota)))


def usable_cpus() -> UsableCpus:
    """This process's affinity mask size and cgroup CPU quota."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        affinity = os.cpu_count() or 1
    return UsableCpus(affinity=affinity, quota=_cgroup_quota())


def threads_per_process(setting: int | str, cpus: int, local_processes: int) -> int:
    """``threads``: an explicit count as given; ``auto``: this node's usable CPUs divided among its processes."""
    if setting != "auto":
        return int(setting)
    return max(1, cpus // max(1, local_processes))


def local_process_count(trainer: Any) -> int:
    """How many processes of the run share this node: trainer.devices when it counts them (an int or a list);
    ``trainer``: the typed section (run/sections.TrainerConfig) or a mapping of its keys."""
    devices = trainer.get("devices") if isinstance(trainer, Mapping) else trainer.devices
    if isinstance(devices, int) and devices > 0:
        return devices
    if isinstance(devices, list | tuple):
        return len(devices)
    return 1


def users_thread_count() -> str | None:
    """The OMP_NUM_THREADS the user set: the current value when it is not the one we exported (in this process or in
    the one that started it), else the user's value from before our first export."""
    current = os.environ.get("OMP_NUM_THREADS")
    return _USERS_OMP_NUM_THREADS if current == os.environ.get(OURS_VARIABLE) else current


def use_threads(setting: int | str, local_processes: int = 1) -> int:
    """Set torch's intra-op threads (and OMP_NUM_THREADS for the processes this one starts) and log why.

    An OMP_NUM_THREADS the user exported wins over ``auto``, as it would with torch alone."""
    cpus = usable_cpus()
    exported = users_thread_count()
    if setting == "auto" and exported and exported.isdigit() and int(exported) > 0:
        count, why = int(exported), f"OMP_NUM_THREADS={exported}"
    else:
        count = threads_per_process(setting, cpus.count, local_processes)
        quota = "none" if cpus.quota is None else f"{cpus.quota:g} CPUs"
        why = (
            f"threads={setting}; {cpus.count} CPUs usable (affinity {cpus.affinity}, cgroup quota {quota})"
            f"{f' shared by {local_processes} processes' if local_processes > 1 else ''}"
        )
    torch.set_num_threads(count)
    os.environ.setdefault(USERS_COUNT_VARIABLE, _USERS_OMP_NUM_THREADS or "")  # for the processes we start
    os.environ["OMP_NUM_THREADS"] = os.environ[OURS_VARIABLE] = str(count)  # DDP ranks and data workers start so
    log.info("CPU threads per process: %d (%s)", count, why)
    return count
