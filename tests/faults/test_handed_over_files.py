"""Every file of a handed-over folder is typed data (hostile drills, round 6): the report's inputs, what the report
writes for other programs, a parent or record that would switch off a run's protections, the sweep folder Hydra
writes, remote code, and the smaller items. Each test names the drill it answers; each fails on c266ffa."""

from __future__ import annotations

import csv
import errno
import json
import os
import re
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from degen_train.cli.report import report
from degen_train.config.handed_over import Door, HandedOverError, hydra_literal, read_config_file, read_overrides_file
from degen_train.core.handed_files import HandedOverFileError, no_remote_code, printable

PRIVATE = b"private bytes of someone else's file\n"


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def corrupt(kind: str, run: Path) -> None:
    """One drill of class 1 (NO2-NO10, OR5) applied to ``run``."""
    if kind == "summary is a list (NO6)":
        (run / "summary.json").write_text("[1, 2]")
    elif kind == "summary is not JSON (NO10)":
        (run / "summary.json").write_text("not json")
    elif kind == "final_step is text (OR5)":
        (run / "summary.json").write_text(json.dumps({**_summary(run), "final_step": "abc"}))
    elif kind == "wic without raw (NO9)":
        (run / "summary.json").write_text(json.dumps({**_summary(run), "eval": {"wic": {}}}))
    elif kind == "failure without error (NO7)":
        (run / "failed.json").write_text(json.dumps({"overrides": ["model.dim=64"]}))
    elif kind == "analysis with no layers (NO8)":
        (run / "analysis").mkdir()
        (run / "analysis" / "metrics.json").write_text(json.dumps({"layers": []}))
    elif kind == "summary links to /dev/zero (NO5)":
        (run / "summary.json").unlink()
        (run / "summary.json").symlink_to("/dev/zero")
    elif kind == "metrics log is a FIFO (NO4)":
        (run / "logs" / "metrics.csv").unlink()
        os.mkfifo(run / "logs" / "metrics.csv")
    elif kind == "summary nested 100,000 deep":
        (run / "summary.json").write_text("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("kind", ["summary is a list (NO6)", "summary is not JSON (NO10)", "final_step is text (OR5)",
                                  "wic without raw (NO9)", "failure without error (NO7)",
                                  "analysis with no layers (NO8)", "summary links to /dev/zero (NO5)",
                                  "metrics log is a FIFO (NO4)", "summary nested 100,000 deep"])  # fmt: skip
def test_a_bad_file_is_one_line_naming_it_and_the_other_runs_stand(sweep: Path, kind: str) -> None:
    """Before: raw AttributeError/KeyError/IndexError/ValueError tracebacks, a hang on the FIFO, MemoryError on
    /dev/zero. Now the report is written, the good run is in it, and the bad file is named with what to do."""
    corrupt(kind, sweep / "bad")
    result = report([sweep], run_analysis=False)
    rows = {row["run"]: row for row in result["rows"]}
    assert rows["good"]["status"] == "finished" and rows["good"]["val_perplexity"] == 50.0
    said = "\n".join(result["unreadable"])
    assert str(sweep / "bad") in said, said
    assert re.search(r"(summary\.json|failed\.json|metrics\.json|metrics\.csv)", said)
    assert re.search(r"replace|remove|not read|never", said), said
    assert "\n" not in said.strip() or len(result["unreadable"]) == 1
    assert (sweep / "report" / "report.md").is_file() and (sweep / "report" / "runs.csv").is_file()


def test_a_cone_image_linked_to_a_private_file_is_never_copied(sweep: Path, tmp_path: Path) -> None:
    """NO3: analysis/cone.png a link to a private file: its bytes were embedded in report.html and copied to
    report/figures/."""
    private = tmp_path / "private.png"
    private.write_bytes(b"\x89PNG\r\n\x1a\n" + PRIVATE)
    (sweep / "bad" / "analysis").mkdir()
    (sweep / "bad" / "analysis" / "cone.png").symlink_to(private)
    result = report([sweep], run_analysis=False)
    assert any("cone.png is a link" in line for line in result["unreadable"])
    written = b"".join(p.read_bytes() for p in (sweep / "report").rglob("*") if p.is_file())
    assert PRIVATE not in written
    import base64

    assert base64.b64encode(b"\x89PNG\r\n\x1a\n" + PRIVATE)[:40] not in written


def test_a_mathtext_value_is_drawn_as_text(sweep: Path) -> None:
    """NO2: an override value `$\\frac{$` ended the whole report in matplotlib's mathtext parse error."""
    (sweep / "bad" / "overrides.json").write_text(json.dumps(["model.name=$\\frac{$"]))
    report([sweep], run_analysis=False)
    assert list((sweep / "report" / "figures").glob("*.png"))


def test_report_md_and_runs_csv_carry_no_markup_or_formula(sweep: Path) -> None:
    """NO1: report.md carried a handed-over <script> seven times; NO12: runs.csv kept =HYPERLINK(...) live."""
    (sweep / "bad" / "overrides.json").write_text(json.dumps(["model.name=<script>alert(1)</script>"]))
    (sweep / "good" / "overrides.json").write_text(json.dumps(['model.name==HYPERLINK("http://x.example/")']))
    report([sweep], run_analysis=False)
    markdown = (sweep / "report" / "report.md").read_text()
    assert "<script>alert" not in markdown and "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    html = (sweep / "report" / "report.html").read_text()
    assert "<script>alert" not in html
    with open(sweep / "report" / "runs.csv", newline="") as handle:
        cells = [cell for row in csv.reader(handle) for cell in row]
    assert "'=HYPERLINK(\"http://x.example/\")" in cells
    assert not any(cell.startswith(("=", "+", "@")) for cell in cells)


def test_a_quoted_value_cannot_forge_a_terminal_line(tmp_path: Path) -> None:
    """NB22: a parent entry with terminal escape bytes reached the terminal raw through Hydra's lexer message."""
    record = tmp_path / "overrides.json"
    record.write_text(json.dumps(["seed=\x1b[2K\rOK: all checks passed\x1b[0m'"]))
    with pytest.raises(HandedOverError) as raised:
        read_overrides_file(record)
    assert "\x1b" not in str(raised.value) and "\r" not in str(raised.value) and "\\x1b" in str(raised.value)
    assert printable("a\x1b[2Kb\nc") == "a\\x1b[2Kb\\nc"


@pytest.mark.parametrize(
    "entry, words",
    [
        ("~callbacks.checkpoint", "the checkpoint callback"),  # NB3
        ("++callbacks.checkpoint=null", "the checkpoint callback"),  # NB5
        ("~callbacks.divergence", "the divergence callback"),  # NB2
        ("~callbacks.preemption", "the preemption callback"),  # NB4
        ("~callbacks", "every callback"),
        ("trainer.fast_dev_run=true", "trainer.fast_dev_run=True would loosen the run's steps and checkpoints"),  # NB7
        ("trainer.limit_train_batches=0", "trainer.limit_train_batches=0 would loosen the run's steps"),  # NB9
        ("trainer.enable_checkpointing=false", "trainer.enable_checkpointing=False would loosen the run's checkpoints"),
        ("trainer.max_epochs=1", "trainer.max_epochs=1 would loosen the run's steps (degen-train counts steps: -1)"),
        ("debug=profile", "a debug group changes what the run is"),  # FP24, NB18
    ],
)
def test_a_parent_may_not_switch_off_a_runs_protections(tmp_path: Path, entry: str, words: str) -> None:
    """Before: each was accepted, some listed as the user's own "-> None" changes."""
    record = tmp_path / "overrides.json"
    record.write_text(json.dumps(["seed=3", entry]))
    with pytest.raises(HandedOverError, match=re.escape(words)) as raised:
        read_overrides_file(record)
    assert str(record) in str(raised.value) and "remove that entry" in str(raised.value)
    assert read_overrides_file(record, door=Door(runs=False)).settings  # what is only shown (a report) is still read


def test_what_leaves_a_run_as_it_is_is_still_read(tmp_path: Path) -> None:
    record = tmp_path / "overrides.json"
    kept = ["+trainer.fast_dev_run=false", "trainer.max_epochs=-1", "trainer.limit_val_batches=2",
            "trainer.limit_train_batches=1.0", "callbacks.checkpoint.every_n_train_steps=5"]
    record.write_text(json.dumps(kept))
    settings = read_overrides_file(record).settings
    assert len(settings) == len(kept)


def test_a_record_may_not_switch_off_a_runs_protections(tmp_path: Path) -> None:
    """NR1: `callbacks: null` in a record gave a run with no checkpoint, no SIGTERM handler, no divergence guard."""
    record = tmp_path / "config.yaml"
    record.write_text(yaml.safe_dump({"seed": 0, "callbacks": None}))
    with pytest.raises(HandedOverError, match="would switch off every callback"):
        read_config_file(record)
    record.write_text(yaml.safe_dump({"seed": 0, "trainer": {"fast_dev_run": True, "max_epochs": -1}}))
    with pytest.raises(HandedOverError, match="trainer.fast_dev_run=True would loosen the run's steps"):
        read_config_file(record)
    # degen-analyze reads only its data section
    assert read_config_file(record, door=Door(runs=False)).tree["seed"] == 0


@pytest.mark.parametrize("text", ["a\\", "a\\\\", "a\\'b", "\\'", "a\\b"])
def test_a_backslash_value_is_passed_on_as_hydra_reads_it(text: str) -> None:
    """NB1: a value ending in a backslash was written back in a form Hydra's own lexer refuses (raw traceback)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    assert OverridesParser.create().parse_overrides([f"k={hydra_literal(text)}"])[0].value() == text


def test_deep_nesting_and_alias_bombs_are_one_line(tmp_path: Path) -> None:
    """NB27: 100,000 nested brackets ended in RecursionError; an alias bomb or 200,000 entries crashed or hung."""
    record = tmp_path / "overrides.json"
    record.write_text(json.dumps(["model.dim=" + "[" * 100_000 + "]" * 100_000]))
    with pytest.raises(HandedOverError, match=r"overrides\.json"):
        read_overrides_file(record)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
    )
    config = tmp_path / "config.yaml"
    config.write_text(bomb)
    with pytest.raises(HandedOverError, match=r"over 100,000 values"):
        read_config_file(config)
    config.write_text("".join(f"k{i}: {i}\n" for i in range(200_000)))  # what yaml.safe_dump writes, faster
    with pytest.raises(HandedOverError, match=r"over 100,000 values"):
        read_config_file(config)


def test_a_parents_overrides_linked_to_a_device_are_refused_not_skipped(tmp_path: Path) -> None:
    """NB28: overrides.json a link to /dev/zero was skipped without a word; the branch failed later on a diff."""
    from degen_train.config.inherited import inherited_overrides

    parent = tmp_path / "parent"
    parent.mkdir()
    (parent / "overrides.json").symlink_to("/dev/zero")
    with pytest.raises(HandedOverError, match=r"overrides\.json is a link .*never through a link"):
        inherited_overrides([f"branch_from={parent}@2"])


def test_the_closing_table_names_no_checkpoints_folder_that_is_not_there(tmp_path: Path) -> None:
    """NB3/NB5: the table named a checkpoints folder that did not exist."""
    from degen_train.run.end_of_run_table import end_of_run_table

    table = end_of_run_table({"final_step": 2, "config": {}}, tmp_path, [])
    assert re.search(r"checkpoints\s+none written", table) and str(tmp_path / "checkpoints") not in table


def test_the_sweep_folder_is_checked_before_hydra_writes(tmp_path: Path) -> None:
    """NL15-NL17: multirun.yaml (and Optuna's results file) a link to a user's file was overwritten, rc 0; a run
    folder linked elsewhere had its train.log appended to before the refusal."""
    from degen_train.run.sweep import SweepFolderCheck
    from degen_train.storage.runlock import check_output_folders_in
    from tests.helpers import command

    victim = tmp_path / "victim.yaml"
    victim.write_bytes(PRIVATE)
    folder = tmp_path / "SW"
    folder.mkdir()
    (folder / "optimization_results.yaml").symlink_to(victim)
    with pytest.raises(ValueError, match=r"optimization_results\.yaml -> .*victim\.yaml"):
        check_output_folders_in([f"hydra.sweep.dir={folder}"])
    with pytest.raises(SystemExit) as stopped:  # a folder Hydra resolved from an interpolation or a config
        SweepFolderCheck().on_multirun_start(config=OmegaConf.create({"hydra": {"sweep": {"dir": str(folder)}}}))
    assert stopped.value.code == 2
    (folder / "optimization_results.yaml").unlink()
    (folder / "seed=1").symlink_to(tmp_path)
    result = command("degen-train", "-m", "seed=0,1", f"hydra.sweep.dir={folder}")
    assert result.returncode != 0 and "seed=1 ->" in result.stderr
    assert victim.read_bytes() == PRIVATE and not (folder / "multirun.yaml").exists()
    assert not (tmp_path / "train.log").exists()


def test_a_single_run_into_a_sweeps_folder_is_refused(tmp_path: Path) -> None:
    """CC3: a plain run started in a sweep folder was accepted, and the sweep's runs then failed."""
    from degen_train.storage.runlock import check_output_folders_in

    (tmp_path / "multirun.yaml").write_text("hydra: {}\n")
    with pytest.raises(ValueError, match=r"is a sweep's folder .* -m hydra\.sweep\.dir="):
        check_output_folders_in([f"hydra.run.dir={tmp_path}"])


@pytest.fixture
def folder_with_code(tmp_path: Path) -> tuple[Path, Path]:
    """An export whose config names an unknown model_type and an auto_map into the folder's own Python (NC_tty,
    NC_eval_automap2, NC_an_automap2, NR18b, NB26): the code would touch ``marker``."""
    folder = tmp_path / "export"
    folder.mkdir()
    marker = tmp_path / "code-ran"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\nfrom transformers import BertConfig\n"
                                    f"class EvilConfig(BertConfig):\n    model_type = 'evil'\n")  # fmt: skip
    config = {"model_type": "evil", "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.Tok", None]}}))
    return folder, marker


def test_a_folders_own_code_is_never_offered(folder_with_code: tuple[Path, Path]) -> None:
    from transformers import AutoModel

    from degen_train.data.tokenizer import load_tokenizer
    from degen_train.models.loading import load_pretrained

    folder, marker = folder_with_code
    for load in (lambda: no_remote_code(folder), lambda: load_tokenizer(folder),
                 lambda: load_pretrained(AutoModel, str(folder), "model.init_from")):  # fmt: skip
        with pytest.raises(HandedOverFileError, match=r"auto_map=.*never runs a model folder's code"):
            load()
    assert not marker.exists()


def test_every_transformers_load_passes_trust_remote_code_false() -> None:
    """NC_*: degen_train never passed trust_remote_code=False, so transformers could prompt on a terminal."""
    package = Path(__file__).parents[2] / "degen_train"
    calls = []
    for path in package.rglob("*.py"):
        text = path.read_text()
        for found in re.finditer(r"\.from_pretrained\(", text):
            line = text[: found.start()].count("\n") + 1
            call = text[found.start() : text.find("\n\n", found.start())]
            depth, end = 0, 0
            for index, char in enumerate(call):
                depth += char == "("
                depth -= char == ")"
                if depth == 0 and char == ")":
                    end = index
                    break
            if "`" not in text.splitlines()[line - 1] and '"' not in text.splitlines()[line - 1].split(".from_")[0]:
                calls.append((f"{path.name}:{line}", call[: end + 1]))
    assert len(calls) >= 9
    assert all("no_remote_code(" in call for _, call in calls), [where for where, call in calls
                                                                 if "no_remote_code(" not in call]  # fmt: skip


def test_a_fifo_or_device_is_named_as_such(tmp_path: Path) -> None:
    """NI6, NI7, NB23: a FIFO or /dev/zero as a corpus or W8A8 file was called "empty" or "does not exist"."""
    from degen_train.config import load_config
    from degen_train.metrics.perplexity import read_documents
    from degen_train.run.checks import check

    fifo = tmp_path / "corpus.txt"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"eval\.w8a8 text file /dev/zero is a character device, not a plain file"):
        read_documents("/dev/zero", what="eval.w8a8 text file")
    from degen_train.data.corpus import load_corpus

    cfg = load_config(["data=text", f"data.path={fifo}"], run_dir=tmp_path / "run")
    with pytest.raises(ValueError, match=r"data\.path=.*corpus\.txt is a FIFO, not a plain file"):
        load_corpus(check(cfg).config.data)


def test_a_pickled_export_is_refused_in_one_line(tmp_path: Path) -> None:
    """NC_init_bin, NC_teacher_bin: an 11-frame traceback that ended advising weights_only=False."""
    from transformers import AutoModel, BertConfig

    from degen_train.models.loading import load_pretrained

    BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=32).save_pretrained(tmp_path)  # fmt: skip
    marker = tmp_path / "ran"

    class Code:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    torch.save({"x": Code()}, tmp_path / "pytorch_model.bin")
    refused = r"teacher=.*pytorch_model\.bin is a pickle that torch's weights-only"
    with pytest.raises(ValueError, match=refused) as raised:
        load_pretrained(AutoModel, str(tmp_path), "teacher")
    assert "weights_only=False" not in str(raised.value) and not marker.exists()


def test_a_refused_pickle_in_last_ckpt_is_said_as_such(tmp_path: Path) -> None:
    """NC1: a tampered last.ckpt (sidecar rewritten to match) was passed over as "an edited or stale sidecar"."""
    import hashlib

    from degen_train.storage.checkpoints import newest_checkpoint, save_checkpoint_file, sidecar_of

    save_checkpoint_file({"global_step": 2, "state_dict": {"w": torch.ones(2)}}, tmp_path / "step=2.ckpt")
    last = tmp_path / "last.ckpt"

    class Code:
        def __reduce__(self) -> tuple:
            return (os.system, ("true",))

    torch.save({"global_step": 4, "state_dict": {}, "x": Code()}, last)
    data = last.read_bytes()
    sidecar_of(last).write_text(json.dumps({"size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                            "global_step": 4}))  # fmt: skip
    chosen, notes = newest_checkpoint(tmp_path)
    assert chosen == tmp_path / "step=2.ckpt"
    assert any(n.startswith("last.ckpt: passed over: refused to load") for n in notes), notes
    assert not any("stale" in n for n in notes)


def test_the_fine_tuning_grid_is_bound_to_its_models_weights(tmp_path: Path) -> None:
    """NF1: a grid resumed after the model's weights were swapped averaged seeds of two models into one glue.json."""
    from dataclasses import asdict

    from degen_train.finetune.cell import Protocol
    from degen_train.finetune.grid import _check_same_settings, weights_sha256

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"first weights")
    out = tmp_path / "glue"
    settings = {"model": str(model), "weights": weights_sha256(model), "protocol": asdict(Protocol())}
    _check_same_settings(out, settings, write=True)
    _check_same_settings(out, settings, write=False)  # the same model resumes
    (model / "model.safetensors").write_bytes(b"other weights")
    swapped = {**settings, "weights": weights_sha256(model)}
    with pytest.raises(ValueError, match=r"the model's weights \(sha256 .* then, .* now: its files were replaced\)"):
        _check_same_settings(out, swapped, write=False)


def test_a_report_under_a_file_size_limit_names_its_folder(sweep: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ND2: a report under a file-size limit ended in a raw `OSError: [Errno 27]` naming no file."""
    import degen_train.cli.report as report_module
    from degen_train.core.io import DiskFull

    def too_large(path: Path, text: str) -> None:
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(report_module, "atomic_write_text", too_large)
    with pytest.raises(DiskFull, match=r"a file over this process's size limit .* writing .*report"):
        report([sweep], run_analysis=False)


def test_analyze_and_eval_under_a_file_size_limit_name_their_folder_and_tear_no_picture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ND4: degen-analyze under `ulimit -f 20` ended in matplotlib's raw `OSError: [Errno 27] File too large`, a
    traceback naming no folder. Now one line names the limit and the folder, and a picture is written whole or not
    at all (the earlier one stays)."""
    import matplotlib.pyplot as plt

    from degen_train.cli import analyze as analyze_cli
    from degen_train.cli import evaluate as evaluate_cli
    from degen_train.evaluation import export_probes, model_analysis
    from degen_train.metrics.plots import save_figure

    def too_large(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(model_analysis, "analyze", too_large)
    with pytest.raises(SystemExit) as stopped:
        analyze_cli.main([str(tmp_path / "run"), "--out", str(tmp_path / "pictures")])
    assert stopped.value.code == 2
    said = capsys.readouterr().err
    assert "degen-analyze: error: [Errno 27] a file over this process's size limit (ulimit -f)" in said
    assert f"writing {tmp_path / 'pictures'} " in said and "Traceback" not in said
    monkeypatch.setattr(export_probes, "evaluate", too_large)
    with pytest.raises(SystemExit):
        evaluate_cli.main([str(tmp_path / "model"), "--sts", str(tmp_path / "sts.csv"), "--out",
                           str(tmp_path / "scores")])  # fmt: skip
    assert f"degen-eval: error: [Errno 27] a file over this process's size limit (ulimit -f) or the filesystem's " \
           f"writing {tmp_path / 'scores'} " in capsys.readouterr().err  # fmt: skip

    earlier = tmp_path / "cone.png"
    earlier.write_bytes(b"the earlier picture")

    def torn(self: object, stream: object, **kwargs: object) -> None:
        stream.write(b"half a png")  # type: ignore[attr-defined]
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(plt.Figure, "savefig", torn)
    with pytest.raises(OSError, match="File too large"):
        save_figure(plt.figure(), earlier)
    assert earlier.read_bytes() == b"the earlier picture" and sorted(p.name for p in tmp_path.iterdir()) == [
        "cone.png"]  # fmt: skip


def test_an_out_folders_own_files_are_kept_and_degen_trains_replaced_on_a_rerun(tmp_path: Path) -> None:
    """Issue 72.8 (X16, G10): a user's file in the --out folder with a name a command writes (metrics.json,
    report.md) was replaced. Now it is kept beside the new one, renamed; what degen-train wrote there before is
    replaced by a rerun, as a rerun should."""
    from degen_train.core import io
    from degen_train.core.paths import writable_folder

    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text("the user's own numbers")
    (out / "notes.txt").write_text("untouched")
    writable_folder(out, "--out")
    try:
        io.atomic_write_json(out / "metrics.json", {"a": 1})
        kept = sorted(p.name for p in out.glob("metrics.json.kept-*"))
        assert len(kept) == 1 and (out / kept[0]).read_text() == "the user's own numbers"
        assert json.loads((out / "metrics.json").read_text()) == {"a": 1}
        io.atomic_write_json(out / "metrics.json", {"a": 2})  # a rerun: its own file replaced, nothing more kept
        assert json.loads((out / "metrics.json").read_text()) == {"a": 2}
        assert len(list(out.glob("metrics.json.kept-*"))) == 1 and (out / "notes.txt").read_text() == "untouched"
        io.atomic_write_text(out / "figures" / "cone.md", "x")  # below the folder too
        assert json.loads((out / io.WRITTEN).read_text()) == ["figures/cone.md", "metrics.json"]
    finally:
        io.OUT_FOLDERS.discard(out.absolute())


def test_a_diverged_run_ends_in_its_one_line(tmp_path: Path) -> None:
    """NI12: optimizer.lr=1e30 gave the right message at the end of a 40-frame traceback (docs/faults.md promises
    one line)."""
    from tests.conftest import FAST
    from tests.helpers import command

    result = command("degen-train", *FAST, "optimizer.lr=1e30", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 1
    assert "degen-train: error: step 1: non-finite loss in term(s) mlm. Training stopped" in result.stderr
    assert "Traceback" not in result.stderr and "File \"" not in result.stderr


def test_a_second_launch_into_a_sweep_folder_keeps_the_first_ones_record(tmp_path: Path) -> None:
    """Issue 56.4: starting a second sweep into the same folder overwrote multirun.yaml."""
    from degen_train.run.sweep import SweepFolderCheck

    (tmp_path / "multirun.yaml").write_text("first launch\n")
    SweepFolderCheck().on_multirun_start(config=OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    kept = list(tmp_path.glob("multirun.*.yaml"))
    assert len(kept) == 1 and kept[0].read_text() == "first launch\n" and not (tmp_path / "multirun.yaml").exists()
    (tmp_path / "multirun.yaml").write_text("second launch\n")
    os.utime(tmp_path / "multirun.yaml", (kept[0].stat().st_mtime,) * 2)  # written in the same second
    SweepFolderCheck().on_multirun_start(config=OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert sorted(p.read_text() for p in tmp_path.glob("multirun.*.yaml")) == ["first launch\n", "second launch\n"]


def test_a_launch_whose_jobs_ran_elsewhere_ends_with_their_outcomes(tmp_path: Path) -> None:
    """Issue 56.4: with hydra/launcher=joblib the jobs run in other processes, so this process recorded no outcome
    and a failed member exited 0; the launch's folder says what became of each."""
    import time

    from degen_train.run import sweep

    old, failed, new = (tmp_path / name for name in ("seed=0", "seed=1", "seed=2"))
    for run in (old, failed, new):
        run.mkdir()
        (run / "config.yaml").write_text("seed: 0\n")
    (old / "summary.json").write_text("{}")
    os.utime(old / "summary.json", (time.time() - 3600,) * 2)  # finished in an earlier launch
    outcomes = {key: [] for key in sweep.SWEEP_OUTCOMES}
    launch = {"dir": tmp_path, "started": time.time()}
    (failed / "failed.json").write_text('{"error": "x"}')
    (new / "summary.json").write_text("{}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep, "SWEEP_OUTCOMES", outcomes)
        patch.setattr(sweep, "LAUNCH", launch)
        line = sweep.sweep_summary_line()
    assert outcomes == {"trained": [str(new)], "skipped": [str(old)], "failed": [str(failed)], "stopped": []}
    assert f"sweep of 3 runs in {tmp_path}: 1 trained, 1 finished before (skipped), 1 failed" in line


def test_a_fine_tuning_cell_that_is_not_a_result_is_one_line(tmp_path: Path) -> None:
    """Issue 53.1: a handed-over grid's result.json is typed too (a raw KeyError before)."""
    from degen_train.finetune.grid import finished_cell

    cell = tmp_path / "rte" / "lr=2e-05" / "seed=1" / "result.json"
    cell.parent.mkdir(parents=True)
    cell.write_text(json.dumps({"task": "rte", "lr": 2e-5, "seed": "one"}))
    with pytest.raises(HandedOverFileError, match=r"result.json: not a fine-tuning result .*\(seed, score missing"):
        finished_cell(cell)
    cell.write_text(json.dumps({"task": "rte", "lr": 2e-5, "seed": 1, "score": 55.0, "dev": {}}))
    assert finished_cell(cell)["score"] == 55.0


@pytest.mark.parametrize(
    "given, entry, words",
    [
        (["callbacks=default"], "callbacks.checkpoint.every_n_train_steps=1000000",
         "would loosen the run's checkpoints"),  # GV1: a branch with no checkpoint at all, rc 0
        (["callbacks=default"], "callbacks.checkpoint.save_last=false", "would loosen the run's checkpoints"),
        (["trainer=cpu"], "trainer.max_time=00:00:00:02", "would loosen the run's steps"),  # GV2: 17 of 20 updates
        (["trainer=cpu"], "trainer.limit_val_batches=0", "would loosen"),  # GV3: an IndexError in the final validation
    ],
)  # fmt: skip
def test_a_group_the_user_chooses_never_opens_a_protection_below_it(tmp_path: Path, given: list[str], entry: str,
                                                                    words: str) -> None:  # fmt: skip
    """Issue 72.1 (GV1–GV5): a group choice on the user's command line (`trainer=cpu`, the one degen-train itself
    advises on a CPU machine) counted as the user setting every key below it, so the parent's looser protection there
    was kept. A group brings its yaml; the file's value below it is judged by its role, in both doors."""
    from degen_train.config.inherited import given_keys

    door = Door(given=given_keys(given))
    record = tmp_path / "overrides.json"
    record.write_text(json.dumps(["seed=3", entry]))
    with pytest.raises(HandedOverError, match=re.escape(words)):
        read_overrides_file(record, door=door)
    key, _, value = entry.partition("=")
    section, _, leaf = key.rpartition(".")
    config = tmp_path / "config.yaml"
    tree: dict = {"seed": 0}
    node = tree
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[leaf] = yaml.safe_load(value)
    config.write_text(yaml.safe_dump(tree))
    with pytest.raises(HandedOverError, match=re.escape(words)):
        read_config_file(config, door=door)
    # the key itself on the user's command line: theirs wins, the file's value is not refused
    assert read_overrides_file(record, door=Door(given=given_keys([entry]))).settings
