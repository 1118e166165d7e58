"""Corpus loading, tokenizer and example caches, NSP pairs, and bad-input messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from degen_train.config import load_config
from degen_train.config.schema import validate_config
from degen_train.data import examples as examples_module
from degen_train.data import tokenizer as tokenizer_module
from degen_train.data.corpus import first_bad_utf8_offset, load_corpus
from degen_train.data.datamodule import prepare_data


def data_cfg(*overrides: str):
    return load_config(list(overrides)).data


def test_builtin_corpus_is_real_prose() -> None:
    corpus = load_corpus(data_cfg())
    text = " ".join(corpus.train["text"])
    assert len(corpus.train) > 50
    assert len(text.split()) > 50_000
    assert "statement" in text and "the" in text.split()


def test_tokenizer_and_examples_are_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = data_cfg(f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=2000", "data.block_size=64")
    first = prepare_data(cfg, family="encoder", data_format="mlm", seed=0)

    def forbidden(*args, **kwargs):
        raise AssertionError("a cached step ran again")

    monkeypatch.setattr(tokenizer_module, "train_wordpiece", forbidden)
    monkeypatch.setattr(examples_module, "example_maker", forbidden)
    second = prepare_data(cfg, family="encoder", data_format="mlm", seed=0)
    assert second.train["input_ids"] == first.train["input_ids"]
    assert len(second.tokenizer) == len(first.tokenizer) == 2000


def test_mlm_blocks_are_framed_and_causal_blocks_full(tmp_path: Path) -> None:
    cfg = data_cfg(f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=2000", "data.block_size=64")
    mlm = prepare_data(cfg, family="encoder", data_format="mlm", seed=0)
    tok = mlm.tokenizer
    assert all(r[0] == tok.cls_token_id and r[-1] == tok.sep_token_id for r in mlm.train["input_ids"])
    assert max(len(r) for r in mlm.train["input_ids"]) == 64
    causal = prepare_data(cfg, family="decoder", data_format="causal", seed=0)
    lengths = [len(r) for r in causal.train["input_ids"]]
    assert sum(length == 64 for length in lengths) >= len(lengths) - 2
    assert causal.tokenizer.eos_token == "<|endoftext|>"


def test_sentence_examples_hold_one_segment_each(tmp_path: Path) -> None:
    """data.examples=sentences (SimCSE's inputs): [CLS] one segment [SEP], cut to the block, never packed."""
    cfg = data_cfg(
        f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=2000", "data.block_size=16", "data.examples=sentences"
    )
    data = prepare_data(cfg, family="encoder", data_format="mlm", seed=0)
    tok = data.tokenizer
    rows = data.train["input_ids"]
    assert all(r[0] == tok.cls_token_id and r[-1] == tok.sep_token_id and r.count(tok.sep_token_id) == 1 for r in rows)
    assert max(len(r) for r in rows) == 16 and min(len(r) for r in rows) < 8  # short sentences stay short
    with pytest.raises(ValueError, match="data.examples=sentences cannot make NSP pairs"):
        validate_config(load_config(["recipe=bert_mlm_nsp", "data.examples=sentences"]))


def test_nsp_pairs_are_balanced_and_well_formed(tmp_path: Path) -> None:
    cfg = data_cfg(f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=2000", "data.block_size=64")
    data = prepare_data(cfg, family="encoder", data_format="mlm_nsp", seed=0)
    labels = data.train["next_sentence_label"]
    assert len(labels) > 500
    assert abs(sum(labels) / len(labels) - 0.5) < 0.05
    tok = data.tokenizer
    for ids, types in zip(data.train["input_ids"][:200], data.train["token_type_ids"][:200], strict=True):
        assert len(ids) <= 64 and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert ids.count(tok.sep_token_id) == 2
        first_sep = ids.index(tok.sep_token_id)
        assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)


def test_local_text_jsonl_and_directory(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("first paragraph line one.\nline two.\n\nsecond paragraph.\n")
    assert load_corpus(data_cfg("data=text", f"data.path={tmp_path / 'a.txt'}")).train["text"][1].startswith("second")
    lines = load_corpus(data_cfg("data=text", f"data.path={tmp_path / 'a.txt'}", "data.document_unit=line"))
    assert lines.train["text"] == ["first paragraph line one.", "line two.", "second paragraph."]
    table = tmp_path / "t" / "rows.jsonl"
    table.parent.mkdir()
    table.write_text('{"body": "alpha beta", "id": 1}\n{"body": "gamma", "id": 2}\n')
    corpus = load_corpus(data_cfg("data=text", f"data.path={table.parent}", "data.text_column=body"))
    assert corpus.train["text"] == ["alpha beta", "gamma"]


def test_missing_path_is_named() -> None:
    with pytest.raises(FileNotFoundError, match=r"data.path=/no/such/corpus.txt does not exist"):
        load_corpus(data_cfg("data=text", "data.path=/no/such/corpus.txt"))


def test_a_missing_wikitext2_says_where_it_reads_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38.4: data=wikitext2's missing-file message named neither the folder nor DEGEN_TRAIN_WIKITEXT2."""
    monkeypatch.setenv("DEGEN_TRAIN_WIKITEXT2", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"nowhere/train.txt does not exist \(data=wikitext2 reads train.txt "
                                                r"and valid.txt from \$DEGEN_TRAIN_WIKITEXT2"):  # fmt: skip
        load_corpus(data_cfg("data=wikitext2"))


def test_empty_corpus_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("\n  \n\n")
    with pytest.raises(ValueError, match=r"corpus .*empty.txt is empty: no non-blank document"):
        load_corpus(data_cfg("data=text", f"data.path={tmp_path / 'empty.txt'}"))


def test_missing_text_column_lists_the_columns(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("title,body\nx,hello world\n")
    with pytest.raises(ValueError, match=r"text column 'text' not found in .*; columns are: title, body"):
        load_corpus(data_cfg("data=text", f"data.path={tmp_path / 'rows.csv'}"))


def test_non_utf8_file_reports_file_and_offset(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf" + b"\xe9 au lait\n")
    with pytest.raises(ValueError, match=r"latin1.txt is not valid UTF-8: bad byte at offset 3"):
        load_corpus(data_cfg("data=text", f"data.path={bad}"))
    (tmp_path / "good.txt").write_text("fine text here\n")
    corpus = load_corpus(data_cfg("data=text", f"data.path={tmp_path}", "data.on_decode_error=skip"))
    assert corpus.train["text"] == ["fine text here"]


def test_utf8_offset_across_chunk_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_bytes("é".encode() * 10 + b"\xff")  # 20 good bytes, then a bad one
    assert first_bad_utf8_offset(path, chunk_size=3) == 20
    path.write_bytes("é".encode() * 10)
    assert first_bad_utf8_offset(path, chunk_size=3) is None


def test_streaming_gives_the_same_blocks_as_loading(tmp_path: Path) -> None:
    paragraphs = "\n\n".join(f"Paragraph {i} talks about topic {i % 7} at some length." for i in range(400))
    (tmp_path / "c.txt").write_text(paragraphs)
    common = [
        "data=text",
        f"data.path={tmp_path / 'c.txt'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.tokenizer.vocab_size=500",
        "data.block_size=32",
        f"data.validation_path={tmp_path / 'c.txt'}",
    ]
    loaded = prepare_data(data_cfg(*common), family="encoder", data_format="mlm", seed=0)
    streamed = prepare_data(data_cfg(*common, "data.streaming=true"), family="encoder", data_format="mlm", seed=0)
    assert len(streamed.train) > 100
    assert list(streamed.train["input_ids"]) == list(loaded.train["input_ids"])
    split = prepare_data(
        data_cfg(*common[:-1], "data.streaming=true", "data.validation_documents=50"),
        family="encoder",
        data_format="mlm_nsp",
        seed=0,
    )
    assert 0 < len(split.validation) < len(split.train)
