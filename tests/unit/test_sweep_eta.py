"""Issue 71.5: the sweep's cost estimate counts each member's start-up (data preparation, the model's build) and,
once the first member finishes, its whole time with the in-run evaluation; the sweep's closing line checks both
against the time it took."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from degen_train.callbacks import sweep_eta


@pytest.fixture
def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(sweep_eta.PLAN_VARIABLE, json.dumps({"members": 6, "jobs": 2, "dir": str(tmp_path)}))
    monkeypatch.setitem(sweep_eta.MEMBER, "started", None)
    return tmp_path


def test_the_estimate_counts_the_start_up_and_the_first_whole_member(
    sweep: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([100.0, 160.0, 160.0, 400.0])  # started; step 5 (60 s in, 10 s of them steps), twice; finished
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    sweep_eta.member_started()
    with caplog.at_level(logging.WARNING, logger="degen_train.throughput"):
        sweep_eta.announce(300, 2.0)
        sweep_eta.announce(300, 2.0)  # a second member's: said once per sweep
        sweep_eta.member_finished()
    said = [r.getMessage() for r in caplog.records]
    # 6 members × (50 s start-up + 300 × 2 s) ÷ 2 = 1,950 s; the whole member: 300 s, × 6 ÷ 2 = 900 s
    assert said[0].startswith("sweep estimate: 6 members × (50 s start-up + 300 steps × 2 s a step) ÷ 2 side by side "
                              "≈ 32.5 min")  # fmt: skip
    assert said[1] == ("sweep estimate, from the first member's whole run: 6 members × 5.0 min ÷ 2 side by side ≈ "
                       "15.0 min")  # fmt: skip
    assert len(said) == 2
    assert sweep_eta.estimates_said(sweep) == ("estimated 32.5 min at the first member's step 5, estimated 15.0 min "
                                                "from its whole run")  # fmt: skip


def test_a_marker_that_is_no_record_is_left_out(sweep: Path) -> None:
    (sweep / sweep_eta.MARKER).write_text("[1, 2")
    (sweep / sweep_eta.WHOLE_MARKER).write_text(json.dumps({"estimate": 1e300}))
    assert sweep_eta.estimates_said(sweep) == ""
