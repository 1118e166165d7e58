"""degen-cluster (issue 66): its command line never falls through to a training run, and each check's line says why
it failed, on what a job's task logs hold (no process is started here: tests/test_cluster_check.py runs the jobs)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from degen_train.cli.cluster import main
from degen_train.cluster import check
from degen_train.cluster.simulated import sbatch_options

TEMPLATE = Path(__file__).resolve().parents[2] / "conf" / "cluster" / "degen-train.sbatch"


@pytest.mark.parametrize(("argv", "said"), [
    (["--help"], "usage: degen-cluster"),
    (["check", "--help"], "SIMULATED_FAULT=usr1_mid_step=N"),
    (["check", str(TEMPLATE), "--bogus"], "unrecognized arguments: --bogus"),
    (["check", str(TEMPLATE), "seed"], "'seed' is not an override (KEY=VALUE)"),
    (["check", "no/such.sbatch"], "no/such.sbatch: no such batch script"),
    (["train"], "invalid choice: 'train'"),
])  # fmt: skip
def test_the_command_line_says_what_it_takes_and_never_trains(argv: list[str], said: str,
                                                              capsys: pytest.CaptureFixture) -> None:  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out = capsys.readouterr()
    assert said in out.out + out.err + str(exited.value.code)
    assert exited.value.code in (0, 1, 2) or said in str(exited.value.code)


def test_the_simulated_clusters_module_is_no_door_to_a_training_run() -> None:
    """Issue 66: `python -m tests.simulated_slurm --help` started a full default training run."""
    import sys

    result = subprocess.run([sys.executable, "-m", "degen_train.cluster.simulated", "--help"], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 1 and "degen-cluster check SCRIPT" in result.stderr


def test_a_script_without_its_signal_or_requeue_is_named() -> None:
    template = TEMPLATE.read_text()
    options = sbatch_options(TEMPLATE)
    assert check._signal_line(options).ok and check._requeue_line(options).ok
    broken = {k: v for k, v in options.items() if k not in ("signal", "requeue")}
    assert not check._signal_line(broken).ok and "add #SBATCH --signal=USR1@90" in check._signal_line(broken).seen
    assert not check._requeue_line(broken).ok and "JobRequeue=0" in check._requeue_line(broken).seen
    assert "#SBATCH --signal=USR1@90" in template


def job(tmp_path: Path, name: str, lines: list[str], *, code: int = 0, commands: tuple[str, ...] = (),
        stopped: str = "") -> check.Job:  # fmt: skip
    folder = tmp_path / name
    folder.mkdir()
    for index, command in enumerate(commands):
        (folder / f"step{index}.command").write_text(command)
    for rank, line in enumerate(lines):
        (folder / f"step1.task{rank}.log").write_text(f"[INFO] - {line}\n{stopped}")
    return check.Job.of(subprocess.CompletedProcess([], code, "", ""), folder)


def line(rank: int, world: int, nodes: int, devices: int, run: str) -> str:
    return (f"process {rank} of {world} (node {rank // max(devices, 1)}, local {rank % max(devices, 1)}): DDPStrategy, "
            f"trainer.num_nodes={nodes} trainer.devices={devices}, run folder {run}")  # fmt: skip


def test_ranks_devices_and_the_run_folder_lines(tmp_path: Path) -> None:
    good = job(tmp_path, "good", [line(r, 4, 2, 2, "/r/a") for r in range(4)],
               commands=("degen-train prepare_only=true", "degen-train trainer=gpu"))  # fmt: skip
    assert check._srun_line(good).ok and check._ranks_line(good, 2, 2).ok and check._devices_line(good, 2, 2).ok
    assert "rank 3 of 4 on node 1; strategy DDPStrategy" in check._ranks_line(good, 2, 2).seen
    one_device = job(tmp_path, "one", [line(r, 2, 2, 1, "/r/a") for r in range(2)], commands=("degen-train x",))
    said = check._devices_line(one_device, 2, 2)
    assert not said.ok and "2 × 1, where the allocation is 2 node(s) × 2 task(s)" in said.seen
    no_srun = job(tmp_path, "no_srun", [], code=1, commands=("python prepare_only=true",))
    assert not check._srun_line(no_srun).ok and "no srun step ran degen-train" in check._srun_line(no_srun).seen
    moved = job(tmp_path, "moved", [line(0, 1, 1, 1, "/r/1700000002")])
    said = check._folder_line(job(tmp_path, "first", [line(0, 1, 1, 1, "/r/1700000001")]), moved)
    assert not said.ok and "/r/1700000001 → /r/1700000002" in said.seen and "never the time" in said.seen


def test_compare_names_the_largest_difference_and_the_settings(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:  # fmt: skip
    import json

    from safetensors.torch import save_file

    for name, shift, width in (("a", 0.0, 64), ("b", 1e-3, 128)):
        folder = tmp_path / name / "hf"
        folder.mkdir(parents=True)
        save_file({"bert.embeddings.word_embeddings.weight": torch.ones(4, 2) + shift,
                   "bert.encoder.layer.0.attention.self.query.weight": torch.zeros(2, 2),
                   "cls.predictions.bias": torch.zeros(4) + 2 * shift}, str(folder / "model.safetensors"))  # fmt: skip
        summary = {"val_loss": 3.0 + shift, "config": {"seed": 1, "model": {"hidden_size": width},
                                                        "run_dir": str(tmp_path / name)}}  # fmt: skip
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    main(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert "weights: max |Δw| 0.002 over" in out and "by group: embeddings 0.001, layers 0, head 0.002" in out
    assert "final validation loss: 3 → 3.001 (Δ +0.001)" in out
    assert "settings that differ: model.hidden_size: 64 → 128" in out and "run_dir" not in out
