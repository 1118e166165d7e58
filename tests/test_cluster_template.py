"""The sbatch template (conf/cluster/degen-train.sbatch): its #SBATCH options are sbatch's, and the script, run with
SLURM's environment and a stand-in srun, launches commands degen-train composes (issue 47.7)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

TEMPLATE = REPO / "conf" / "cluster" / "degen-train.sbatch"
# sbatch's long options the template may use (sbatch(1)); a misspelt one would be ignored by a shell and refused by
# sbatch only when a user submits.
SBATCH_OPTIONS = {"job-name", "nodes", "ntasks-per-node", "gpus-per-node", "cpus-per-task", "time", "signal",
                  "requeue", "output", "partition", "account", "mem", "gres", "exclusive"}  # fmt: skip


def test_the_template_asks_sbatch_for_what_a_run_needs() -> None:
    options = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?", TEMPLATE.read_text(), flags=re.MULTILINE))
    assert set(options) <= SBATCH_OPTIONS, set(options) - SBATCH_OPTIONS
    assert options["signal"] == "USR1@90" and "requeue" in options  # what callbacks.preemption answers
    assert options["ntasks-per-node"] == options["gpus-per-node"]  # one task per GPU: Lightning's SLURM layout


def test_the_template_launches_commands_degen_train_composes(tmp_path: Path) -> None:
    """Run with a stand-in srun that records its arguments and lets degen-train print the composed job (Hydra's
    --cfg job: nothing trains); two nodes of 8 GPUs, asked for by type (--gpus-per-node=a100:8)."""
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\necho "srun: $*" >> "$SRUN_LOG"\n'
                    'exec "$@" --cfg job\n')  # fmt: skip
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tmp_path}:{Path(sys.executable).parent}:{os.environ['PATH']}", "SRUN_LOG":
           str(tmp_path / "srun.log"), "SLURM_JOB_NAME": "smoke", "SLURM_JOB_ID": "7", "SLURM_NNODES": "2",
           "SLURM_GPUS_PER_NODE": "a100:8", "RUN_DIR": str(tmp_path / "run")}  # a typed request: a count after it
    result = subprocess.run(["bash", str(TEMPLATE), "recipe=bert_mlm", "model=mini"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    launched = (tmp_path / "srun.log").read_text().splitlines()
    assert launched[0] == "srun: degen-train trainer=gpu prepare_only=true recipe=bert_mlm model=mini"
    assert launched[1].startswith("srun: degen-train trainer=gpu strategy=ddp trainer.devices=8 trainer.num_nodes=2")
    assert "prepare_only: true" in result.stdout and "num_nodes: 2" in result.stdout and "devices: 8" in result.stdout
    assert "precision: bf16-mixed" in result.stdout and "hidden_size: 256" in result.stdout


def recording_srun(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    srun = folder / "srun"
    srun.write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\n'
                    'echo "$(command -v "$1") $*" >> "$SRUN_LOG"\n')  # fmt: skip
    srun.chmod(0o755)
    return folder


@pytest.mark.process  # bash and its stand-ins: processes, though none of them is Python (conftest finds those)
def test_the_template_activates_the_projects_environment(tmp_path: Path) -> None:
    """VENV (or the submit folder's .venv) is activated before any srun: degen-train need not be on PATH at
    submission; without either, one line says what to set (exit 2) before anything starts."""
    venv = tmp_path / "project" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "degen-train").write_text("#!/bin/sh\n")
    (venv / "bin" / "degen-train").chmod(0o755)
    (venv / "bin" / "activate").write_text(f'PATH="{venv / "bin"}:$PATH"\n')
    bare_path = f"{recording_srun(tmp_path / 'bin')}:/usr/bin:/bin"  # no degen-train on it
    env = {"PATH": bare_path, "SRUN_LOG": str(tmp_path / "srun.log"), "SLURM_JOB_NAME": "smoke", "SLURM_JOB_ID": "7",
           "SLURM_NNODES": "1", "SLURM_NTASKS_PER_NODE": "2", "SLURM_SUBMIT_DIR": str(tmp_path / "project")}
    result = subprocess.run(["bash", str(TEMPLATE), "model=tiny"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    launched = (tmp_path / "srun.log").read_text().splitlines()
    assert launched[1].startswith(f"{venv / 'bin' / 'degen-train'} degen-train trainer=gpu strategy=ddp "
                                  "trainer.devices=2")  # fmt: skip
    env.pop("SLURM_SUBMIT_DIR")
    result = subprocess.run(["bash", str(TEMPLATE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "degen-train is not on PATH and " in result.stderr and "set VENV=/path/to/.venv" in result.stderr
