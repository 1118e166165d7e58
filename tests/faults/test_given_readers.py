"""Issue 72.3: every file a command opens from a user-given place goes through one bounded reader: a FIFO or a device
refused before any open that could block, a text file past its bound named, a JSON-lines STS file's bad line named,
a safetensors export's header checked against its size before it is handed to safetensors. Each by its message."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
import torch

import degen_train.core.handed_files as handed_files
from degen_train.cluster.compare import compare
from degen_train.core.handed_files import given_file_text
from degen_train.core.io import utf8_text
from degen_train.metrics.probes import read_sts


def test_text_readers_refuse_a_fifo_and_a_file_past_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "words.txt"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is a FIFO, not a plain file"):
        utf8_text(fifo, what="tokenizer file")  # before: an open() that never returned
    big = tmp_path / "corpus.txt"
    big.write_text("word " * 100)
    monkeypatch.setattr(handed_files, "GIVEN_TEXT_BYTES", 64)
    with pytest.raises(ValueError, match=r"corpus.txt: 500 bytes, more than the 64 a text file read whole may hold"):
        given_file_text(big, what="text file")
    with pytest.raises(ValueError, match="500 bytes, more than the 64"):
        utf8_text(big, what="task file")


@pytest.mark.parametrize(("line", "said"), [
    ('{"sentence1": "a", "sentence2": "b", "score": 1', "line 2: not JSON"),
    ('["a", "b", 1.0]', "line 2: a JSON list, not an object with two sentences and a score"),
    ("[" * 100_000 + "]" * 100_000, "line 2: not JSON (nested too deep)"),
])  # fmt: skip
def test_a_jsonl_sts_files_bad_line_is_named(tmp_path: Path, line: str, said: str) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "score": 1.0}) + "\n" + line + "\n")
    with pytest.raises(ValueError) as raised:
        read_sts(path)
    assert said in str(raised.value) and str(path) in str(raised.value)


def export(folder: Path, **tensors: torch.Tensor) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file(dict(tensors), str(folder / "model.safetensors"))
    return folder


def test_compare_checks_each_safetensors_header_before_reading(tmp_path: Path) -> None:
    good = export(tmp_path / "a", w=torch.ones(3, 2))
    assert compare(good, export(tmp_path / "b", w=torch.ones(3, 2) * 2)).max_abs == pytest.approx(1.0)
    lying = tmp_path / "lying"
    lying.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [2**20, 2**20], "data_offsets": [0, 2**42]}}).encode()
    (lying / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 24)
    with pytest.raises(ValueError, match=r"tensor w claims bytes 0–4,398,046,511,104 of a data section of 24"):
        compare(good, lying)
    claims = tmp_path / "claims"
    claims.mkdir()
    (claims / "model.safetensors").write_bytes(struct.pack("<Q", 2**40) + b"{}")
    with pytest.raises(ValueError, match=r"its header claims 1,099,511,627,776 bytes in a file of 10"):
        compare(good, claims)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "model.safetensors")
    with pytest.raises(ValueError, match="is a FIFO, not a plain safetensors file"):
        compare(good, fifo)  # before: safetensors opened it and waited forever
