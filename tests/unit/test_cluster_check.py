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
    (["check", str(TEMPLATE), "--limit", "0"], "--limit 0: seconds from 10 to 86400"),
    (["check", str(TEMPLATE), "--nodes", "100000"], "100000 node(s) × 2 task(s) = 200000 processes: a check starts "
                                                    "at most 64 on one machine"),
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
        summary = {"val_loss": 3.0 + shift + 10 * shift, "val_terms": {"mle": 3.0 + shift, "cosreg": 1.0},
                   "config": {"seed": 1, "model": {"hidden_size": width}, "objective": {"mle": {"weight": 1.0}},
                              "run_dir": str(tmp_path / name)}}  # fmt: skip
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    main(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert "weights: max |Δw| 0.002 over" in out and "by group: embeddings 0.001, layers 0, head 0.002" in out
    assert "final validation loss (val_loss, each side's weighted regularizers included): 3 → 3.011 (Δ +0.011)" in out
    # issue 74.6: the objective's own loss beside it, named: what two arms with other regularizers share
    assert "the objective's own validation loss (mle, unweighted): 3 → 3.001 (Δ +0.001)" in out
    assert "settings that differ: model.hidden_size: 64 → 128" in out and "run_dir" not in out


def test_sbatch_directives_as_sbatch_reads_them(tmp_path: Path) -> None:
    """Issue 72.4 (CK6) and 74.1: ``--signal USR1@90`` with a space, short options, directives after the first
    command ignored, the allocation by each GPU form."""
    from degen_train.cluster.sbatch_script import Allocation, directives

    text = ("#!/bin/bash\n#SBATCH --signal USR1@90\n#SBATCH -N 2\n#SBATCH --ntasks-per-node 4 # per GPU\n"
            "#SBATCH --gres=gpu:a100:4\n#SBATCH --requeue\nset -e\n#SBATCH --nodes=9\n")
    options = directives(text)
    assert options == {"signal": "USR1@90", "nodes": "2", "ntasks-per-node": "4", "gres": "gpu:a100:4", "requeue": ""}
    assert check._signal_line(options).ok and check._requeue_line(options).ok
    allocation = Allocation.of(options)
    assert (allocation.nodes, allocation.tasks_per_node, allocation.gpus_per_node) == (2, 4, 4)
    assert Allocation.of({"nodes": "1", "ntasks": "8", "gpus": "8"}).gpus_per_node == 8
    assert Allocation.of({"gpus-per-node": "h100:8", "ntasks-per-node": "8"}).scaled().gpus_per_node == 2
    assert not check._signal_line({"signal": "TERM@90"}).ok


def script(tmp_path: Path, body: str, name: str = "job.sbatch") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_the_allocation_against_the_steps_devices(tmp_path: Path) -> None:
    """Issue 74.1: ``#SBATCH --ntasks-per-node=1`` with ``trainer.devices=8`` (the classic mistake) is a ✘ of its
    own, read from the script; devices from the allocation's variables hold."""
    wrong = script(tmp_path, "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=8\n"
                   "srun degen-train recipe=gpt2_mle trainer.devices=8 \\\n    trainer.num_nodes=1\n")
    said = check.allocation_line(check.plan(wrong))
    assert not said.ok and "line 5: trainer.devices=8 where #SBATCH --ntasks-per-node=1" in said.seen
    assert "#SBATCH asks for 8 GPU(s) a node but 1 task(s) a node" in said.seen
    assert check.allocation_line(check.plan(TEMPLATE)).ok
    planned = check.plan(TEMPLATE)
    assert "checked as 1 node(s) × 2 task(s), 2 GPU(s) a node here" in planned.said()[0]


def test_the_tiny_job_keeps_the_scripts_family_and_recipe() -> None:
    """Issue 74.2-3: a decoder recipe in the script gets a tiny decoder (not the encoder that broke it), its model's
    settings and corpus go with the replaced groups (nothing downloads), the user's overrides come last."""
    from degen_train.cluster.tiny_job import rewritten, tiny_model

    assert tiny_model(["recipe=simctg"])[0] == "gpt2_tiny"
    assert tiny_model(["model=llama_base", "objective=mle"])[0] == "llama_tiny"
    assert tiny_model(["recipe=bert_mlm_nsp", "model=base"])[0] == "tiny"
    words = rewritten(["recipe=simctg", "model.init_from=gpt2", "data=wikitext2", "data.tokenizer.vocab_size=8000",
                       "trainer.devices=2", "hydra.run.dir=runs/x"], user=["trainer.max_steps=8"])  # fmt: skip
    assert words[:3] == ["recipe=simctg", "trainer.devices=2", "hydra.run.dir=runs/x"]
    assert "model=gpt2_tiny" in words and "data=builtin" in words and "model.init_from=gpt2" not in words
    assert words[-1] == "trainer.max_steps=8" and "trainer.max_steps=6" not in words
    own = rewritten(["data=wikitext2", "data.tokenizer.vocab_size=8000"], user=[], own_data=True)
    assert "data=wikitext2" in own and "data.tokenizer.vocab_size=8000" in own and "data=builtin" not in own


def test_modules_are_stood_in_and_named(tmp_path: Path) -> None:
    """Issue 74.2: ``module`` and ``ml`` answer exit 0 and log their calls; the check names what the script loads."""
    from degen_train.cluster.sbatch_script import calls_modules, modules_loaded
    from degen_train.cluster.simulated import install

    text = "#!/bin/bash\nmodule purge\nmodule load cuda/12.4 python/3.11\nml gcc/13\n"
    assert modules_loaded(text) == ["cuda/12.4", "python/3.11", "gcc/13"] and calls_modules(text)
    install(tmp_path / "bin")
    result = subprocess.run([str(tmp_path / "bin" / "module"), "load", "cuda/12.4"], capture_output=True,
                            env={"SIMULATED_SLURM_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert result.returncode == 0 and (tmp_path / "module.log").read_text() == "module load cuda/12.4\n"


def test_gpu_variables_are_those_slurm_exports_for_the_form_asked() -> None:
    """Issue 74.1: a --gres script reads SLURM_GPUS_ON_NODE; only a --gpus-per-node one gets SLURM_GPUS_PER_NODE."""
    from degen_train.cluster.simulated import gpu_variables

    gres = gpu_variables({"gres": "gpu:4"}, 2)
    assert gres["SLURM_GPUS_ON_NODE"] == "2" and gres["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "SLURM_GPUS_PER_NODE" not in gres
    assert gpu_variables({"gpus-per-node": "a100:8"}, 2)["SLURM_GPUS_PER_NODE"] == "a100:2"
    assert gpu_variables({}, None) == {}


def test_the_work_folder_is_the_checks_own(tmp_path: Path, capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Issue 72.4 (CK11, CK12): --work holding a user's file, a second check into the same folder, a link at any
    depth, a file, are refused naming it, before anything runs; a relative --work is made absolute (the stand-in's
    folder on PATH stays valid in a job that changed folder)."""
    from degen_train.cli.cluster import own_folder

    held = tmp_path / "mine"
    (held / "one-process").mkdir(parents=True)
    (held / "one-process" / "notes.txt").write_text("a user's file")
    (tmp_path / "link").symlink_to(tmp_path / "empty", target_is_directory=True)
    (tmp_path / "empty").mkdir()
    for given, said in ((held, "already holds one-process; the check writes into a new or empty folder"),
                        (tmp_path / "link" / "work", "is a link; the check writes only into a folder of its own"),
                        (Path("/etc/passwd"), "exists and is not a folder")):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            main(["check", str(TEMPLATE), "--work", str(given)])
        assert said in str(exited.value.code)
    assert (held / "one-process" / "notes.txt").read_text() == "a user's file"
    monkeypatch.chdir(tmp_path)
    assert own_folder(Path("fresh")) == tmp_path / "fresh"


def test_overrides_and_options_in_any_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 74.4 (CK15): overrides after the options, as the usage line puts them."""
    seen = {}

    def planned(script, **given):  # noqa: ANN001, ANN003, ANN202
        seen.update(given)
        raise ValueError("stop here")

    monkeypatch.setattr(check, "plan", planned)
    with pytest.raises(SystemExit) as exited:
        main(["check", str(TEMPLATE), "--nodes", "2", "model=gpt2_tiny", "--ntasks-per-node", "1", "seed=3"])
    assert "stop here" in str(exited.value.code)
    assert seen["overrides"] == ["model=gpt2_tiny", "seed=3"] and seen["nodes"] == 2 and seen["per_node"] == 1


def test_a_job_that_never_trained_is_one_line_with_its_cause(tmp_path: Path) -> None:
    """Issue 74.4: no srun at all, srun without degen-train, and tasks that never started training: each one cause,
    the script's or the task's own line, never the srun or folder advice."""
    quiet = job(tmp_path, "quiet", [], code=127)
    quiet.output = "job.sbatch: line 4: module: command not found\n"
    said = quiet.never_trained()
    assert said.startswith("the script ended (exit 127) before its first srun") and "module: command not found" in said
    other = job(tmp_path, "other", [], code=1, commands=("hostname",))
    assert "no srun step ran degen-train (its steps ran: hostname)" in other.never_trained()
    stuck = job(tmp_path, "stuck", ["ValueError: You set `devices=8` in Lightning, but the number of tasks per node "
                                    "configured in SLURM `--ntasks-per-node=1` does not match."], code=1,
                commands=("degen-train trainer.devices=8",))  # fmt: skip
    assert "no task reached the start of training (exit 1)" in stuck.never_trained()
    assert "--ntasks-per-node=1` does not match" in stuck.never_trained()
    assert job(tmp_path, "good", [line(0, 1, 1, 1, "/r/a")], commands=("degen-train x",)).never_trained() is None


def test_resumed_holds_only_when_the_requeued_job_resumed_there(tmp_path: Path) -> None:
    """Issue 74.5: equal weights alone prove nothing (a requeued job that started afresh trains the same updates):
    the line holds only when the requeued job's log says it resumed from the signalled job's checkpoint."""
    first = job(tmp_path, "first", [line(0, 1, 1, 1, str(tmp_path / "run"))])
    afresh = job(tmp_path, "afresh", [line(0, 1, 1, 1, str(tmp_path / "run"))])
    said = check._resumed_line(first, afresh, afresh, 5)
    assert not said.ok and f"did not resume from {tmp_path / 'run' / 'checkpoints' / 'last.ckpt'} at update 5: it " \
        "started afresh" in said.seen  # fmt: skip
    assert not check._resumed_line(first, afresh, afresh, None).ok
