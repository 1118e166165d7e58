"""threads=auto: the CPUs this process may use (affinity, cgroup quota) shared by the node's processes (issue 24.7)."""

from __future__ import annotations

import logging

import pytest
import torch
from omegaconf import OmegaConf

from degen_train.config import load_config
from degen_train.config.schema import validate_config
from degen_train.devices import threads
from degen_train.devices.threads import (
    UsableCpus,
    cgroup_quota_cpus,
    local_process_count,
    threads_per_process,
    use_threads,
)


def test_a_cgroup_quota_is_read_from_cpu_max() -> None:
    assert cgroup_quota_cpus("max 100000\n") is None
    assert cgroup_quota_cpus("150000 100000\n") == 1.5
    assert cgroup_quota_cpus("400000 100000") == 4.0


def test_usable_cpus_are_the_affinity_capped_by_the_quota_rounded_down() -> None:
    assert UsableCpus(affinity=8, quota=None).count == 8
    assert UsableCpus(affinity=8, quota=2.5).count == 2  # a third thread would be throttled
    assert UsableCpus(affinity=2, quota=4.0).count == 2
    assert UsableCpus(affinity=4, quota=0.5).count == 1


def test_auto_shares_the_cpus_among_the_nodes_processes() -> None:
    assert threads_per_process("auto", cpus=8, local_processes=1) == 8
    assert threads_per_process("auto", cpus=8, local_processes=3) == 2
    assert threads_per_process("auto", cpus=2, local_processes=4) == 1
    assert threads_per_process(3, cpus=8, local_processes=2) == 3
    assert local_process_count({"devices": 2}) == 2
    assert local_process_count({"devices": [0, 1, 2]}) == 3
    assert local_process_count({"devices": "auto"}) == 1


@pytest.fixture
def restore_threads(monkeypatch: pytest.MonkeyPatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_USERS_OMP_NUM_THREADS", None)  # whatever this test process was started with
    monkeypatch.delenv(threads.USERS_COUNT_VARIABLE, raising=False)
    monkeypatch.delenv(threads.OURS_VARIABLE, raising=False)
    yield monkeypatch
    torch.set_num_threads(before)


def test_a_count_is_set_and_logged_and_passed_to_started_processes(restore_threads, caplog) -> None:
    caplog.set_level(logging.INFO, logger="degen_train")
    assert use_threads(1) == 1
    assert torch.get_num_threads() == 1
    import os

    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert "CPU threads per process: 1 (threads=1; " in caplog.text
    # our own export from the run before is not taken for the user's on the next run in this Python process
    assert use_threads("auto") == threads_per_process("auto", cpus=_usable(), local_processes=1)


def test_an_exported_omp_num_threads_wins_over_auto(restore_threads, caplog) -> None:
    caplog.set_level(logging.INFO, logger="degen_train")
    restore_threads.setenv("OMP_NUM_THREADS", "1")
    assert use_threads("auto", local_processes=1) == 1
    assert "(OMP_NUM_THREADS=1)" in caplog.text


@pytest.mark.parametrize("value", ["0", "many"])
def test_a_bad_thread_count_is_named(value: str) -> None:
    cfg = load_config([f"threads={value}"])
    with pytest.raises(ValueError, match=f"threads={value!r}" if value == "many" else "threads=0"):
        validate_config(cfg)
    assert OmegaConf.select(load_config([]), "threads") == "auto"


def _usable() -> int:
    from degen_train.devices.threads import usable_cpus

    return usable_cpus().count


def test_the_users_count_holds_for_every_run_in_the_process(restore_threads, caplog) -> None:
    """Issue 55.8: OMP_NUM_THREADS=1 exported before the process started; the first run exported its own count, and
    the second took that for ours and went back to auto (7x the CPU time of a hand loop after a bench run)."""
    restore_threads.setattr(threads, "_USERS_OMP_NUM_THREADS", "1")
    restore_threads.setenv("OMP_NUM_THREADS", "1")
    caplog.set_level(logging.INFO, logger="degen_train")
    assert use_threads("auto") == 1
    assert use_threads("auto") == 1  # before: threads_per_process("auto", ...), every usable CPU
    assert caplog.text.count("(OMP_NUM_THREADS=1)") == 2
    restore_threads.setenv("OMP_NUM_THREADS", "2")  # set by the user in this process since: it wins
    assert use_threads("auto") == 2


def test_a_process_we_start_takes_the_users_count_not_our_export(restore_threads) -> None:
    """A process this one starts (a DDP rank, a two-process job running several runs) inherits our OMP_NUM_THREADS;
    the user's value travels beside it, so the child's later runs use the user's setting (none here: auto), not
    the parent's export (which made spectrum control's SVD run on 2 threads beside a 1-thread reference)."""
    import subprocess
    import sys

    use_threads(2)  # the parent's run exports 2; the user exported nothing
    child = "from degen_train.devices import threads; print(threads.users_thread_count())"
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "None"  # before: "2", the parent's export, on the child's first run
