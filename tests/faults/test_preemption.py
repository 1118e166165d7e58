"""Preemption with a real signal: SIGTERM (or Ctrl-C) mid-run writes a verified checkpoint, exits 75, and
``ckpt_path=auto`` then ends with the weights of an uninterrupted run. Before: exit code 0 and nothing saved
(Lightning checks SIGTERM once per epoch, and the loader is endless)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from degen_train.checkpoints import verified_step
from tests.conftest import FAST, REPO
from tests.helpers import checkpoint_weights, degen_train, run

pytestmark = pytest.mark.slow

STEPS = 60  # long enough that the signal lands mid-run (it is sent at step 5)
LONG = [f"trainer.max_steps={STEPS}", f"scheduler.total_steps={STEPS}", "callbacks.checkpoint.every_n_train_steps=1000",
        "trainer.val_check_interval=1000", "export_hf=false", "final_validation=false"]  # fmt: skip
PROGRESS = ["trainer.enable_progress_bar=true"]  # written to a file: one plain line a step, which the test waits for


def signalled_run(run_dir: Path, drill: list[str], signum: int, *extra: str) -> tuple[int, str]:
    """degen-train in a subprocess, sent ``signum`` once it has logged step 5; (exit code, its output)."""
    log = run_dir.parent / f"{run_dir.name}.log"
    command = [str(Path(sys.executable).parent / "degen-train"), *FAST, *drill, *LONG, *extra, *PROGRESS,
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ})
        deadline = time.monotonic() + 300
        while not re.search(r"step ([5-9]|\d\d)/", log.read_text()) and time.monotonic() < deadline:
            if process.poll() is not None:
                break
            time.sleep(0.2)
        process.send_signal(signum)
        code = process.wait(timeout=300)
    return code, log.read_text()


def test_sigterm_mid_run_checkpoints_exits_75_and_resumes_exactly(tmp_path: Path, drill: list[str]) -> None:
    straight, split = tmp_path / "straight", tmp_path / "split"
    code, output = signalled_run(split, drill, signal.SIGTERM)
    assert code == 75, output[-3000:]
    stopped = int(re.search(r"stopped after step (\d+)", output).group(1))
    assert 5 <= stopped < STEPS and "Resume with ckpt_path=auto" in output
    assert verified_step(split / "checkpoints" / "last.ckpt") == stopped  # written whole, sidecar and all
    assert not (split / "summary.json").exists()  # not finished: nothing claims it is
    run(split, *drill, *LONG, "ckpt_path=auto")
    run(straight, *drill, *LONG)
    a = checkpoint_weights(straight / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(split / "checkpoints" / "last.ckpt")
    assert all((a[k] == b[k]).all() for k in a)


def test_ctrl_c_checkpoints_and_exits_75_too(tmp_path: Path, drill: list[str]) -> None:
    code, output = signalled_run(tmp_path / "run", drill, signal.SIGINT)
    assert code == 75 and "SIGINT received: stopped after step" in output, output[-3000:]
    assert verified_step(tmp_path / "run" / "checkpoints" / "last.ckpt") is not None


def test_a_sweep_stops_non_zero_naming_the_interrupted_run(tmp_path: Path, drill: list[str]) -> None:
    """SIGTERM during the first run of a two-run sweep: exit 75, the run is named, the second run never starts and
    nothing is recorded as failed."""
    sweep = tmp_path / "sweep"
    log = tmp_path / "sweep.log"
    command = [str(Path(sys.executable).parent / "degen-train"), "-m", *FAST, *drill, *LONG, *PROGRESS, "seed=1,2",
               f"hydra.sweep.dir={sweep}"]  # fmt: skip
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ})
        deadline = time.monotonic() + 300
        while not re.search(r"step ([5-9]|\d\d)/", log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=300)
    text = log.read_text()
    assert code == 75, text[-3000:]
    assert "the sweep was interrupted in" in text and "seed=1" in text and "Run the same command again" in text
    assert not (sweep / "seed=2").exists() and not list(sweep.rglob("failed.json"))
    result = degen_train("-m", *FAST, *drill, *LONG, "seed=1,2", f"hydra.sweep.dir={sweep}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (sweep / "seed=1" / "summary.json").exists() and (sweep / "seed=2" / "summary.json").exists()
