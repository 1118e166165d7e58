"""Preparation at scale (issue 26): tokenizing on several threads gives the same bytes, memory stays bounded, runs
started together build a cache once, and ``prepare_only=true`` prepares what later runs only read."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from degen_train.config import load_config
from degen_train.config.schema import validate_config
from degen_train.data import cache_lock, resumable
from degen_train.data import examples as examples_module
from degen_train.data import tokenizer as tokenizer_module
from degen_train.data.corpus import load_corpus
from degen_train.data.datamodule import prepare_data, tokenize_node_part
from degen_train.data.encoding import documents_ids, encoded_batches
from degen_train.data.examples import build_examples
from degen_train.data.tokenizer import get_tokenizer
from tests.conftest import REPO
from tests.helpers import run

CASES = {  # data format, examples layout
    "mlm packed": ("mlm", "packed"),
    "causal packed": ("causal", "packed"),
    "mlm sentences": ("mlm", "sentences"),
    "mlm_nsp pairs": ("mlm_nsp", "packed"),
}


def arrow_bytes(folder: Path) -> list[bytes]:
    files = sorted(folder.glob("*.arrow"))
    assert files, f"no table in {folder}"
    return [f.read_bytes() for f in files]


@pytest.mark.parametrize("case", CASES)
def test_examples_are_the_same_bytes_whatever_the_thread_count(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """1 and 2 tokenizing threads (data.num_proc) write byte-identical example tables (the issue's determinism test)."""
    data_format, layout = CASES[case]
    monkeypatch.setattr(examples_module, "READ_BATCH", 16)  # the builtin corpus becomes dozens of batches
    cfg = load_config([f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=2000"]).data
    corpus = load_corpus(cfg)
    family = "decoder" if data_format == "causal" else "encoder"
    tokenizer = get_tokenizer(
        cfg.tokenizer, family=family, corpus=corpus.train, corpus_identity=corpus.identity, cache_dir=tmp_path
    )
    tables = {}
    for processes in (1, 2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="degen_train.data.encoding"):
            tables[processes] = build_examples(
                corpus.train,
                tokenizer,
                data_format=data_format,
                block_size=64,
                seed=3,
                cache_root=tmp_path / f"cache_{processes}",
                identity="same",
                layout=layout,
                num_proc=processes,
            )
        assert ("tokenizing on 2 threads" in caplog.text) == (processes == 2)
    assert len(tables[1]) > 100
    folders = {p: Path(t.cache_files[0]["filename"]).parent for p, t in tables.items()}
    assert arrow_bytes(folders[1]) == arrow_bytes(folders[2])


def test_batches_in_flight_are_bounded(tmp_path: Path) -> None:
    """Memory flat in the corpus size: the reader runs at most two batches per thread ahead of the consumer."""
    cfg = load_config([f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=2000"]).data
    corpus = load_corpus(cfg)
    tokenizer = get_tokenizer(
        cfg.tokenizer, family="encoder", corpus=corpus.train, corpus_identity=corpus.identity, cache_dir=tmp_path
    )
    read = 0

    def endless():  # a stream that never ends: only a bounded reader can consume it
        nonlocal read
        while True:
            read += 1
            yield ["the same short document, again and again."] * 4

    ahead = []
    for consumed, batch in enumerate(encoded_batches(endless(), tokenizer, documents_ids, threads=2), start=1):
        assert len(batch) == 4
        ahead.append(read - consumed)
        if consumed == 50:
            break
    assert max(ahead) <= 2 * 2 + 1, ahead  # IN_FLIGHT_PER_THREAD × threads, plus the one being handed over


SLOW_BUILD = """
import logging, sys, time
sys.path.insert(0, {repo!r})
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
from degen_train.config import load_config
from degen_train.data import examples, tokenizer
from degen_train.data.datamodule import prepare_data, tokenize_node_part

def slowly(function):
    def wrapped(*args, **kwargs):
        time.sleep(1.5)  # long enough that the other process asks while this one builds
        return function(*args, **kwargs)
    return wrapped

tokenizer.train_byte_bpe = slowly(tokenizer.train_byte_bpe)
examples.example_maker = slowly(examples.example_maker)
cfg = load_config(["data.cache_dir={cache}", "data.tokenizer.vocab_size=1000"]).data
data = prepare_data(cfg, family="decoder", data_format="causal", seed=0)
print("sizes", len(data.train), len(data.validation))
"""


def test_runs_started_together_build_each_cache_entry_once(tmp_path: Path) -> None:
    """Two processes started together on one empty cache: one trains the tokenizer and builds the examples, the
    other waits for each and reads the finished entry (never a half-built one)."""
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent(SLOW_BUILD.format(repo=str(REPO), cache=str(tmp_path / "cache"))))
    started = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [process.communicate(timeout=300)[0] for process in started]
    assert [process.returncode for process in started] == [0, 0], outputs
    both = "".join(outputs)
    assert both.count("training a decoder tokenizer") == 1, both
    assert both.count("trained by another process while this one waited") == 1, both
    assert both.count("building examples into") == 2, both  # train and validation, each once
    assert both.count("built by another process while this one waited") == 2, both
    sizes = {line for output in outputs for line in output.splitlines() if line.startswith("sizes ")}
    assert len(sizes) == 1, sizes


def test_a_filesystem_without_locks_still_builds_and_says_what_happens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_locks(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    # Only the cache lock's view of fcntl: datasets' own file locks keep working.
    without_locks = SimpleNamespace(flock=no_locks, LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB)
    monkeypatch.setattr(cache_lock, "fcntl", without_locks)
    cfg = load_config([f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=1000"]).data
    with caplog.at_level(logging.WARNING):
        data = prepare_data(cfg, family="decoder", data_format="causal", seed=0)
    assert len(data.train) > 0
    assert "does not support locks (No locks available): runs started together may each build" in caplog.text
    assert "none reads a half-built one" in caplog.text


def test_prepare_only_builds_the_cache_that_a_run_then_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    cache = tmp_path / "cache"
    settings = [f"data.cache_dir={cache}", "data.tokenizer.vocab_size=1000", "recipe=gpt2_mle", "model=gpt2_tiny"]
    summary = run(tmp_path / "prepare", *settings, "prepare_only=true")
    printed = capsys.readouterr().out
    train = summary["prepared"]["train"]
    assert train["examples"] > 0 and train["tokens"] >= train["examples"] and train["bytes"] > 0
    assert Path(train["folder"]).parent == cache / "examples"
    assert f"train: {train['examples']} examples, {train['tokens']} tokens" in printed
    assert not (tmp_path / "prepare" / "config.json").exists()  # nothing of a run is written

    def forbidden(*args, **kwargs):
        raise AssertionError("the run built what prepare_only had prepared")

    monkeypatch.setattr(tokenizer_module, "train_byte_bpe", forbidden)
    monkeypatch.setattr(examples_module, "example_maker", forbidden)
    trained = run(tmp_path / "run", *settings, "trainer.max_steps=1", "scheduler.warmup_steps=0", "export_hf=false")
    assert trained["final_step"] == 1


def test_a_process_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"data\.num_proc.*greater than or equal to 1"):
        validate_config(load_config(["data.num_proc=0"]))


@pytest.mark.parametrize("case", ["causal packed, streamed", "mlm sentences, loaded"])
def test_a_killed_preparation_resumes_where_it_stopped(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed after three committed shards, a rerun reads but does not tokenize the documents they used, says so,
    and ends with the table an uninterrupted build writes (packed: the stream's unfinished tail carried over)."""
    data_format, layout = ("causal", "packed") if case.startswith("causal") else ("mlm", "sentences")
    monkeypatch.setattr(resumable, "SHARD_EXAMPLES", 40)
    monkeypatch.setattr(examples_module, "READ_BATCH", 16)
    cfg = load_config([f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=1000"]).data
    corpus = load_corpus(cfg)
    family = "decoder" if data_format == "causal" else "encoder"
    tokenizer = get_tokenizer(
        cfg.tokenizer, family=family, corpus=corpus.train, corpus_identity=corpus.identity, cache_dir=tmp_path
    )
    documents = corpus.train.to_iterable_dataset() if case.endswith("streamed") else corpus.train

    def build(root: str) -> object:
        return build_examples(documents, tokenizer, data_format=data_format, block_size=64, seed=0,
                              cache_root=tmp_path / root, identity="same", layout=layout, num_proc=1)  # fmt: skip

    whole = build("whole")
    commits, real_commit = [], resumable._commit

    def killed_at_the_fourth(*args, **kwargs):
        commits.append(1)
        if len(commits) == 4:
            raise KeyboardInterrupt("killed")
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(resumable, "_commit", killed_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        build("killed")
    partial = next((tmp_path / "killed" / "examples").glob(".*.partial"))
    kept = json.loads((partial / "progress.json").read_text())
    assert kept["shards"] == 3 and 0 < kept["documents"] < len(corpus.train)
    monkeypatch.setattr(resumable, "_commit", real_commit)
    tokenized = []
    real_encode = examples_module.documents_ids if data_format == "causal" else examples_module.documents_segment_ids
    monkeypatch.setattr(examples_module, real_encode.__name__, lambda texts, tok: tokenized.append(len(texts)) or
                        real_encode(texts, tok))  # fmt: skip
    with caplog.at_level(logging.INFO, logger="degen_train.data.resumable"):
        resumed = build("killed")
    assert f"at document {kept['documents']}: {kept['examples']} examples in 3 shards were kept" in caplog.text
    assert sum(tokenized) == len(corpus.train) - kept["documents"]
    assert resumed["input_ids"] == whole["input_ids"]
    assert not partial.exists()


@pytest.mark.parametrize("case", ["mlm packed", "mlm_nsp pairs", "mlm sentences"])
def test_nodes_tokenize_parts_and_a_run_packs_the_same_bytes_from_them(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Three nodes each tokenize their share (data.tokenize_part=K of 3) into one cache; the run that then builds
    the examples packs them from the parts, tokenizing nothing, into the bytes one node's build writes."""
    data_format, layout = CASES[case]
    settings = ["data.tokenizer.vocab_size=1000", f"data.examples={layout}"]
    alone = prepare_data(load_config([f"data.cache_dir={tmp_path / 'alone'}", *settings]).data, family="encoder",
                         data_format=data_format, seed=0)  # fmt: skip
    nodes_cache = tmp_path / "nodes"
    for part in (2, 0, 1):  # nodes finish in any order
        node = load_config([f"data.cache_dir={nodes_cache}", *settings, "data.tokenize_parts=3",
                            f"data.tokenize_part={part}"]).data  # fmt: skip
        done = tokenize_node_part(node, family="encoder", data_format=data_format)
        assert done["train"]["missing_parts"] == {2: [0, 1], 0: [1], 1: []}[part]
    assert sum(1 for _ in (nodes_cache / "tokenized").glob("*/part-*-of-00003")) == 6  # train and validation

    def forbidden(*args, **kwargs):
        raise AssertionError("the run tokenized documents that the nodes' parts hold")

    monkeypatch.setattr(examples_module, "encoded_batches", forbidden)
    with caplog.at_level(logging.INFO, logger="degen_train.data.examples"):
        packed = prepare_data(load_config([f"data.cache_dir={nodes_cache}", *settings]).data, family="encoder",
                              data_format=data_format, seed=0)  # fmt: skip
    assert "packing from 3 tokenized parts" in caplog.text
    for split in ("train", "validation"):
        folders = [Path(getattr(d, split).cache_files[0]["filename"]).parent for d in (alone, packed)]
        assert arrow_bytes(folders[0]) == arrow_bytes(folders[1])


def test_a_node_part_prints_what_it_did_and_what_is_left(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    settings = [f"data.cache_dir={tmp_path / 'cache'}", "data.tokenizer.vocab_size=1000", "prepare_only=true",
                "data.tokenize_parts=2", "data.tokenize_part=1"]  # fmt: skip
    summary = run(tmp_path / "node1", *settings)
    printed = capsys.readouterr().out
    assert summary["tokenized_part"]["part"] == 1 and summary["tokenized_part"]["train"]["documents"] > 0
    assert "tokenized part 1 of 2" in printed and "parts still to come: [0]" in printed
    assert not (tmp_path / "node1" / "config.json").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.tokenize_parts=2", "data.tokenize_part=2", "prepare_only=true"],
         r"data\.tokenize_part=2 must be in 0\.\.1: this node's index among data\.tokenize_parts=2 nodes"),
        (["data.tokenize_parts=2", "data.tokenize_part=0"],
         r"data\.tokenize_part=0 tokenizes one node's share of the corpus and stops: give prepare_only=true"),
        (["data.tokenize_parts=0"], r"data\.tokenize_parts.*greater than or equal to 1"),
    ],
)  # fmt: skip
def test_a_bad_node_part_is_refused_naming_it(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_config(load_config(overrides))


def test_a_streamed_corpus_is_not_split_over_nodes(tmp_path: Path) -> None:
    node = load_config([f"data.cache_dir={tmp_path}", "data.tokenizer.vocab_size=1000", "data.streaming=true",
                        "data.tokenize_parts=2", "data.tokenize_part=0"]).data  # fmt: skip
    with pytest.raises(ValueError, match=r"a streamed corpus \(data\.streaming=true\) has no length to split"):
        tokenize_node_part(node, family="decoder", data_format="causal")


def test_more_nodes_than_documents_leave_empty_parts_that_still_complete_the_set(tmp_path: Path) -> None:
    """Ten documents, one of them held out for validation, over four nodes: three validation parts are empty."""
    corpus = tmp_path / "ten.txt"
    corpus.write_text("".join(f"line {i} says the cat sat on the mat again and again.\n" for i in range(10)))
    settings = ["data=text", f"data.path={corpus}", "data.document_unit=line", "data.tokenizer.vocab_size=200",
                "data.validation_fraction=0.1"]  # fmt: skip
    alone = prepare_data(load_config([f"data.cache_dir={tmp_path / 'alone'}", *settings]).data, family="decoder",
                         data_format="causal", seed=0)  # fmt: skip
    for part in range(4):
        node = load_config([f"data.cache_dir={tmp_path / 'nodes'}", *settings, "data.tokenize_parts=4",
                            f"data.tokenize_part={part}"]).data  # fmt: skip
        done = tokenize_node_part(node, family="decoder", data_format="causal")
        assert done["validation"]["documents"] == (1 if part == 3 else 0)
    packed = prepare_data(load_config([f"data.cache_dir={tmp_path / 'nodes'}", *settings]).data, family="decoder",
                          data_format="causal", seed=0)  # fmt: skip
    assert packed.train["input_ids"] == alone.train["input_ids"]
    assert packed.validation["input_ids"] == alone.validation["input_ids"]


def three_node_parts(cache: Path) -> tuple[list[str], Path]:
    """Three nodes' parts of the default corpus in ``cache``; (the settings, the train split's parts folder)."""
    settings = [f"data.cache_dir={cache}", "data.tokenizer.vocab_size=1000"]
    for part in range(3):
        node = load_config([*settings, "data.tokenize_parts=3", f"data.tokenize_part={part}"]).data
        done = tokenize_node_part(node, family="encoder", data_format="mlm")
    return settings, Path(done["train"]["part"]).parent


def pack(settings: list[str]) -> object:
    return prepare_data(load_config(settings).data, family="encoder", data_format="mlm", seed=0)


def test_a_part_copied_over_another_is_refused_naming_it(tmp_path: Path) -> None:
    """Issue drill: part 1 replaced by a copy of part 0 trained on 3,256 examples instead of 3,482, silently."""
    import shutil

    settings, folder = three_node_parts(tmp_path / "cache")
    shutil.rmtree(folder / "part-00001-of-00003")
    shutil.copytree(folder / "part-00000-of-00003", folder / "part-00001-of-00003")
    with pytest.raises(ValueError, match=r"part-00001-of-00003 holds documents 0\.\. of part 0 of 3, but this place "
                                         r"is part 1 of 3 .*a copied or misplaced part"):  # fmt: skip
        pack(settings)


def test_a_missing_part_is_named_instead_of_tokenizing_everything_silently(tmp_path: Path) -> None:
    import shutil

    settings, folder = three_node_parts(tmp_path / "cache")
    shutil.rmtree(folder / "part-00002-of-00003")
    with pytest.raises(ValueError, match=r"\[0, 1\] of 3 are there, part\(s\) \[2\] missing. Run prepare_only=true "
                                         r"data.tokenize_parts=3 data.tokenize_part=K"):  # fmt: skip
        pack(settings)


def test_a_torn_part_names_its_file(tmp_path: Path) -> None:
    settings, folder = three_node_parts(tmp_path / "cache")
    table = next((folder / "part-00001-of-00003").glob("*.arrow"))
    table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"{table.name} is missing or not the file written \(sha256 differs"):
        pack(settings)


def test_parts_of_another_tokenizer_are_refused(tmp_path: Path) -> None:
    import json

    settings, folder = three_node_parts(tmp_path / "cache")
    manifest = folder / "part-00000-of-00003" / "part.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "tokenizer": "someone else's"}))
    with pytest.raises(ValueError, match=r"part-00000-of-00003 was made with another tokenizer than this run's"):
        pack(settings)


def test_a_part_cut_from_another_corpus_is_refused_naming_it(tmp_path: Path) -> None:
    """Issue 43 drill 4: a part tokenized from another corpus (same tokenizer, its own valid manifest) was packed
    without a word (164 of 482 validation rows differed). A part's manifest now binds it to its documents' text."""
    import shutil

    corpora = {name: tmp_path / f"{name}.txt" for name in ("mine", "other")}
    for name, path in corpora.items():
        path.write_text("".join(f"line {i} of the {name} corpus says the cat sat on mat {i % 7}.\n" for i in range(40)))
    tokenizer = tmp_path / "tokenizer"
    first = prepare_data(load_config(["data=text", f"data.path={corpora['mine']}", "data.document_unit=line",
                                      "data.tokenizer.vocab_size=200", f"data.cache_dir={tmp_path / 'c'}"]).data,
                         family="decoder", data_format="causal", seed=0)  # fmt: skip
    first.tokenizer.save_pretrained(str(tokenizer))
    folders = {}
    for name, path in corpora.items():
        settings = ["data=text", f"data.path={path}", "data.document_unit=line", f"data.tokenizer.path={tokenizer}",
                    f"data.cache_dir={tmp_path / name}"]  # fmt: skip
        for part in range(2):
            node = load_config([*settings, "data.tokenize_parts=2", f"data.tokenize_part={part}"]).data
            done = tokenize_node_part(node, family="decoder", data_format="causal")
        folders[name] = (settings, Path(done["train"]["part"]).parent)
    settings, mine = folders["mine"]
    shutil.rmtree(mine / "part-00001-of-00002")
    shutil.copytree(folders["other"][1] / "part-00001-of-00002", mine / "part-00001-of-00002")
    with pytest.raises(ValueError, match=r"part-00001-of-00002 holds other text than this run's documents 18\.\.35 "
                                         r"\(a part cut from another corpus"):  # fmt: skip
        prepare_data(load_config(settings).data, family="decoder", data_format="causal", seed=0)
