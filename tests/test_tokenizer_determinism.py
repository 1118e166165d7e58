"""Tokenizer training gives the same tokenizer.json in every process, with Rust parallelism on and off.

tokenizers' own WordPieceTrainer does not (huggingface/tokenizers#1794): two runs on the builtin corpus gave
three different vocab orders in three processes when this test was written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TRAIN_ALL = """
import os, sys
from pathlib import Path
from omegaconf import OmegaConf
from degen_train.data.builtin_corpus import builtin_documents
from degen_train.data.tokenizer import train_byte_bpe, train_wordpiece
out = Path(sys.argv[1])
cfg = OmegaConf.create({"vocab_size": 2000, "min_frequency": 2, "lowercase": True})
for parallel in ("false", "true"):
    os.environ["TOKENIZERS_PARALLELISM"] = parallel  # read by the Rust side at each training
    for name, train in (("wordpiece", train_wordpiece), ("byte_bpe", train_byte_bpe)):
        folder = out / f"{name}-parallel-{parallel}"
        train(iter(builtin_documents()), cfg).save_pretrained(str(folder))
"""


def train_in_a_new_process(out: Path, hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    result = subprocess.run([sys.executable, "-c", TRAIN_ALL, str(out)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def test_two_processes_train_byte_identical_tokenizers(tmp_path: Path) -> None:
    train_in_a_new_process(tmp_path / "a", "1")
    train_in_a_new_process(tmp_path / "b", "2")
    folders = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert len(folders) == 4
    for name in folders:
        first = (tmp_path / "a" / name / "tokenizer.json").read_bytes()
        assert first == (tmp_path / "b" / name / "tokenizer.json").read_bytes(), name
    for family in ("wordpiece", "byte_bpe"):  # parallelism changes nothing either
        on, off = (tmp_path / "a" / f"{family}-parallel-{p}" / "tokenizer.json" for p in ("true", "false"))
        assert on.read_bytes() == off.read_bytes(), family


def test_a_huge_line_without_spaces_is_cut_before_training(caplog) -> None:  # noqa: ANN001
    """Before: a 10 MB line without spaces ran tokenizer training for more than 15 minutes (time grows with the
    square of a word's length). 2 MB here: cut into 1,000-character pieces, trained in seconds, and said so."""
    import logging
    import time

    from omegaconf import OmegaConf

    from degen_train.data.tokenizer import LONGEST_TRAINING_WORD, _texts, train_byte_bpe, train_wordpiece

    corpus = [{"text": "a few ordinary words here"}, {"text": "x" * 2_000_000}, {"text": "and more words after it"}]
    cfg = OmegaConf.create({"vocab_size": 300, "min_frequency": 1, "lowercase": True})
    with caplog.at_level(logging.WARNING):
        texts = list(_texts(corpus, None))
    assert max(len(w) for t in texts for w in t.split()) == LONGEST_TRAINING_WORD
    assert "1 run(s) of more than 1000 characters without a space were cut" in caplog.text
    started = time.perf_counter()
    for train in (train_wordpiece, train_byte_bpe):
        train(_texts(corpus, None), cfg)
    assert time.perf_counter() - started < 60  # seconds here; unbounded before
