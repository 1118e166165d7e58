"""degen-cluster check on whole scripts as users run them (issues 66, 74): simulated nodes × tasks over gloo,
SIGUSR1 mid-update, the requeue with the same job id, the job left alone, one process holding the global batch. The
template and a lab's own script (module loads, --gres, its run folder on scratch, a decoder recipe inside it) pass
every line; their broken copies get the lines their faults earn, by message. Lines judged on crafted task logs are
tests/unit/test_cluster_check.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "conf" / "cluster" / "degen-train.sbatch"
LAB = ROOT / "conf" / "cluster" / "lab-example.sbatch"


def checked(script: Path, work: Path, *options: str) -> tuple[int, str, list[str]]:
    command = [str(Path(sys.executable).parent / "degen-cluster"), "check", str(script), "--work", str(work), *options]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    said = result.stdout + result.stderr
    return result.returncode, said, [line for line in result.stdout.splitlines() if line[:1] in "✔✘"]


def test_the_template_passes_every_check(tmp_path: Path) -> None:
    code, said, lines = checked(TEMPLATE, tmp_path / "work", "--nodes", "2", "--ntasks-per-node", "2")
    assert code == 0, said[-4000:]
    assert len(lines) == 12 and all(line.startswith("✔") for line in lines), said[-4000:]
    assert "rank 3 of 4 on node 1; strategy DDPStrategy" in said
    assert "the run folder is the same across the requeue" in said and "scontrol requeue" in said
    assert "✔ resumed = uninterrupted: resumed from " in said and "/checkpoints/last.ckpt at update 5; max |Δw|" in said
    assert "equal to one process holding the global batch (dropout 0): max |Δw|" in said
    assert "the script asks for 1 node(s) × 8 task(s), 8 GPU(s) a node; checked as 2 node(s) × 2 task(s)" in said
    assert "12 of 12 checks hold" in said


def test_a_labs_own_script_passes_from_the_first_try(tmp_path: Path) -> None:
    """Issue 74: the allocation read from the script (2 × 4 with --gres=gpu:4, checked as 2 × 2), `module` stood in,
    SLURM_GPUS_ON_NODE exported as --gres exports it (the script reads it under set -u), its decoder recipe kept
    with a tiny decoder, and the one-process reference built from the same words."""
    code, said, lines = checked(LAB, tmp_path / "work")
    assert code == 0, said[-4000:]
    assert all(line.startswith("✔") for line in lines) and len(lines) == 13, said[-4000:]
    assert "checked as 2 node(s) × 2 task(s), 2 GPU(s) a node here" in said
    assert "the script loads cuda/12.4, python/3.11" in said
    assert "its words recipe=simctg trainer=gpu strategy=ddp trainer.devices=2 trainer.num_nodes=2" in said
    assert "model=gpt2_tiny (a tiny decoder: recipe=simctg's model gpt2_small)" in said


def broken(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    text = LAB.read_text()
    for before, after in edits:
        assert before in text, before
        text = text.replace(before, after)
    path = tmp_path / name
    path.write_text(text)
    return path


def test_no_signal_and_a_date_folder_are_named_and_resume_is_never_vacuous(tmp_path: Path) -> None:
    """The lab script without --signal, its run folder from the time: the requeued job starts afresh in a new folder
    and trains the same six updates (equal weights), which on f9978e2 passed "resumed = uninterrupted"."""
    script = broken(tmp_path, "dated.sbatch", ("#SBATCH --signal=USR1@120\n", ""),
                    ("${SLURM_JOB_NAME}-${SLURM_JOB_ID}", "$(date +%s%N)"))  # fmt: skip
    code, said, lines = checked(script, tmp_path / "work")
    assert code == 1, said[-4000:]
    assert "✘ #SBATCH --signal: none: at its time limit SLURM kills the job without warning" in said
    assert "✘ the run folder is the same across the requeue:" in said and "never the time" in said
    assert "✘ resumed = uninterrupted: the requeued job did not resume from " in said and "started afresh" in said
    assert "✔ equal to one process holding the global batch" in said
    assert sum(line.startswith("✘") for line in lines) == 3, said[-4000:]


def test_one_task_a_node_with_eight_devices_is_named_before_and_after_it_runs(tmp_path: Path) -> None:
    """The classic mistake: #SBATCH --ntasks-per-node=1 with trainer.devices=8. Its own ✘ from the script, then one
    line for a job that never trained, with Lightning's own words, and none of the lines it could not check."""
    script = broken(tmp_path, "one_task.sbatch", ("--ntasks-per-node=4", "--ntasks-per-node=1"),
                    ('trainer.devices="${GPUS}"', "trainer.devices=8"))  # fmt: skip
    code, said, lines = checked(script, tmp_path / "work")
    assert code == 1, said[-4000:]
    assert "trainer.devices=8 where #SBATCH --ntasks-per-node=1" in said
    assert "#SBATCH asks for 4 GPU(s) a node but 1 task(s) a node" in said
    assert "✘ the job trained: no task reached the start of training" in said
    assert "the run folder is the same" not in said and "degen-train runs through srun" not in said


def test_a_script_that_ends_before_srun_and_leaves_a_daemon(tmp_path: Path) -> None:
    """The script starts a detached process (setsid), then fails before its first srun: one line with the script's
    own error, and the daemon is ended with the check and named (issue 72.4, CK9, CK10)."""
    daemon = "setsid sleep 313 &\nsleep 1  # the daemon started\nsource /no/such/env/activate\n"
    script = broken(tmp_path, "early.sbatch", ("module purge\n", daemon))
    code, said, _ = checked(script, tmp_path / "work")
    assert code == 1, said[-4000:]
    assert "✘ the job trained: the script ended (exit 1) before its first srun; its last line: " in said
    assert "/no/such/env/activate: No such file or directory" in said
    assert "✘ every process a job started ended with it: 1 process(es) outlived their job" in said
    assert "sleep 313" in said
    left = subprocess.run(["pgrep", "-f", "sleep 313"], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout
