"""Bad input becomes one clear error before any heavy work, naming the value and what is allowed.

Each case is a row of the table in docs/faults.md (a test below keeps the two in step).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import degen_train, run

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
        r"lines\.txt: 1 document \(data\.document_unit=paragraph: paragraphs are separated by blank lines\) in 1 file, "
        r"300 lines, 0\.0 MiB; a validation split needs at least 2\. Set data\.document_unit=line",
    ),
    ("threads=0", ValueError, r"threads=0: must be auto \(the CPUs this process may use\) or a thread count >= 1"),
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
    elif override == "run_dir=A_FILE":
        (tmp_path / "a_file").write_text("not a folder")
        run_dir, override = tmp_path / "a_file" / "run", "seed=0"
    tokenizers = Path(os.environ["DEGEN_TRAIN_CACHE"]) / "tokenizers"
    trained_before = set(tokenizers.glob("*")) if tokenizers.exists() else set()
    with pytest.raises(error, match=message):
        run(run_dir, *drill, override)
    assert not (tmp_path / "run" / "config.yaml").exists()  # nothing of a run was written
    assert (set(tokenizers.glob("*")) if tokenizers.exists() else set()) == trained_before  # nor a tokenizer trained


def test_a_run_folder_that_is_a_file_is_one_line_from_the_command(tmp_path: Path) -> None:
    """Before: Hydra's FileExistsError traceback, raised before degen_train ran."""
    (tmp_path / "a_file").write_text("not a folder")
    result = degen_train(f"hydra.run.dir={tmp_path / 'a_file'}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"degen-train: error: hydra.run.dir={tmp_path / 'a_file'}: it is a file, not a folder" in result.stderr


def test_a_loss_option_typo_names_the_close_options_not_hydras_plus(tmp_path: Path) -> None:
    """Before: Hydra's "To append to your config use +objective.mlm.wieght=1", which only moved the error."""
    result = degen_train("objective.mlm.wieght=1", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 1 and "Traceback" not in result.stderr and "use +" not in result.stderr
    assert "objective.mlm.wieght is not an option of loss term mlm; did you mean weight?" in result.stderr
    assert not (tmp_path / "run").exists()


def test_every_problem_is_reported_at_once(tmp_path: Path, drill: list[str]) -> None:
    with pytest.raises(ValueError, match=r"(?s)invalid config:\n.*data\.batch_size=0.*\n.*optimizer\.lr=-1"):
        run(tmp_path, *drill, "data.batch_size=0", "optimizer.lr=-1")


def test_a_warmup_longer_than_the_run_is_warned_naming_both(tmp_path: Path, drill: list[str]) -> None:
    with pytest.warns(UserWarning, match=r"scheduler\.warmup_steps=100 >= scheduler\.total_steps=2"):
        run(tmp_path, *drill, "trainer.max_steps=2", "scheduler.warmup_steps=100")


def test_a_read_only_run_folder_is_named_by_the_command(tmp_path: Path) -> None:
    folder = tmp_path / "readonly"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        result = degen_train(f"hydra.run.dir={folder}", "trainer.max_steps=2")
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
    from degen_train.io import resolve_pretrained

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for value in ("runs/nonexistent", "./teacher", "/no/such/run", "a/b/c"):
        with pytest.raises(FileNotFoundError, match=rf"{re.escape(value)}: no such folder"):
            resolve_pretrained(value)
    assert resolve_pretrained("bert-base-uncased") == "bert-base-uncased"
    assert resolve_pretrained("my-lab/tiny-mlm") == "my-lab/tiny-mlm"  # ORG/NAME, no ./my-lab folder: the hub
