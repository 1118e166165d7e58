"""A run folder handed over by someone else: its config builds only the house's targets, and a reproduction
writes only into its own folder (the source run stays byte-for-byte as it was)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import FAST
from tests.helpers import degen_train, run


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
    result = degen_train("--reproduce", str(handed), f"hydra.run.dir={tmp_path / 'again'}")
    assert result.returncode != 0
    assert "names _target_ 'os.system' at callbacks.evil._target_, which degen-train's own configs never" in (
        result.stderr
    )
    assert not marker.exists() and not (tmp_path / "again").exists()


def test_a_reproduction_with_another_seed_leaves_the_source_untouched(tmp_path: Path, source_run: Path) -> None:
    """Before: the recorded absolute paths sent the new run's checkpoints and logs into the source run (the old
    test passed only because the same seed wrote the same bytes)."""
    before = fingerprint(source_run)
    again = tmp_path / "again"
    result = degen_train("--reproduce", str(source_run), "seed=7", "trainer.enable_progress_bar=false",
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


def test_analysis_reads_only_files_inside_a_handed_over_folder(tmp_path: Path, source_run: Path) -> None:
    """Before: degen-analyze read whatever file RUN/config.yaml named as its corpus (/etc/passwd, say) and created
    the cache folder the config named."""
    from degen_train.evaluation.analyze import analyze

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
    from degen_train.storage.own_runs import remember

    remember(runs / "own", json.loads((runs / "own" / "summary.json").read_text())["provenance"]["run_id"])
    report_main([str(runs), "--out", str(tmp_path / "report")])
    assert (runs / "own" / "analysis" / "metrics.json").exists()


def test_a_model_folder_without_its_tokenizer_is_refused(tmp_path: Path, source_run: Path) -> None:
    """Before: degen-eval and degen-analyze scored with an empty 5-token tokenizer (every word [UNK]), exit 0."""
    from degen_train.cli.evaluate import main as evaluate_main
    from degen_train.evaluation.analyze import analyze

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

    from degen_train.run.table import end_of_run_table

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

    from degen_train.run.table import end_of_run_table

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
    """Issue drill: a record whose allowed targets point at the user's own folders. Before: the top-k rotation
    deleted step=1 and step=2 in the user's checkpoint folder and overwrote its last.ckpt; the Trainer's root, the
    loggers, an added TensorBoard logger and the data cache wrote at the record author's paths; the record's hub
    upload, Hydra settings and defaults list were obeyed."""
    victims = {name: tmp_path / "mine" / name for name in ("ckpts", "root", "logs", "tb", "cache")}
    for folder in victims.values():
        folder.mkdir(parents=True)
    for name in ("step=00000001.ckpt", "step=00000002.ckpt", "last.ckpt"):
        (victims["ckpts"] / name).write_bytes(b"my own checkpoint " + name.encode())
    before = {name: fingerprint(folder) for name, folder in victims.items()}
    config = yaml.safe_load((source_run / "config.yaml").read_text())
    config["callbacks"]["checkpoint"].update(dirpath=str(victims["ckpts"]), every_n_train_steps=1, save_top_k=1)
    config["trainer"]["default_root_dir"] = str(victims["root"])
    config["logger"]["csv"]["save_dir"] = str(victims["logs"])
    config["logger"]["tensorboard"] = {"_target_": "lightning.pytorch.loggers.TensorBoardLogger",
                                       "save_dir": str(victims["tb"]), "name": "../escape", "version": ""}  # fmt: skip
    config["data"]["cache_dir"] = str(victims["cache"])
    config["push_to_hub"] = {"repo_id": "someone/else", "private": False, "message": "x", "dry_run": False}
    config["defaults"] = ["_self_", {"override hydra/launcher": "basic"}]
    config["hydra"] = {"run": {"dir": str(victims["root"])}}
    handed = tmp_path / "handed"
    handed.mkdir()
    (handed / "config.yaml").write_text(yaml.safe_dump(config))
    again = tmp_path / "again"
    result = degen_train("--reproduce", str(handed), "trainer.enable_progress_bar=false", f"hydra.run.dir={again}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {name: fingerprint(folder) for name, folder in victims.items()} == before
    assert not (tmp_path / "mine" / "escape").exists()
    assert (again / "checkpoints" / "last.ckpt").is_file() and (again / "logs" / "metrics.csv").is_file()
    said = result.stdout + result.stderr
    for line in ("push_to_hub.repo_id=someone/else dropped", "its Hydra settings (hydra:) dropped",
                 "its defaults list (defaults:) dropped", f"callbacks.checkpoint.dirpath={victims['ckpts']} replaced",
                 f"logger.csv.save_dir={victims['logs']} replaced", "logger.tensorboard.name=../escape replaced",
                 "the recorded config reads data.path="):  # fmt: skip
        assert line in said, line
    recorded = yaml.safe_load((again / "config.yaml").read_text())
    assert recorded["push_to_hub"]["repo_id"] is None and recorded["data"]["cache_dir"] != str(victims["cache"])


def test_an_interpolation_in_a_record_is_refused(tmp_path: Path, source_run: Path) -> None:
    """Issue drill: `data.path: ${oc.env:SOME_VAR}` was resolved against the user's environment, training on (and
    exporting into the tokenizer) a file the user never named."""
    config = yaml.safe_load((source_run / "config.yaml").read_text())
    config["data"]["path"] = "${oc.env:SOME_VAR}"
    handed = tmp_path / "handed"
    handed.mkdir()
    (handed / "config.yaml").write_text(yaml.safe_dump(config))
    result = degen_train("--reproduce", str(handed), f"hydra.run.dir={tmp_path / 'again'}")
    assert result.returncode != 0
    assert "holds the interpolation '${oc.env:SOME_VAR}' at data.path; a recorded config is written resolved" in (
        result.stderr
    )
    assert not (tmp_path / "again").exists()


def test_a_resumed_folder_never_writes_through_a_link(tmp_path: Path, drill: list[str]) -> None:
    """Issue drill: logs/metrics.csv and train.log linked to files elsewhere; ckpt_path=last replaced one outside
    file with the metrics and appended the log to the other (rc 0). Refused before anything is written."""
    folder = tmp_path / "run"
    common = [*FAST, *drill, "trainer.max_steps=2", "export_hf=false"]
    result = degen_train(*common, f"hydra.run.dir={folder}")
    assert result.returncode == 0, result.stderr[-3000:]
    outside = {name: tmp_path / f"victim_{name}.txt" for name in ("metrics", "log")}
    for name, path in outside.items():
        path.write_text(f"someone's {name} file\n")
    for link, target in ((folder / "logs" / "metrics.csv", outside["metrics"]), (folder / "train.log", outside["log"])):
        link.unlink()
        link.symlink_to(target)
    result = degen_train(*common, "trainer.max_steps=4", f"hydra.run.dir={folder}", "ckpt_path=last")
    assert result.returncode != 0
    assert f"{folder} holds symbolic links (" in result.stderr and "never through a link" in result.stderr
    assert all(path.read_text() == f"someone's {name} file\n" for name, path in outside.items())
    with pytest.raises(ValueError, match=r"holds symbolic links"):  # the Python API too
        run(folder, *drill, "trainer.max_steps=4", "export_hf=false", "ckpt_path=last")
    assert all(path.read_text() == f"someone's {name} file\n" for name, path in outside.items())
