"""SLURM requeue pieces of the Preemption callback, without a cluster (the real-signal drill is in
tests/faults/test_preemption.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from degen_train.callbacks.preemption import Preemption, requeue_slurm_job, slurm_job_to_requeue
from degen_train.run.build import slurm_without_auto_requeue

SLURM = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "77", "SLURM_PROCID": "0"}


def test_the_job_to_requeue_is_the_array_task_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(key, raising=False)
    assert slurm_job_to_requeue() is None
    monkeypatch.setenv("SLURM_JOB_ID", "900")
    assert slurm_job_to_requeue() == "900"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "899")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert slurm_job_to_requeue() == "899_3"  # scontrol's name for one task of an array
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3; rm -rf ~")
    with pytest.raises(ValueError, match=r"SLURM job id '899_3; rm -rf ~' is not a job id"):
        slurm_job_to_requeue()


def test_a_failing_scontrol_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'Invalid job id specified' >&2\nexit 1\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    said = requeue_slurm_job("5")
    assert said == "requeueing SLURM job 5 failed (scontrol: Invalid job id specified); resubmit it"
    scontrol.unlink()
    assert requeue_slurm_job("5").startswith("requeueing SLURM job 5 failed (")  # no scontrol at all


def test_lightning_auto_requeue_is_off_under_slurm_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in SLURM:
        monkeypatch.delenv(key, raising=False)
    assert slurm_without_auto_requeue() == []
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    (environment,) = slurm_without_auto_requeue()
    assert environment.auto_requeue is False  # Lightning registers no SIGUSR1 handler and writes no hpc_ckpt


def test_the_requeue_signal_is_one_of_the_user_signals() -> None:
    assert Preemption().requeue_signal == signal.SIGUSR1
    assert Preemption(requeue_signal=None).requeue_signal is None
    with pytest.raises(ValueError, match=r"requeue_signal='SIGKILL': choose one of SIGUSR1, SIGUSR2 or null"):
        Preemption(requeue_signal="SIGKILL")
