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


def lab_corpus(folder: Path, *, files: int = 4, paragraphs: int = 30, blank: str = " ") -> Path:
    """A folder of text files whose paragraphs are separated by lines holding one space (as WikiText writes them)."""
    import random

    rng = random.Random(0)
    words = "the of cone embedding token rare frequent vector space model training loss isotropy spectrum".split()
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(files):
        body = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 20))) + " ." for _ in range(paragraphs)]
        (folder / f"part{number}.txt").write_text(f"\n{blank}\n".join(body) + "\n")
    return folder


def test_a_folder_of_text_files_is_read_as_paragraphs_and_held_out_as_asked(tmp_path: Path) -> None:
    """Issue 47.1: four .txt files whose blank lines hold a space were read as one document each, so validation was
    one whole file (25% for 10% asked) and NSP drew its negatives from 4 documents."""
    from degen_train.data.corpus import held_out

    folder = lab_corpus(tmp_path / "lab")
    corpus = load_corpus(data_cfg("data=text", f"data.path={folder}"))
    assert len(corpus.train) == 4 * 30 and corpus.train["text"][0].endswith(" .")
    train, validation = held_out(corpus.train, 0.1, seed=0)
    lengths = [len(t) for t in corpus.train["text"]]
    share = sum(len(t) for t in validation["text"]) / sum(lengths)
    assert abs(share - 0.1) <= max(lengths) / sum(lengths)  # to within one document
    assert len(train) + len(validation) == 120 and not set(train["text"]) & set(validation["text"])


def test_a_file_that_comes_out_as_one_document_is_named(tmp_path: Path) -> None:
    """Issue 47.1: docs/data.md said a file that comes out as one document is refused; only a whole corpus of one
    document was. Each file is checked: lines without a blank line between them are not paragraphs."""
    folder = lab_corpus(tmp_path / "lab", files=2)
    (folder / "notes.txt").write_text("one line\nanother line\na third line\n")
    said = rf"{folder}/notes.txt comes out as one document \(data.document_unit=paragraph: no blank line between its 3"
    with pytest.raises(ValueError, match=said + r" lines\). Set data.document_unit=line"):
        load_corpus(data_cfg("data=text", f"data.path={folder}"))
    assert len(load_corpus(data_cfg("data=text", f"data.path={folder}", "data.document_unit=document")).train) == 3


def test_a_vocabulary_too_large_for_the_corpus_is_named_with_the_size_that_fits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 47.1: data=text's 30,522-entry vocabulary on a small corpus left a tiny model barely trained, with no
    word. Said before training, with the size its text supports (entries seen at least 10 times)."""
    import logging
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(3000)]
    rng.shuffle(words := words * 3)  # 3,000 words seen three times each: a vocabulary of thousands, each entry rare
    folder = tmp_path / "lab"
    folder.mkdir()
    (folder / "words.txt").write_text("\n \n".join(" ".join(words[i : i + 30]) for i in range(0, len(words), 30)))
    with caplog.at_level(logging.WARNING):
        prepare_data(data_cfg("data=text", f"data.path={folder}", f"data.cache_dir={tmp_path / 'cache'}"),
                     family="encoder", data_format="mlm", seed=0)  # fmt: skip
    said = next(r.getMessage() for r in caplog.records if "is large for this corpus" in r.getMessage())
    assert said.startswith("data.tokenizer.vocab_size=30522 is large for this corpus: of the tokenizer's")
    fits = int(said.rsplit("data.tokenizer.vocab_size=", 1)[1])
    assert fits % 64 == 0 and 64 <= fits < 30522


def test_a_save_to_disk_folder_is_a_corpus(tmp_path: Path) -> None:
    """Issue 47.8: a local HF save_to_disk dataset was not covered. data=text data.path=FOLDER reads it (a DatasetDict:
    its data.split), through data.text_column."""
    import datasets

    rows = [f"document {i} says something about cones and rare tokens." for i in range(40)]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": rows})}).save_to_disk(str(tmp_path / "saved"))
    corpus = load_corpus(data_cfg("data=text", f"data.path={tmp_path / 'saved'}", "data.text_column=body"))
    assert corpus.train["text"] == rows and corpus.provenance["files"]
    with pytest.raises(ValueError, match=r"saved holds the splits train, not data.split=test"):
        load_corpus(data_cfg("data=text", f"data.path={tmp_path / 'saved'}", "data.split=test"))
