"""Bad input becomes one clear error before any heavy work, naming the value and what is allowed.

Each case is a row of the table in docs/faults.md (a test below keeps the two in step).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.helpers import command, run

CASES = [
    ("data.batch_size=0", ValueError, r"data\.batch_size=0: Input should be greater than or equal to 1"),
    ("data.batch_size=-4", ValueError, r"data\.batch_size=-4: Input should be greater than or equal to 1"),
    ("data.block_size=1024", ValueError, r"data\.block_size=1024 is longer than model\.max_position=128"),
    ("masking.probability=1.5", ValueError, r"masking\.probability=1\.5: Input should be less than or equal to 1"),
    ("masking.random_fraction=0.3", ValueError, r"mask_fraction \+ random_fraction = 0\.8 \+ 0\.3 > 1"),
    ("optimizer.lr=0", ValueError, r"optimizer\.lr=0: Input should be greater than 0"),
    ("model.num_heads=3", ValueError, r"hidden_size=128 is not a multiple of num_heads=3"),
    ("trainer.max_steps=0", ValueError, r"trainer\.max_steps=0: Input should be greater than or equal to 1"),
    ("data.source=ftp", ValueError, r"data\.source='ftp': Input should be 'builtin', 'text' or 'hub'"),
    ("seed=-1", ValueError, r"seed=-1: Input should be greater than or equal to 0"),
    # a union's members (a count, or auto) said once, at the key (was two lines at data.num_workers.constrained-int)
    ("data.num_workers=-1", ValueError, r"\n  data\.num_workers=-1: Input should be greater than or equal to 0, or "
                                        r"'auto'(\n|$)"),  # fmt: skip
    (
        "callbacks.divergence.on_nonfinite=ignore",
        ValueError,
        r"callbacks\.divergence\.on_nonfinite='ignore': Input should be 'stop' or 'skip'",
    ),
    ("ckpt_path=missing.ckpt", FileNotFoundError, r"ckpt_path=missing\.ckpt does not exist"),
    ("data.path=EMPTY", ValueError, r"data\.path=.*empty\.txt is empty \(0 bytes\)"),
    # Before: accepted in silence (the preset's width trained) / a generic datasets error, the file in a log line.
    ("+model.hiden_size=64", ValueError, r"model\.hiden_size: not a setting of model \(did you mean model\.hidden_"),
    ("data.path=BAD_JSONL", ValueError, r"bad\.jsonl, line 3, is not JSON \(.*\): fix or remove it"),
    ("data.path=TRUNCATED_PARQUET", ValueError, r"cut\.parquet is not a readable parquet file \(ArrowInvalid: "),
    ("recipe=tacl", ValueError, r"teacher has no value, and model\.init_from needs it: give teacher=\.\.\. on the"),
    ("run_dir=A_FILE", NotADirectoryError, r"run_dir=.*a_file/run: it lies inside .*a_file, which is a file, not a"),
    (
        "+regularizer.cosreg.gama=1",
        ValueError,
        r"regularizer\.cosreg\.gama is not an option of loss term cosreg; its options: weight, term, matrix, rows",
    ),
    (
        "data.path=LINES_WITHOUT_BLANKS",
        ValueError,
        r"lines\.txt comes out as one document \(data\.document_unit=paragraph: no blank line between its 300 "
        r"lines\)\. Set data\.document_unit=line \(each line a document\)",
    ),
    ("threads=0", ValueError, r"threads=0: must be auto \(the CPUs this process may use\) or a thread count >= 1"),
    # Issue 35's refusals that were right but read as crashes:
    ("optimizer.lr=inf", ValueError, r"optimizer\.lr=inf: Input should be a finite number"),
    ("data.tokenizer.path=NO_VOCABULARY", ValueError, r"data\.tokenizer\.path=.*: the tokenizer has \d+ tokens, all of "
                                                     r"them special .*no vocabulary"),  # fmt: skip
    ("eval.w8a8=SHORT", ValueError, r"eval\.w8a8=.*short\.txt: the text has at most 0 blocks of 128 tokens: 16 "
                                    r"batches of 32 calibrate .*\(bert's released setting\)"),  # fmt: skip
    ("data.sources=HUGE_WEIGHTS", ValueError, r"data\.sources: the weights \(a: 1e\+308, b: 1e\+308\) sum to inf"),
    ("scheduler=wsd", ValueError, r"scheduler\.warmup_steps=10 leaves no step of total_steps=8 for the stable phase"),
]


@pytest.mark.parametrize(("override", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_named(tmp_path: Path, drill: list[str], override: str, error: type, message: str) -> None:
    run_dir = tmp_path / "run"
    if override == "data.path=EMPTY":
        (tmp_path / "empty.txt").touch()
        override = f"data.path={tmp_path / 'empty.txt'}"
    elif override == "data.path=BAD_JSONL":
        lines = ['{"text": "one two"}', '{"text": "three"}', '{"text": "cut off', '{"text": "x"}']
        (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
        override = f"data.path={tmp_path / 'bad.jsonl'}"
    elif override == "data.path=TRUNCATED_PARQUET":
        import pandas

        pandas.DataFrame({"text": [f"words {i}" for i in range(500)]}).to_parquet(tmp_path / "whole.parquet")
        whole = (tmp_path / "whole.parquet").read_bytes()
        (tmp_path / "cut.parquet").write_bytes(whole[: len(whole) // 2])  # a copy that stopped halfway
        override = f"data.path={tmp_path / 'cut.parquet'}"
    elif override == "data.path=LINES_WITHOUT_BLANKS":  # a user's corpus: one sentence per line, no blank line
        (tmp_path / "lines.txt").write_text("".join(f"sentence number {i} of my corpus\n" for i in range(300)))
        override = f"data.path={tmp_path / 'lines.txt'}"
    elif override == "data.tokenizer.path=NO_VOCABULARY":  # a tokenizer.json whose vocabulary was left out
        override = f"data.tokenizer.path={tokenizer_without_words(tmp_path)}"
    elif override == "eval.w8a8=SHORT":  # before: found after training
        (tmp_path / "short.txt").write_text("a few words\n")
        override = f"eval.w8a8={tmp_path / 'short.txt'}"
    elif override == "data.sources=HUGE_WEIGHTS":  # before: numpy's "Probabilities do not sum to 1"
        for name in ("a", "b"):
            (tmp_path / f"{name}.txt").write_text("some words here\n\nand more words there\n")
        override = (f"data.sources=[{{path: {tmp_path / 'a.txt'}, weight: 1e308, source: text}}, "
                    f"{{path: {tmp_path / 'b.txt'}, weight: 1e308, source: text}}]")  # fmt: skip
    elif override == "scheduler=wsd":  # before: "must be in 1..0 steps"
        drill = [*drill, "scheduler.warmup_steps=10"]
    elif override == "run_dir=A_FILE":
        (tmp_path / "a_file").write_text("not a folder")
        run_dir, override = tmp_path / "a_file" / "run", "seed=0"
    tokenizers = Path(os.environ["DEGEN_TRAIN_CACHE"]) / "tokenizers"
    trained_before = set(tokenizers.glob("*")) if tokenizers.exists() else set()
    with pytest.raises(error, match=message):
        run(run_dir, *drill, override)
    assert not (tmp_path / "run" / "config.yaml").exists()  # nothing of a run was written
    assert (set(tokenizers.glob("*")) if tokenizers.exists() else set()) == trained_before  # nor a tokenizer trained


def tokenizer_without_words(tmp_path: Path) -> Path:
    """A tokenizer folder whose tokenizer.json keeps its special tokens only (its vocabulary cut out)."""
    import json

    from tests.helpers import run as train_run

    source = tmp_path / "source"
    train_run(source, "trainer.max_steps=1", "export_hf=false", "data.tokenizer.vocab_size=200",
              "final_validation=false")
    folder = tmp_path / "no_words"
    folder.mkdir()
    spec = json.loads((source / "tokenizer" / "tokenizer.json").read_text())
    specials = {token["content"] for token in spec["added_tokens"]}
    spec["model"]["vocab"] = {t: i for i, t in enumerate(t for t in spec["model"]["vocab"] if t in specials)}
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (source / "tokenizer" / name).exists():
            (folder / name).write_text((source / "tokenizer" / name).read_text())
    return folder


def test_a_run_folder_that_is_a_file_is_one_line_from_the_command(tmp_path: Path) -> None:
    """Before: Hydra's FileExistsError traceback, raised before degen_train ran."""
    (tmp_path / "a_file").write_text("not a folder")
    result = command("degen-train", f"hydra.run.dir={tmp_path / 'a_file'}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"degen-train: error: hydra.run.dir={tmp_path / 'a_file'}: it is a file, not a folder" in result.stderr


def test_a_loss_option_typo_names_the_close_options_not_hydras_plus(tmp_path: Path) -> None:
    """Before: Hydra's "To append to your config use +objective.mlm.wieght=1", which only moved the error."""
    result = command("degen-train", "objective.mlm.wieght=1", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 1 and "Traceback" not in result.stderr and "use +" not in result.stderr
    assert "objective.mlm.wieght is not an option of loss term mlm; did you mean weight?" in result.stderr
    assert not (tmp_path / "run").exists()


def test_every_problem_is_reported_at_once(tmp_path: Path, drill: list[str]) -> None:
    with pytest.raises(ValueError, match=r"(?s)invalid config:\n.*data\.batch_size=0.*\n.*optimizer\.lr=-1"):
        run(tmp_path, *drill, "data.batch_size=0", "optimizer.lr=-1")


def test_a_warmup_longer_than_the_run_is_warned_naming_both(
    tmp_path: Path, drill: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="degen_train"):
        run(tmp_path, *drill, "trainer.max_steps=2", "scheduler.warmup_steps=100")
    assert "scheduler.warmup_steps=100 >= scheduler.total_steps=2: the learning rate never reaches" in caplog.text


def test_a_read_only_run_folder_is_named_by_the_command(tmp_path: Path) -> None:
    folder = tmp_path / "readonly"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        result = command("degen-train", f"hydra.run.dir={folder}", "trainer.max_steps=2")
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
    assert result.returncode == 1
    assert f"cannot write to the run folder {folder} (Read-only file system)" in result.stderr
    assert "Unable to configure handler" not in result.stderr


def test_the_docs_table_lists_every_case() -> None:
    table = (REPO / "docs" / "faults.md").read_text()
    for override, _, _ in CASES:
        assert f"`{override.split('=')[0].lstrip('+')}" in table, override
    assert re.search(r"crafted pickle", table) and re.search(r"read-only", table)


def test_a_missing_local_path_is_named_at_once_not_tried_on_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `teacher=runs/nonexistent` was taken for a hub name: ~15 s of retries, then "couldn't connect"."""
    from degen_train.core.io import resolve_pretrained

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for value in ("runs/nonexistent", "./teacher", "/no/such/run", "a/b/c"):
        with pytest.raises(FileNotFoundError, match=rf"{re.escape(value)}: no such folder"):
            resolve_pretrained(value)
    assert resolve_pretrained("bert-base-uncased") == "bert-base-uncased"
    assert resolve_pretrained("my-lab/tiny-mlm") == "my-lab/tiny-mlm"  # ORG/NAME, no ./my-lab folder: the hub


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run with gated attention and its export."""
    folder = tmp_path_factory.mktemp("export") / "run"
    run(folder, "trainer.max_steps=1", "data.tokenizer.vocab_size=200", "model.attention_variant.name=gated",
        "final_validation=false")  # fmt: skip
    return folder


def test_a_pickled_model_file_is_refused_by_name(tmp_path: Path, export: Path) -> None:
    """Issue drill: a pytorch_model.bin in an export read as a crash (or, with keys that did not match, as a model
    of random weights). Refused: a handed-over pickle is never loaded."""
    import shutil

    import torch

    folder = tmp_path / "model"
    shutil.copytree(export / "hf", folder)
    (folder / "model.safetensors").unlink()
    torch.save({"weights": torch.ones(2)}, folder / "pytorch_model.bin")
    for tool in (["degen-analyze", str(folder)],
                    ["degen-finetune", str(folder), "--train", "x.csv", "--dev", "x.csv", "--text-columns", "a",
                     "--out", str(tmp_path / "ft")]):  # fmt: skip
        result = command(*tool)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert f"{folder / 'pytorch_model.bin'} is a pickle, and degen-train loads model weights from safetensors" in (
            result.stderr
        )


def test_an_export_with_bogus_attention_settings_is_refused_by_name(tmp_path: Path, export: Path) -> None:
    """Issue drill: a gated export whose config.json holds a bogus degen_attention failed with KeyError: 'variant'."""
    import json
    import shutil

    from degen_train.metrics.encode import load_encoder

    folder = tmp_path / "model"
    shutil.copytree(export / "hf", folder)
    config = json.loads((folder / "config.json").read_text())
    config["degen_attention"] = {"bogus": 1}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"degen_attention=\{'bogus': 1\}: its variant must be one of softmax"):
        load_encoder(folder)


@pytest.mark.parametrize("tool", ["degen-analyze", "degen-report", "--reproduce"])
def test_a_read_only_folder_is_named_by_analyze_report_and_reproduce(tmp_path: Path, export: Path, tool: str) -> None:
    """Issue drill: analysis, report and reproduction of a read-only run folder ended in a traceback."""
    import shutil

    mount = tmp_path / "readonly"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.decode().strip()}")
    try:
        shutil.copytree(export, mount / "run")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        name = "degen-train" if tool == "--reproduce" else tool
        corpus = yaml.safe_load((export / "config.yaml").read_text())["data"]["path"]  # an input: the user gives it
        # and the fixture's looser protection (final validation off), which a copied folder may not choose
        given = [f"data.path={corpus}", "final_validation=false"]
        arguments = [tool, str(mount / "run"), *given] if tool == "--reproduce" else [str(mount / "run")]
        result = command(name, *arguments)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "cannot be written (Read-only file system): give" in result.stderr


def test_a_path_holding_equals_is_shown_how_to_quote(tmp_path: Path) -> None:
    """Issue drill: ckpt_path=RUN/checkpoints/step=00000002.ckpt gave Hydra's grammar error, nothing on quoting."""
    result = command("degen-train", f"ckpt_path={tmp_path}/checkpoints/step=00000002.ckpt",
                     f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    quoted = f"ckpt_path='{tmp_path}/checkpoints/step=00000002.ckpt'"
    assert f"quote it for Hydra inside the shell's quotes: \"{quoted}\"" in result.stderr


def test_any_value_holding_an_unquoted_equals_is_shown_how_to_quote_and_hydras_own_quoting_passes() -> None:
    """Before, only a list of path keys beside the schema was checked (PATH_KEYS): data.missing_hint=a=b, or a key
    added later, got Hydra's bare grammar error. An '=' inside a quoted string of a mapping is Hydra's to read."""
    from degen_train.config.overrides import refuse_unquoted_equals

    with pytest.raises(SystemExit, match=r"data.missing_hint=a=b: the value holds '='.*\"data.missing_hint='a=b'\""):
        refuse_unquoted_equals(["data.missing_hint=a=b"])
    refuse_unquoted_equals(["+model.note={a:'x=y'}", "data.path='x=y.txt'", "seed=1"])


def test_a_read_only_folder_above_the_run_folder_is_named(tmp_path: Path) -> None:
    """Issue 43 drill 6: hydra.run.dir inside a read-only folder ended in Hydra's traceback from os.mkdir."""
    from degen_train.storage.runlock import check_output_folders_in

    folder = tmp_path / "readonly"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        with pytest.raises(ValueError, match=rf"cannot write to the run folder {folder}/run \(Read-only file system\)"
                                             r": choose a writable hydra.run.dir"):  # fmt: skip
            check_output_folders_in([f"hydra.run.dir={folder}/run"])
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_files_that_are_not_text_are_named(tmp_path: Path, drill: list[str]) -> None:
    """Issue 43 drill 6: a tokenizer.json of random bytes, and eval.w8a8 given a binary file, both ended in "'utf-8'
    codec can't decode byte 0x.." naming no file."""
    binary = random.Random(1).randbytes(3000) + b"\xff"
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_bytes(binary)
    with pytest.raises(ValueError, match=rf"{tokenizer}/tokenizer.json, line \d+: bytes .* are not UTF-8 \(a tokenizer "
                                         r"file must be UTF-8 text"):  # fmt: skip
        run(tmp_path / "a", *drill, f"data.tokenizer.path={tokenizer}")
    (tokenizer / "tokenizer.json").write_text('{"version": "1.0", "truncated')
    with pytest.raises(ValueError, match=rf"{tokenizer}/tokenizer.json is not JSON \(.*\): not a tokenizer's file"):
        run(tmp_path / "b", *drill, f"data.tokenizer.path={tokenizer}")
    (tmp_path / "probe.bin").write_bytes(binary)
    with pytest.raises(ValueError, match=rf"{tmp_path}/probe.bin, line \d+: bytes .* are not UTF-8 \(a eval.w8a8 text "
                                         r"file must be UTF-8 text"):  # fmt: skip
        run(tmp_path / "c", *drill, f"eval.w8a8={tmp_path / 'probe.bin'}")
    assert not (tmp_path / "c").exists()  # read before anything is written


def test_a_file_size_limit_during_preparation_names_the_folder_and_what_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43 drill 6: `ulimit -f` during preparation gave "[Errno 27] File too large" naming no file and left a
    .partial folder without a word. The limit is now named with the cache entry, and the kept shards with it."""
    import errno

    import datasets

    from degen_train.core.io import DiskFull
    from degen_train.data import resumable

    writes = {"count": 0}
    real_save = datasets.Dataset.save_to_disk

    def limited(self: datasets.Dataset, *args: object, **kwargs: object) -> None:
        writes["count"] += 1
        if writes["count"] > 1:  # the first shard is committed, the second meets the limit
            raise OSError(errno.EFBIG, "File too large")
        real_save(self, *args, **kwargs)

    class Maker:
        carry: list[int] = []

        def feed(self, document: list[int]) -> list[dict]:
            return [{"input_ids": document}]

        def finish(self) -> list[dict]:
            return []

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", limited)
    monkeypatch.setattr(resumable, "SHARD_EXAMPLES", 2)
    target = tmp_path / "cache" / "examples"
    with pytest.raises(DiskFull, match=rf"a file over this process's size limit \(ulimit -f\) or the filesystem's "
                                       rf"writing \S+shard-00001 .*raise the file-size limit \(ulimit -f\).* The "
                                       rf"examples committed so far are kept in {tmp_path}/cache/\.examples\.partial; "
                                       r"the same command resumes from them"):  # fmt: skip
        resumable.build_in_shards(lambda skip: iter([[[1, 2], [3, 4]], [[5, 6], [7, 8]]]), Maker(), target)
    assert (tmp_path / "cache" / ".examples.partial" / "shard-00000").is_dir() and not target.exists()


def test_trainer_gpu_without_a_gpu_is_one_line_before_any_data(tmp_path: Path) -> None:
    """Issue 56.5: docs/gpu-node.md's smoke command on a CPU machine built the tokenizer, the data and an 89M-parameter
    model, then failed in Lightning's 'No supported gpu backend found!' through Hydra."""
    import torch

    from degen_train.config import load_config
    from degen_train.run.checks import check

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: trainer=gpu is fine here")
    cfg = load_config(["trainer=gpu", "data.cache_dir=" + str(tmp_path / "cache")], run_dir=tmp_path / "run")
    with pytest.raises(ValueError, match=r"trainer.accelerator=gpu: this machine has no CUDA device .*trainer=cpu"):
        check(cfg)
    assert not (tmp_path / "cache").exists()
    check(load_config(["trainer=gpu", "debug=plan"], run_dir=tmp_path / "plan"))  # a plan needs no device


@pytest.mark.parametrize(("accelerator", "said"), [
    ("npu", r"trainer.accelerator='npu' is not one of auto, cpu, cuda, gpu, mps, tpu"),
    ("tpu", r"trainer.accelerator=tpu: this machine has no tpu device that Lightning can use. Choose trainer=cpu"),
])  # fmt: skip
def test_an_accelerator_lightning_cannot_use_here_is_one_line_before_any_data(tmp_path: Path, accelerator: str,
                                                                              said: str) -> None:  # fmt: skip
    """Found by probing the command line: trainer.accelerator=tpu on a machine without torch_xla built the tokenizer,
    the data and the model, then failed in Lightning's Trainer through Hydra's 'Error in call to target'."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    from degen_train.config import load_config
    from degen_train.run.checks import check

    if AcceleratorRegistry["tpu"]["accelerator"].is_available():
        pytest.skip("this machine has a TPU")
    cfg = load_config([f"trainer.accelerator={accelerator}", "data.cache_dir=" + str(tmp_path / "cache")],
                      run_dir=tmp_path / "run")  # fmt: skip
    with pytest.raises(ValueError, match=said):
        check(cfg)
    assert not (tmp_path / "cache").exists()
