"""The log's ``time to first step`` (run/startup_clock.py, issue 73.3): the stages add up to the whole, a process's
first run counts from the process's start, a later one (a sweep's next member) from its own, and it is said once."""

from __future__ import annotations

import logging

import pytest

from degen_train.run import startup_clock
from degen_train.run.startup_clock import StartupClock


def test_the_stages_add_up_and_a_later_run_counts_from_its_own_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(startup_clock, "_CLOCKS_STARTED", [0])
    now = iter([100.0, 101.0, 103.5, 104.0, 110.0])
    monkeypatch.setattr(startup_clock, "_now", lambda: next(now))
    monkeypatch.setattr("psutil.Process.create_time", lambda self: 90.0)
    clock = StartupClock()  # train() entered at 100, 10 s after the process started
    clock.mark("the check")
    clock.mark("the data")
    clock.mark("the build")
    with caplog.at_level(logging.INFO, logger="degen_train"):
        clock.on_train_batch_start(None, None, None, 0)
        clock.on_train_batch_start(None, None, None, 1)  # said once
    assert clock.time_to_first_step == pytest.approx(20.0)
    said = [r.getMessage() for r in caplog.records if "time to first step" in r.getMessage()]
    assert said == ["time to first step: 20.0 s since the process started (imports and the config's check 10.0 s, "
                    "the check 1.0 s, the data 2.5 s, the build 0.5 s, the trainer's start (its setup, the sanity "
                    "check, the loaders) 6.0 s)"]  # fmt: skip
    now = iter([200.0, 201.0, 205.0])
    later = StartupClock()  # the sweep's next member, in the same process
    later.mark("the check")
    later.on_train_batch_start(None, None, None, 0)
    assert later.time_to_first_step == pytest.approx(5.0) and later.since.startswith("this run's start")
    assert [stage for stage, _ in later.stages(205.0)][0] == "the check"
