"""A run folder handed over by someone else: its config builds only the house's targets, and a reproduction
writes only into its own folder (the source run stays byte-for-byte as it was)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import FAST
from tests.helpers import command, run


def fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


@pytest.fixture(scope="module")
def source_run(tmp_path_factory: pytest.TempPathFactory, drill: list[str]) -> Path:
    folder = tmp_path_factory.mktemp("source")
    run(folder, *drill, "trainer.max_steps=2")
    return folder


def test_a_recorded_config_may_only_build_the_house_targets(tmp_path: Path, source_run: Path) -> None:
    """Before: `_target_: os.system` (or sympy.sympify, numpy.savetxt) in RUN/config.yaml was instantiated."""
    handed = tmp_path / "handed"
    handed.mkdir()
    config = yaml.safe_load((source_run / "config.yaml").read_text())
    marker = tmp_path / "code-ran"
    config["callbacks"]["evil"] = {"_target_": "os.system", "command": f"touch {marker}"}
    (handed / "config.yaml").write_text(yaml.safe_dump(config))
    result = command("degen-train", "--reproduce", str(handed), f"hydra.run.dir={tmp_path / 'again'}")
    assert result.returncode != 0
    assert "_target_ 'os.system' at callbacks.evil._target_, which degen-train's own configs never build" in (
        result.stderr
    )
    assert not marker.exists() and not (tmp_path / "again").exists()


def test_a_reproduction_with_another_seed_leaves_the_source_untouched(tmp_path: Path, source_run: Path) -> None:
    """Before: the recorded absolute paths sent the new run's checkpoints and logs into the source run (the old
    test passed only because the same seed wrote the same bytes)."""
    before = fingerprint(source_run)
    again = tmp_path / "again"
    result = command("degen-train", "--reproduce", str(source_run), "seed=7", "trainer.enable_progress_bar=false",
                         f"hydra.run.dir={again}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert fingerprint(source_run) == before
    assert (again / "checkpoints" / "last.ckpt").is_file() and (again / "logs" / "metrics.csv").is_file()
    recorded = yaml.safe_load((again / "config.yaml").read_text())
    assert recorded["callbacks"]["checkpoint"]["dirpath"] == f"{again}/checkpoints" and recorded["seed"] == 7


def test_a_run_never_writes_into_another_runs_folder(tmp_path: Path, source_run: Path, drill: list[str]) -> None:
    with pytest.raises(ValueError, match=r"callbacks.checkpoint.dirpath=.* lies in another run's folder"):
        run(tmp_path / "mine", *drill, f"callbacks.checkpoint.dirpath={source_run}/checkpoints")
    with pytest.raises(ValueError, match=r"logger.csv.save_dir=.* lies in another run's folder"):
        run(tmp_path / "mine", *drill, f"logger.csv.save_dir={source_run}")


@pytest.mark.usefixtures("no_analysis_pictures")
def test_analysis_reads_only_files_inside_a_handed_over_folder(tmp_path: Path, source_run: Path) -> None:
    """Before: degen-analyze read whatever file RUN/config.yaml named as its corpus (/etc/passwd, say) and created
    the cache folder the config named."""
    from degen_train.evaluation.model_analysis import analyze

    handed = tmp_path / "handed"
    shutil.copytree(source_run / "hf", handed / "hf")
    config = yaml.safe_load((source_run / "config.yaml").read_text())
    config["data"].update({"path": "/etc/passwd", "cache_dir": str(tmp_path / "planted")})
    (handed / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match=r"names data.path=/etc/passwd, outside the folder: .*--corpus FILE"):
        analyze(handed, out=tmp_path / "analysis", max_sentences=10)
    assert not (tmp_path / "planted").exists()
    # A copy of a run, its corpus elsewhere: refused unless the user says it is theirs (--trust-config) ...
    copied = tmp_path / "copied"
    shutil.copytree(source_run, copied)
    with pytest.raises(ValueError, match=r"outside the folder"):
        analyze(copied, out=tmp_path / "copy", max_sentences=10)
    assert analyze(copied, out=tmp_path / "copy", max_sentences=10, trust_config=True)["layers"]
    # ... while the run this user trained here (listed in their own-runs registry) is analysed on its own corpus.
    assert analyze(source_run, out=tmp_path / "own", max_sentences=10)["layers"]


@pytest.mark.usefixtures("no_analysis_pictures")
def test_the_report_analyses_this_users_runs_and_fails_on_a_run_it_could_not(tmp_path: Path, source_run: Path) -> None:
    """Issue 38 drill: degen-report skipped the analysis of every data=wikitext2 run (data outside the folder),
    printed 'analysis failed' per run and still ended '4 runs (0 failed)', exit 0."""
    from degen_train.cli.report import main as report_main

    runs = tmp_path / "runs"
    shutil.copytree(source_run, runs / "own", ignore=shutil.ignore_patterns("analysis"))  # a copy: not listed
    with pytest.raises(SystemExit) as exited:
        report_main([str(runs), "--out", str(tmp_path / "report")])
    assert exited.value.code == 1
    # The same folder, listed as this user's run: analysed, exit 0.
    from degen_train.core.own_runs import remember

    remember(runs / "own", json.loads((runs / "own" / "summary.json").read_text())["provenance"]["run_id"])
    report_main([str(runs), "--out", str(tmp_path / "report")])
    assert (runs / "own" / "analysis" / "metrics.json").exists()


def test_a_model_folder_without_its_tokenizer_is_refused(tmp_path: Path, source_run: Path) -> None:
    """Before: degen-eval and degen-analyze scored with an empty 5-token tokenizer (every word [UNK]), exit 0."""
    from degen_train.cli.evaluate import main as evaluate_main
    from degen_train.evaluation.model_analysis import analyze

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source_run / "hf" / name, bare / name)
    with pytest.raises(FileNotFoundError, match=r"bare has no tokenizer \(none of tokenizer.json, vocab.txt"):
        analyze(bare, out=tmp_path / "analysis", corpus=str(tmp_path / "unused.txt"))
    sts = tmp_path / "sts.tsv"
    sts.write_text("g\tf\t2017\t0\t4.0\ta man plays\ta person plays\n")
    with pytest.raises(SystemExit) as exited:
        evaluate_main([str(bare), "--sts", str(sts), "--out", str(tmp_path / "eval")])
    assert exited.value.code == 2 and not (tmp_path / "eval" / "eval.json").exists()


def test_the_printed_resume_command_runs_verbatim(tmp_path: Path, drill: list[str]) -> None:
    """A sweep run's folder ('=' and ',' in its name, here a non-ASCII letter too): the resume command the run
    prints is run as printed, by a shell, and goes on with the run's own schedule (scheduler.total_steps kept).
    Before: Hydra split the folder name at '=' and the command failed; without total_steps the LR jumped."""
    import os
    import subprocess
    import sys

    from degen_train.run.end_of_run_table import end_of_run_table

    folder = tmp_path / "sweep" / "optimizer.lr=0.001,seed=2 ü"
    summary = run(folder, *drill, "trainer.max_steps=2", "scheduler.total_steps=4", "export_hf=false")
    typed = [*FAST, *drill, "trainer.max_steps=2", "scheduler.total_steps=4", "export_hf=false"]  # as on the CLI
    table = end_of_run_table(summary, folder, typed)
    lines = [line.strip() for line in table.splitlines()]
    command = next(line.removeprefix("resume").strip() for line in lines if line.startswith("resume"))
    assert "scheduler.total_steps=4" in command and "trainer.max_steps=4" in command
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = yaml.safe_load((folder / "config.yaml").read_text())
    assert resumed["trainer"]["max_steps"] == 4 and resumed["scheduler"]["total_steps"] == 4


def test_a_resume_keeps_the_runs_own_tokenizer(tmp_path: Path, drill: list[str], monkeypatch) -> None:  # noqa: ANN001
    """Resumed with another (empty) cache, the run loads RUN/tokenizer instead of training a new one (before: a new
    one replaced RUN/tokenizer silently); a tokenizer with other tokens there is refused by its recorded hash."""
    import json

    folder = tmp_path / "run"
    run(folder, *drill, "trainer.max_steps=2", "export_hf=false")
    monkeypatch.setenv("DEGEN_TRAIN_CACHE", str(tmp_path / "empty_cache"))
    run(folder, *drill, "trainer.max_steps=4", "export_hf=false", "ckpt_path=last")
    assert not (tmp_path / "empty_cache" / "tokenizers").exists()  # nothing trained: the run's own was used
    spec = json.loads((folder / "tokenizer" / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[50:52]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # the same size, other tokens at two ids
    (folder / "tokenizer" / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=r"was trained with tokenizer \w+, this run has \w+ \(the same vocabulary"):
        run(folder, *drill, "trainer.max_steps=6", "export_hf=false", "ckpt_path=last")


def test_processes_with_different_data_are_named() -> None:
    from degen_train.data.datamodule import check_same_data

    check_same_data([("a1", 10, 2), ("a1", 10, 2)])
    with pytest.raises(ValueError, match=r"rank 0: \('a1', 10, 2\); rank 1: \('b2', 10, 2\)\. Give every node"):
        check_same_data([("a1", 10, 2), ("b2", 10, 2)])


def test_hydra_itself_refuses_a_shell_target_as_the_second_wall(tmp_path: Path) -> None:
    """pyproject.toml requires hydra-core>=1.3.6, the first release with its own target policy: were our allow-list
    bypassed (a config built from Python), Hydra still would not run os.system. With 1.3.2, which the floor once
    allowed, this ran the command."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    marker = tmp_path / "code-ran"
    with pytest.raises(InstantiationException, match=r"os\.system"):
        instantiate({"_target_": "os.system", "command": f"touch {marker}"})
    assert not marker.exists()


def test_a_finished_run_says_so_and_how_to_train_it_longer(tmp_path: Path, drill: list[str]) -> None:
    """Issue drill: after a 20-step run the printed resume command (total_steps=20, max_steps=40) trained steps
    20-40 at learning rate 0. A finished run now prints a branch with a longer schedule, which trains (the rate is
    not 0); the old command is refused, saying why."""
    import csv
    import os
    import subprocess
    import sys

    from degen_train.run.end_of_run_table import end_of_run_table

    folder = tmp_path / "finished"
    summary = run(folder, *drill, "trainer.max_steps=4", "export_hf=false", "scheduler.warmup_steps=1")
    typed = [*FAST, *drill, "trainer.max_steps=4", "export_hf=false", "scheduler.warmup_steps=1"]
    lines = [line.strip() for line in end_of_run_table(summary, folder, typed).splitlines()]
    assert not any(line.startswith("resume") for line in lines)
    finished = next(line for line in lines if line.startswith("finished"))
    assert "its schedule ended at step 4" in finished
    command = finished.split(": ", 1)[1]
    assert f"branch_from={folder.resolve()}@4" in command and "scheduler.total_steps=8" in command
    with pytest.raises(ValueError, match=r"trainer.max_steps=8 runs past scheduler.total_steps=4, where the learning "
                                         r"rate has decayed to 0: steps 4\.\.8 would change nothing"):  # fmt: skip
        run(folder, *drill, "export_hf=false", "scheduler.warmup_steps=1", "scheduler.total_steps=4",
            "trainer.max_steps=8", "ckpt_path=last")  # fmt: skip
    keep = [*drill, "callbacks.checkpoint.save_top_k=-1", "callbacks.checkpoint.every_n_train_steps=4"]
    run(tmp_path / "parent", *keep, "trainer.max_steps=4", "export_hf=false", "scheduler.warmup_steps=1")
    typed = [*FAST, *keep, "trainer.max_steps=4", "export_hf=false", "scheduler.warmup_steps=1"]
    summary = __import__("json").loads((tmp_path / "parent" / "summary.json").read_text())
    finished = next(line.strip() for line in end_of_run_table(summary, tmp_path / "parent", typed).splitlines()
                    if line.strip().startswith("finished"))  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(finished.split(": ", 1)[1], shell=True, capture_output=True, text=True, env=env,
                            timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    with open(Path(f"{(tmp_path / 'parent').resolve()}-longer") / "logs" / "metrics.csv") as handle:
        rates = [float(r["lr-AdamW/pg1"]) for r in csv.DictReader(handle) if r.get("lr-AdamW/pg1")]
    assert len(rates) == 4 and min(rates) > 0  # steps 4..8 train, the first one too


def test_a_reproduction_writes_and_deletes_nothing_outside_its_own_folder(tmp_path: Path, source_run: Path) -> None:
    """Issue drills (rounds 4 and 5): a record whose allowed targets point at the user's own folders. Before: the
    top-k rotation deleted step=1 and step=2 in the user's checkpoint folder and overwrote its last.ckpt; the
    Trainer's root, the loggers, an added TensorBoard logger and the data cache wrote at the record author's paths;
    `logger.csv.save_dir: RUN/../victim` was rebased to `${run_dir}/../victim` and trusted; a checkpoint file name
    `../../victim/step={step:08d}` wrote there and its rotation deleted the user's step=00000001.ckpt; a profiler's
    dirpath wrote outside; the record's hub upload, Hydra settings and defaults list were obeyed."""
    victims = {name: tmp_path / "mine" / name for name in ("ckpts", "root", "logs", "tb", "cache", "profile")}
    for folder in victims.values():
        folder.mkdir(parents=True)
    for name in ("step=00000001.ckpt", "step=00000002.ckpt", "last.ckpt"):
        (victims["ckpts"] / name).write_bytes(b"my own checkpoint " + name.encode())
    (victims["logs"] / "metrics.csv").write_text("my own metrics\n")
    before = {name: fingerprint(folder) for name, folder in victims.items()}
    handed = tmp_path / "handed"
    config = yaml.safe_load((source_run / "config.yaml").read_text())
    config["run_dir"] = str(handed)
    config["callbacks"]["checkpoint"].update(dirpath=str(victims["ckpts"]), every_n_train_steps=1, save_top_k=2,
                                             filename="../../mine/ckpts/step={step:08d}")  # fmt: skip
    config["trainer"]["default_root_dir"] = str(victims["root"])
    config["trainer"]["profiler"] = {"_target_": "lightning.pytorch.profilers.PyTorchProfiler",
                                     "dirpath": str(victims["profile"]), "filename": "../../escape"}  # fmt: skip
    config["logger"]["csv"]["save_dir"] = f"{handed}/../mine/logs"
    config["logger"]["tensorboard"] = {"_target_": "lightning.pytorch.loggers.TensorBoardLogger",
                                       "save_dir": str(victims["tb"]), "name": "../escape", "version": ""}  # fmt: skip
    config["data"]["cache_dir"] = str(victims["cache"])
    config["push_to_hub"] = {"repo_id": "someone/else", "private": False, "message": "x", "dry_run": False}
    config["defaults"] = ["_self_", {"override hydra/launcher": "basic"}]
    config["hydra"] = {"run": {"dir": str(victims["root"])}}
    handed.mkdir()
    (handed / "config.yaml").write_text(yaml.safe_dump(config))
    again = tmp_path / "again"
    corpus = config["data"]["path"]  # an input: the user names it (a handed-over record never chooses one)
    result = command("degen-train", "--reproduce", str(handed), "trainer.enable_progress_bar=false",
                     f"hydra.run.dir={again}", f"data.path={corpus}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert {name: fingerprint(folder) for name, folder in victims.items()} == before
    assert not (tmp_path / "mine" / "escape").exists() and not (tmp_path / "escape").exists()
    assert (again / "checkpoints" / "last.ckpt").is_file() and (again / "logs" / "metrics.csv").is_file()
    said = result.stdout + result.stderr
    left_out = next(line for line in said.splitlines() if "not read, this run decides them" in line)
    for part in ("push_to_hub.repo_id=someone/else", 'hydra={"run"', "defaults=", "logger={",
                 f"callbacks.checkpoint.dirpath={victims['ckpts']}", "callbacks.checkpoint.filename=../../mine",
                 'trainer.profiler={"_target_": "lightning.pytorch.profilers.PyTorchProfiler"', "data.cache_dir=",
                 f"trainer.default_root_dir={victims['root']}"):  # fmt: skip
        assert part in left_out, part
    assert f"and from your command line: data.path={corpus}" in said
    recorded = yaml.safe_load((again / "config.yaml").read_text())
    assert recorded["push_to_hub"]["repo_id"] is None and recorded["data"]["cache_dir"] != str(victims["cache"])
    assert recorded["callbacks"]["checkpoint"]["filename"] == "step={step:08d}"
    assert recorded["trainer"].get("profiler") is None and list(recorded["logger"]) == ["csv"]  # outputs: left out


def test_an_interpolation_in_a_record_is_refused(tmp_path: Path, source_run: Path) -> None:
    """Issue drill: `data.path: ${oc.env:SOME_VAR}` was resolved against the user's environment, training on (and
    exporting into the tokenizer) a file the user never named."""
    config = yaml.safe_load((source_run / "config.yaml").read_text())
    config["data"]["path"] = "${oc.env:SOME_VAR}"
    handed = tmp_path / "handed"
    handed.mkdir()
    (handed / "config.yaml").write_text(yaml.safe_dump(config))
    result = command("degen-train", "--reproduce", str(handed), f"hydra.run.dir={tmp_path / 'again'}")
    assert result.returncode != 0
    assert "data.path='${oc.env:SOME_VAR}' holds an interpolation; a recorded setting is a plain value" in (
        result.stderr
    )
    assert not (tmp_path / "again").exists()


def test_a_resumed_folder_never_writes_through_a_link(tmp_path: Path, drill: list[str]) -> None:
    """Issue drill: logs/metrics.csv and train.log linked to files elsewhere; ckpt_path=last replaced one outside
    file with the metrics and appended the log to the other (rc 0). Refused before anything is written."""
    folder = tmp_path / "run"
    common = [*FAST, *drill, "trainer.max_steps=2", "export_hf=false"]
    result = command("degen-train", *common, f"hydra.run.dir={folder}")
    assert result.returncode == 0, result.stderr[-3000:]
    outside = {name: tmp_path / f"victim_{name}.txt" for name in ("metrics", "log")}
    for name, path in outside.items():
        path.write_text(f"someone's {name} file\n")
    for link, target in ((folder / "logs" / "metrics.csv", outside["metrics"]), (folder / "train.log", outside["log"])):
        link.unlink()
        link.symlink_to(target)
    result = command("degen-train", *common, "trainer.max_steps=4", f"hydra.run.dir={folder}", "ckpt_path=last")
    assert result.returncode != 0
    assert f"{folder} holds symbolic links (" in result.stderr and "never through a link" in result.stderr
    assert all(path.read_text() == f"someone's {name} file\n" for name, path in outside.items())
    with pytest.raises(ValueError, match=r"holds symbolic links"):  # the Python API too
        run(folder, *drill, "trainer.max_steps=4", "export_hf=false", "ckpt_path=last")
    assert all(path.read_text() == f"someone's {name} file\n" for name, path in outside.items())


def parent_copy(tmp_path: Path, source_run: Path, *entries: str) -> Path:
    """A copy of a finished run (checkpoint at step 2) whose overrides.json gained ``entries``: a stranger's parent."""
    copy = tmp_path / "parent"
    shutil.copytree(source_run, copy)
    overrides = json.loads((copy / "overrides.json").read_text())
    (copy / "overrides.json").write_text(json.dumps([*overrides, *entries]))
    return copy


def test_a_strangers_parent_builds_no_code(tmp_path: Path, source_run: Path, drill: list[str]) -> None:
    """Issue 43 drill 1: a `_target_` inside a value of a parent's override (the key held none) built torch.load on
    a base64 pickle that ran a shell command; a builtins.open variant truncated a user's file to 0 bytes."""
    import base64
    import os

    marker, victim = tmp_path / "code-ran", tmp_path / "victim.txt"
    victim.write_text("my own notes\n")

    class Payload:
        def __reduce__(self) -> tuple:
            return os.system, (f"touch {marker}",)

    import io

    buffer = io.BytesIO()
    torch.save(Payload(), buffer)  # what torch.load(weights_only=False) unpickles: os.system runs
    payload = base64.b64encode(buffer.getvalue()).decode()
    loads = ("+callbacks.zz={_target_:torch.load,f:{_target_:io.BytesIO,initial_bytes:{_target_:base64.b64decode,"
             f"s:'{payload}'}}}},weights_only:false}}")  # fmt: skip
    opens = f"+callbacks.yy={{_target_:builtins.open,file:'{victim}',mode:w}}"
    for entry, target in ((loads, "torch.load"), (opens, "builtins.open")):
        parent = parent_copy(tmp_path / target, source_run, entry)
        said = rf"{parent}/overrides.json: _target_ '{target}' at callbacks\.\w\w\._target_, which degen-train's own"
        with pytest.raises(ValueError, match=said + " configs never build there"):
            run(tmp_path / target / "branch", *drill, "trainer.max_steps=4", f"branch_from={parent}@2")
    assert not marker.exists() and victim.read_text() == "my own notes\n"


def test_where_a_branch_writes_logs_and_uploads_is_never_its_parents(
    tmp_path: Path, source_run: Path, drill: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 43 drill 2 and 4: a parent's checkpoint folder and top-k deleted the user's step=1..3.ckpt and overwrote
    their last.ckpt (rc 0), as did a checkpoint file name ../../VICTIM/x; logger.csv.save_dir rewrote a user's
    metrics.csv, logger.csv.name=../../X wrote into the temp folder; push_to_hub in dict form was inherited; a
    parent's hydra/job_logging=disabled crashed in 7 frames; the branch's change list named none of them."""
    victims = {name: tmp_path / "mine" / name for name in ("ckpts", "logs", "named")}
    for folder in victims.values():
        folder.mkdir(parents=True)
    for name in ("step=00000001.ckpt", "step=00000002.ckpt", "step=00000003.ckpt", "last.ckpt"):
        (victims["ckpts"] / name).write_bytes(b"my own checkpoint " + name.encode())
    (victims["logs"] / "metrics.csv").write_text("my own metrics\n")
    before = {name: fingerprint(folder) for name, folder in victims.items()}
    parent = parent_copy(
        tmp_path, source_run, f"callbacks.checkpoint.dirpath={victims['ckpts']}", "callbacks.checkpoint.save_top_k=2",
        "callbacks.checkpoint.filename='../../mine/named/x'", f"logger.csv.save_dir={victims['logs']}",
        "logger.csv.name=../../escape", "push_to_hub={repo_id:attacker/exfil,private:false}",
        "hydra/job_logging=disabled", "+push_to_hub.dry_run=false")  # fmt: skip
    branch = tmp_path / "branch"
    caplog.set_level("INFO", logger="degen_train")
    summary = run(branch, *drill, "trainer.max_steps=4", f"branch_from={parent}@2", "push_to_hub.dry_run=true")
    assert summary["final_step"] == 4 and "push_to_hub" not in summary
    assert {name: fingerprint(folder) for name, folder in victims.items()} == before
    assert not (tmp_path / "escape").exists() and not any(tmp_path.glob("**/escape"))
    assert sorted(p.name for p in (branch / "checkpoints").glob("*.ckpt")) == ["last.ckpt", "step=00000004.ckpt"]
    assert (branch / "logs" / "metrics.csv").is_file()
    left_out = next(r.getMessage() for r in caplog.records if "not read, this run decides them" in r.getMessage())
    for part in (f"callbacks.checkpoint.dirpath={victims['ckpts']}", "callbacks.checkpoint.filename=../../mine",
                 f"logger.csv.save_dir={victims['logs']}", "logger.csv.name=../../escape",
                 'push_to_hub.repo_id=attacker/exfil', "hydra/job_logging=disabled"):  # fmt: skip
        assert part in left_out, part


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("data.path=${oc.env:HOME}", r"data\.path='\$\{oc\.env:HOME\}' holds an interpolation"),
        ("data.batch_size=abc", r"data\.batch_size='abc': Input should be a valid integer"),
        ("+model.hiden_size=64", r"model\.hiden_size=64: not a setting of degen-train"),
        ("recipe=../../etc", r"recipe='\.\./\.\./etc': not one of the group's configs in conf/recipe/"),
        ("optimizer.lr=1,2", r"'optimizer\.lr=1,2': a package or a sweep is not a setting of one run"),
    ],
)
def test_a_parents_setting_the_house_does_not_allow_is_named_with_its_file(
    tmp_path: Path, source_run: Path, drill: list[str], entry: str, said: str
) -> None:
    """Issue 43 drills 4 and 6: ${oc.env:...} in a parent's overrides was resolved against the user's environment;
    a parent's data.batch_size=abc was refused without naming the parent's file."""
    parent = parent_copy(tmp_path, source_run, entry)
    with pytest.raises(ValueError, match=rf"^{parent}/overrides.json: {said}.*branch_from={parent}@2: a parent's "
                                         r"recorded overrides are read as data"):  # fmt: skip
        run(tmp_path / "branch", *drill, "trainer.max_steps=4", f"branch_from={parent}@2")
    assert not (tmp_path / "branch").exists()


def test_a_report_never_writes_through_a_link(tmp_path: Path, source_run: Path) -> None:
    """Issue 43 drill 5: degen-report on a sweep whose report/ is a link to a user folder replaced that folder's
    report.md and runs.csv, rc 0."""
    from degen_train.cli.report import main as report_main

    sweep, mine = tmp_path / "sweep", tmp_path / "mine"
    shutil.copytree(source_run, sweep / "run", ignore=shutil.ignore_patterns("hf", "checkpoints"))
    mine.mkdir()
    (mine / "report.md").write_text("my own report\n")
    (sweep / "report").symlink_to(mine)
    with pytest.raises(SystemExit) as exited:
        report_main([str(sweep), "--no-analyze"])
    assert exited.value.code == 2
    assert [p.name for p in mine.iterdir()] == ["report.md"] and (mine / "report.md").read_text() == "my own report\n"
    (sweep / "report").unlink()
    (sweep / "report" / "figures").parent.mkdir()
    (sweep / "report" / "figures").symlink_to(mine)  # a link inside the folder: refused the same way
    with pytest.raises(SystemExit):
        report_main([str(sweep), "--no-analyze"])
    assert [p.name for p in mine.iterdir()] == ["report.md"]


def test_a_run_whose_config_was_replaced_is_no_longer_the_users_own(
    tmp_path: Path, drill: list[str], drill_corpus: Path
) -> None:
    """Issue 43 drill 4: a run of the user's own sweep whose config.yaml was replaced was still "own" to the report,
    which then read the corpus the new file named. The registry now vouches for the config.yaml it saw written."""
    from degen_train.core.own_runs import is_own
    from degen_train.evaluation.model_analysis import analyze

    own = tmp_path / "own"
    run(own, *drill, "trainer.max_steps=2")
    assert is_own(own)
    config = yaml.safe_load((own / "config.yaml").read_text())
    secret = tmp_path / "secret.txt"
    secret.write_text("a file the user never named\n" * 50)
    config["data"]["path"] = str(secret)
    (own / "config.yaml").write_text(yaml.safe_dump(config))
    assert not is_own(own)
    with pytest.raises(ValueError, match=rf"names data.path={secret}, outside the folder"):
        analyze(own, out=tmp_path / "analysis", max_sentences=10)


def test_an_export_whose_weights_are_not_its_configs_model_is_named(tmp_path: Path, source_run: Path) -> None:
    """Issue 43 drills 4 and 6: an export whose weights were another model's (8 tensors unused) was fine-tuned
    without a word; a truncated model.safetensors or a changed hidden_size gave a 10-frame traceback."""
    from safetensors.torch import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    from degen_train.cli.finetune import main as finetune_main
    from degen_train.metrics.encode import model_folder

    def export_copy(name: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(source_run / "hf", folder)
        return folder

    other = export_copy("other")
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64))
    save_file({k: v.contiguous() for k, v in gpt2.state_dict().items() if k != "lm_head.weight"},
              str(other / "model.safetensors"))  # fmt: skip
    said = (r"other: the weights in model.safetensors are not the model its config.json describes \(BertFor\w+\): \d+ "
            r"tensors the config has no place for \(transformer.h \(\d+\).*tensors the config needs are missing \(bert")
    with pytest.raises(ValueError, match=said):
        model_folder(other)
    extra = export_copy("extra")
    weights = load_file(str(extra / "model.safetensors"))
    save_file({**weights, **{f"bert.extra.{i}.weight": torch.zeros(2) for i in range(8)}},
              str(extra / "model.safetensors"))  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        finetune_main([str(extra), "--task", "rte", "--data", str(tmp_path), "--out", str(tmp_path / "ft")])
    assert "8 tensors the config has no place for (bert.extra (8))" in str(exited.value.code)
    assert not (tmp_path / "ft").exists()
    wider = export_copy("wider")
    config = json.loads((wider / "config.json").read_text())
    (wider / "config.json").write_text(json.dumps({**config, "hidden_size": config["hidden_size"] * 2}))
    with pytest.raises(ValueError, match=r"shapes differ: bert\.embeddings\.LayerNorm\.bias \(128,\) \(config: \(256,"):
        model_folder(wider)
    cut = export_copy("cut")
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut/model.safetensors is not a readable safetensors file \(.*\): it was "
                                         r"cut short"):  # fmt: skip
        model_folder(cut)


def test_a_model_folders_files_are_never_read_through_a_link(tmp_path: Path, source_run: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Issue 72.7 (LK9): a model folder's tokenizer files were read through links; the Hugging Face cache's own
    snapshots (files linked into its blobs/) are still read."""
    from huggingface_hub import constants

    from degen_train.metrics.encode import model_folder

    folder = tmp_path / "model"
    shutil.copytree(source_run / "hf", folder)
    tokenizer = next(p for p in sorted(folder.iterdir()) if p.name.startswith("tokenizer"))
    elsewhere = tmp_path / "elsewhere" / tokenizer.name
    elsewhere.parent.mkdir()
    tokenizer.rename(elsewhere)
    tokenizer.symlink_to(elsewhere)
    with pytest.raises(ValueError, match=rf"model holds links \(\S+{tokenizer.name} -> \S+elsewhere\S+\): a model "
                                         r"folder is read from its own files only, never through a link"):  # fmt: skip
        model_folder(folder)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "elsewhere"))  # as a snapshot links into blobs/
    assert model_folder(folder) == folder


def test_a_report_reads_a_branchs_parent_only_where_it_was_asked_to(tmp_path: Path, source_run: Path) -> None:
    """A handed-over branch's summary.json names its parent by path; the report read that folder's metrics.csv and
    summary.json wherever it was. It now reads a parent inside the folders it was given, or a run of the user's own."""
    import pandas as pd

    from degen_train.report.branches import branch_table

    sweep, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    shutil.copytree(source_run, elsewhere, ignore=shutil.ignore_patterns("hf", "checkpoints"))  # a copy: not own
    branch = sweep / "cooldown"
    branch.mkdir(parents=True)
    (branch / "summary.json").write_text(json.dumps({"branched_from": {"run": str(elsewhere), "step": 2}}))
    table = pd.DataFrame([{"run": "cooldown", "path": str(branch), "val_loss": 1.0}])
    (heading, rows), = branch_table(table, [sweep])
    assert rows.iloc[0]["run"] == "elsewhere (parent, not read: outside the folders given and not a run of yours)"
    (heading, rows), = branch_table(table, [sweep, elsewhere])
    assert rows.iloc[0]["run"] == "elsewhere (parent, no validation at or before the branch step)"  # read: none


def test_a_config_recorded_before_the_modules_moved_names_them_as_they_are_now(
    tmp_path: Path, source_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46.5: old module paths no longer import (one name per module), so a config recorded before a move is
    read with its `_target_`s rewritten (config/renamed.py): by --reproduce, and when a resume or a finished run
    compares it with today's."""
    import sys

    from degen_train.cli.train import main
    from degen_train.config.handed_over import Door, read_config_file
    from degen_train.run.resume import check_resume

    config = yaml.safe_load((source_run / "config.yaml").read_text())
    config["callbacks"]["isotropy"]["_target_"] = "degen_train.callbacks.isotropy.IsotropyMonitor"  # before issue 46
    config["callbacks"]["checkpoint"]["_target_"] = "degen_train.callbacks.checkpoint.RunCheckpoint"  # never moved
    handed = tmp_path / "handed"
    handed.mkdir()
    (handed / "config.yaml").write_text(yaml.safe_dump(config))
    tree = read_config_file(handed / "config.yaml", door=Door(given=("data.path",))).tree
    assert tree["callbacks"]["isotropy"]["_target_"] == "degen_train.callbacks.isotropy_monitor.IsotropyMonitor"
    with pytest.raises(ModuleNotFoundError):
        __import__("degen_train.callbacks.isotropy")  # the old name is gone
    again = tmp_path / "again"
    monkeypatch.setattr(sys, "argv", ["degen-train", "--reproduce", str(handed), f"hydra.run.dir={again}",
                                      f"data.path={config['data']['path']}"])  # fmt: skip
    main()
    assert (again / "summary.json").is_file()
    today = yaml.safe_load((again / "config.yaml").read_text())
    old = {**today, "callbacks": {**today["callbacks"], "isotropy": {**today["callbacks"]["isotropy"],
           "_target_": "degen_train.callbacks.isotropy.IsotropyMonitor"}}}  # fmt: skip
    assert check_resume(old, today, "last.ckpt") == []


def test_a_runs_folder_handed_to_degen_reproduce_never_chooses_the_corpus_its_analysis_reads(
    tmp_path: Path, source_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make reproduce analysed each finished run of its runs folder with trust_config=True, so a folder handed over
    (a colleague's outputs/reproduce, a finished run's config.yaml edited after it was written) chose the file the
    analysis read as its corpus. Now, as for degen-analyze, only a run this user trained here reads what its config
    names (core/own_runs.py); a stranger's config may name files inside its folder alone."""
    from omegaconf import OmegaConf

    from degen_train.reproduce import runs as reproduce_runs

    folder = tmp_path / "runs" / "gao" / "mle"
    shutil.copytree(source_run, folder)
    secret = tmp_path / "chosen_by_the_author.txt"
    secret.write_text("a file of the folder's author's choosing\n")
    config = yaml.safe_load((folder / "config.yaml").read_text())
    config["data"].update(source="text", path=str(secret))
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setattr("degen_train.run.pretrain.train", lambda cfg: {"final_step": 2})  # finished before
    cfg = OmegaConf.create({"analysis_sentences": 8, "shared_data": str(tmp_path / "no_shared"), "parts": [],
                            "runs": str(tmp_path / "runs")})  # fmt: skip
    with pytest.raises(ValueError, match=r"names data\.path=.*chosen_by_the_author\.txt, outside the folder"):
        reproduce_runs.execute(reproduce_runs.Run("gao", "mle", 0, (), True, folder), cfg)
    assert not (folder / "analysis" / "metrics.json").exists()
