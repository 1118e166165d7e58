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
import torch
from safetensors.torch import load_file

from degen_train.storage.checkpoints import CheckpointError, verified_step
from tests.conftest import FAST, REPO
from tests.helpers import checkpoint_weights, degen_train, run

STEPS = 60  # long enough that the signal lands mid-run (it is sent at step 5)
LONG = [f"trainer.max_steps={STEPS}", f"scheduler.total_steps={STEPS}", "callbacks.checkpoint.every_n_train_steps=1000",
        "trainer.val_check_interval=1000", "export_hf=false", "final_validation=false"]  # fmt: skip
PROGRESS = ["trainer.enable_progress_bar=true"]  # written to a file: one plain line a step, which the test waits for


def signalled_run(
    run_dir: Path, drill: list[str], signum: int, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """degen-train in a subprocess, sent ``signum`` once it has logged step 5; (exit code, its output)."""
    log = run_dir.parent / f"{run_dir.name}.log"
    command = [str(Path(sys.executable).parent / "degen-train"), *FAST, *drill, *LONG, *extra, *PROGRESS,
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    with open(log, "w") as output:
        environment = env or {**os.environ}
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=REPO, env=environment)
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


def fake_slurm_job(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment of a one-task SLURM job (as Lightning detects one) with an ``scontrol`` that records its
    arguments; (environment, the record file)."""
    bin_dir, record = tmp_path / "bin", tmp_path / "scontrol.args"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "drill", "SLURM_JOB_ID": "4242", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1"}  # fmt: skip
    return {**os.environ, **slurm, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, record


def test_slurm_requeue_signal_checkpoints_requeues_and_the_export_holds_the_final_weights(
    tmp_path: Path, drill: list[str]
) -> None:
    """SIGUSR1 (``sbatch --signal=USR1@90``): before, Lightning wrote RUN/hpc_ckpt_1.ckpt outside checkpoints/,
    exited 0, and its final validation restored that file, so hf/ held older weights than summary.json claimed.
    Now: last.ckpt is written and verified, ``scontrol requeue 4242`` runs, exit 75; the requeued job (same
    command, ckpt_path=auto) finishes and hf/ equals the final checkpoint's weights."""
    env, record = fake_slurm_job(tmp_path)
    run_dir = tmp_path / "run"
    ends = ["export_hf=true", "final_validation=true", "ckpt_path=auto"]
    code, output = signalled_run(run_dir, drill, signal.SIGUSR1, *ends, env=env)
    assert code == 75, output[-3000:]
    assert "SLURM job 4242 requeued" in output and record.read_text().split() == ["requeue", "4242"]
    stopped = int(re.search(r"stopped after step (\d+)", output).group(1))
    assert verified_step(run_dir / "checkpoints" / "last.ckpt") == stopped < STEPS
    assert not list(run_dir.glob("hpc_ckpt_*")) and not (run_dir / "hf").exists()
    command = [str(Path(sys.executable).parent / "degen-train"), *FAST, *drill, *LONG, *ends]
    command.append(f"hydra.run.dir={run_dir}")
    requeued = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    final = checkpoint_weights(run_dir / "checkpoints" / "last.ckpt")
    assert verified_step(run_dir / "checkpoints" / "last.ckpt") == STEPS
    exported = load_file(str(run_dir / "hf" / "model.safetensors"))
    for name, tensor in exported.items():
        torch.testing.assert_close(tensor, final[f"backbone.model.{name}"], rtol=0, atol=0)
    assert record.read_text().split() == ["requeue", "4242"]  # requeued once, not again at the end


def test_a_lightning_hpc_checkpoint_in_the_run_folder_is_refused_naming_it(tmp_path: Path, drill: list[str]) -> None:
    """A folder from Lightning's own requeue (``hpc_ckpt_1.ckpt`` beside checkpoints/): resuming it used to train on
    from the older last.ckpt and then export the hpc file's weights. Refused before anything is written."""
    run_dir = tmp_path / "run"
    run(run_dir, *drill)
    (run_dir / "hpc_ckpt_1.ckpt").write_bytes((run_dir / "checkpoints" / "last.ckpt").read_bytes())
    before = sorted(p.name for p in (run_dir / "config_history").iterdir())
    expected = r"hpc_ckpt_1\.ckpt: written by Lightning's SLURM auto-requeue.*Move it out .*resumes from .*\(step 8\)"
    with pytest.raises(CheckpointError, match=expected):
        run(run_dir, *drill, "trainer.max_steps=12", "ckpt_path=auto")
    assert sorted(p.name for p in (run_dir / "config_history").iterdir()) == before


@pytest.mark.parametrize("stage", ["training a encoder tokenizer", "building examples into"])
def test_sigterm_while_the_data_is_prepared_exits_75_saying_what_is_cached(tmp_path: Path, stage: str) -> None:
    """Issue drill: SIGTERM during data preparation or tokenizer training exited 143 with no message (the handler
    started only with training). Now: exit 75, the cache named, and the same command goes on from it."""
    import random

    words = [f"w{i}" for i in range(3000)]
    draw = random.Random(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(draw.choices(words, k=120)) for _ in range(12000)))
    cache = tmp_path / "cache"
    folder = tmp_path / "run"
    command = [str(Path(sys.executable).parent / "degen-train"), *FAST, "data=text", f"data.path={corpus}",
               f"data.cache_dir={cache}", "data.tokenizer.vocab_size=2000", "trainer.max_steps=1", "export_hf=false",
               f"hydra.run.dir={folder}"]  # fmt: skip
    log = tmp_path / "run.log"
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + 300
        while stage not in log.read_text() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=300)
    said = log.read_text()
    assert code == 75, said[-3000:]
    assert "SIGTERM received before training started (while preparing the data)" in said and str(cache) in said
    assert not (folder / "checkpoints").exists()
    again = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]


# After the build's "model:" line: the trainer's set-up, the move to the device, the checkpoint's load. A signal
# during the build itself is test_sigterm_while_the_data_is_prepared's window (PreparationStopped).
@pytest.mark.parametrize(("signum", "delay"), [(signal.SIGTERM, 0.7), (signal.SIGTERM, 1.5),
                                               (signal.SIGUSR1, 0.7)])  # fmt: skip
def test_a_signal_between_the_build_and_the_first_update_exits_75(tmp_path: Path, drill: list[str], signum: int,
                                                                   delay: float) -> None:  # fmt: skip
    """Issue 72.5 (SG_SIGTERM, SG_SIGUSR1): 5 of 20 SIGTERMs 2.5–4.5 s after the start exited 143 with no checkpoint
    and no word: between the model's build and the fit, no handler was installed. Sent across that window (from
    the build's "model:" line on), every signal now ends in exit 75, with a verified checkpoint or the word that
    nothing had trained yet."""
    run_dir = tmp_path / "run"
    log = tmp_path / "run.log"
    command = [str(Path(sys.executable).parent / "degen-train"), *FAST, *drill, *LONG, f"hydra.run.dir={run_dir}"]
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + 300
        while "model: " not in log.read_text() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
        time.sleep(delay)
        process.send_signal(signum)
        code = process.wait(timeout=300)
    said = log.read_text()
    assert code == 75, said[-3000:]
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    stopped = re.search(r"stopped after step (\d+)", said)
    if stopped:
        assert verified_step(checkpoint) == int(stopped.group(1))
    else:
        assert "received before training started" in said, said[-3000:]
