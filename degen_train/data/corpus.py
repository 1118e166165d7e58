"""Load raw documents as a ``datasets.Dataset`` with one ``text`` column.

Sources: the embedded corpus, local files (txt, jsonl/json, parquet, csv/tsv, or a directory of
them) and hub data sets (``load_dataset``; same code path). Every input problem is reported here,
before any tokenizer or model is built.
"""

from __future__ import annotations

import codecs
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow.compute

from degen_train.core.handed_files import not_a_plain_file
from degen_train.core.io import atomic_write_text, cache_key, file_sha256
from degen_train.data.builtin_corpus import builtin_documents
from degen_train.data.section import DataConfig, data_section
from degen_train.data.text_files import UNIT_MEANS, check_each_file, text_documents
from degen_train.data.unreadable import unreadable_corpus_error

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".txt": "text", ".text": "text", ".raw": "text", ".tokens": "text"}
TABLE_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}


@dataclass(frozen=True)
class Corpus:
    """Documents plus a stable identity used in cache keys, and a record of where they came from."""

    train: datasets.Dataset | datasets.IterableDataset
    validation: datasets.Dataset | datasets.IterableDataset | None
    identity: str
    provenance: dict[str, Any]  # source and its fingerprint: file sha256s, or hub name + revision


def load_corpus(section: DataConfig | Any) -> Corpus:
    """Load the corpus described by the ``data`` section (typed here when composed in Python)."""
    cfg = data_section(section)
    source = cfg.source
    if source == "builtin":
        docs = builtin_documents()
        identity = cache_key("builtin", sys.version_info[:2], *docs)
        train = datasets.Dataset.from_dict({"text": docs})
        train = train.to_iterable_dataset() if cfg.streaming else train
        return Corpus(train, None, identity, {"source": "builtin", "fingerprint": identity})
    if source == "text":
        train, train_id, files = _load_local(cfg, cfg.path, "data.path")
        validation, validation_id = (None, "")
        if cfg.validation_path:
            validation, validation_id, validation_files = _load_local(cfg, cfg.validation_path, "data.validation_path")
            files += validation_files
        record = {"source": "text", "files": [_file_record(f, Path(str(cfg.cache_dir)).expanduser()) for f in files]}
        return Corpus(train, validation, cache_key(train_id, validation_id), record)
    return _load_hub(cfg)


SAVED_MARKS = ("state.json", "dataset_dict.json")  # what datasets' save_to_disk writes beside its tables


def _load_local(cfg: Any, path_value: str | None, key: str) -> tuple[Any, str, list[Path]]:
    path = Path(str(path_value)).expanduser()
    if not path.exists():
        where = f" ({cfg.missing_hint})" if cfg.missing_hint else ""
        raise FileNotFoundError(f"{key}={path} does not exist{where}")
    kind = not_a_plain_file(path)
    if kind:  # read as "empty (0 bytes)" before, or never ended
        raise ValueError(f"{key}={path} is {kind}, not a plain file or folder: give the corpus as a file or folder")
    if path.is_dir() and any((path / mark).is_file() for mark in SAVED_MARKS):
        return _load_saved(cfg, path, key)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    known = {**TEXT_SUFFIXES, **TABLE_SUFFIXES}
    files = [f for f in files if f.suffix.lower() in known] if path.is_dir() else files
    if not files:
        raise ValueError(f"{key}={path} holds no files ending in {', '.join(sorted(known))}")
    kinds = {known.get(f.suffix.lower(), "text") for f in files}
    if len(kinds) > 1:
        raise ValueError(f"{key}={path} mixes file kinds {sorted(kinds)}; point it at one kind")
    kind = kinds.pop()
    if all(f.stat().st_size == 0 for f in files):
        raise ValueError(f"{key}={path} is empty (0 bytes): there is no text to train on")
    if kind == "text":
        files = _check_utf8(files, skip=cfg.on_decode_error == "skip")
    unit = cfg.document_unit
    data_files = [str(f) for f in files]
    kwargs: dict[str, Any] = {"split": "train", "streaming": bool(cfg.streaming)}
    if kind == "csv" and files[0].suffix.lower() == ".tsv":
        kwargs["delimiter"] = "\t"
    if kind == "text":
        documents = check_each_file(files, unit, f"{key}={path}")  # a file that comes out as one document, named
        if not any(documents.values()):  # datasets would say "Instruction 'train' corresponds to no data"
            raise ValueError(f"corpus {path} is empty: no non-blank document")
    try:
        if kind == "text":  # blank lines of spaces count as blank (text_files.py)
            dataset = text_documents(files, unit, streaming=bool(cfg.streaming))
        else:
            dataset = datasets.load_dataset(kind, data_files=data_files, **kwargs)
    except Exception as error:  # noqa: BLE001 - reworded: the bad file and line, or the full disk, by name
        raise unreadable_corpus_error(error, files, kind, f"{key}={path}") from error
    if kind != "text":
        dataset = _select_text_column(dataset, cfg.text_column, str(path))
    dataset = _drop_empty(dataset, str(path), streaming=bool(cfg.streaming))
    if kind == "text" and not cfg.streaming:  # what the split found, said before a tokenizer is trained on it
        log.info("corpus %s=%s: %s", key, path, describe_documents(len(dataset), files, unit))
    stats = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return dataset, cache_key("local", unit, cfg.text_column, *stats), files


def _load_saved(cfg: Any, path: Path, key: str) -> tuple[Any, str, list[Path]]:
    """A folder written by datasets' ``save_to_disk``: a Dataset, or the split ``data.split`` of a DatasetDict (the
    held-out share is cut from it unless data.validation_path names another such folder)."""
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as error:  # noqa: BLE001 - reworded, naming the folder
        raise ValueError(f"{key}={path} looks like a save_to_disk folder but does not load ({error})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if cfg.split not in loaded:
            raise ValueError(f"{key}={path} holds the splits {', '.join(loaded)}, not data.split={cfg.split}")
        loaded = loaded[cfg.split]
    dataset = _drop_empty(_select_text_column(loaded, cfg.text_column, str(path)), str(path), streaming=False)
    files = sorted(p for p in path.rglob("*.arrow") if p.is_file())
    log.info("corpus %s=%s: %d documents (a save_to_disk folder, column %s)", key, path, len(dataset), cfg.text_column)
    stats = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return dataset, cache_key("saved", cfg.split, cfg.text_column, *stats), files


def count_lines(files: list[Path], chunk_size: int = 1 << 20) -> int:
    """Newline-terminated lines (and a last unterminated one) over ``files``, read in chunks."""
    lines = 0
    for path in files:
        last = b"\n"
        with path.open("rb") as handle:
            while chunk := handle.read(chunk_size):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
        lines += last != b"\n"
    return lines


def describe_documents(documents: int, files: list[Path], unit: str) -> str:
    """What data.document_unit made of text files: documents, files, lines, size."""
    lines = count_lines(files)
    size = sum(f.stat().st_size for f in files) / 2**20
    return (
        f"{documents} document{'s' * (documents != 1)} (data.document_unit={unit}: {UNIT_MEANS[unit]}) in "
        f"{len(files)} file{'s' * (len(files) != 1)}, {lines} lines, {size:.1f} MiB"
    )


def held_out(documents: Any, fraction: float, *, seed: int) -> tuple[Any, Any]:
    """(train, validation) documents: the validation set is the documents, in a seeded random order, whose text
    first reaches ``fraction`` of the corpus's characters, so the held-out share is the one asked for to within one
    document (a document count would hold out 25% of a folder of four files for 10% asked). At least one document
    on each side; the share held out is logged beside the one asked for."""
    lengths = pyarrow.compute.utf8_length(documents.with_format("arrow")["text"]).to_numpy().astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(documents))
    reached = np.cumsum(lengths[order]) >= fraction * lengths.sum()
    count = min(max(int(np.argmax(reached)) + 1, 1), len(documents) - 1)
    validation, train = order[:count], order[count:]
    share = lengths[validation].sum() / max(lengths.sum(), 1)
    log.info("validation: %d of %d documents, %.1f%% of the text (data.validation_fraction=%g)", count,
             len(documents), 100 * share, fraction)  # fmt: skip
    if share > 2 * fraction:
        log.warning("the validation split holds %.1f%% of the text for data.validation_fraction=%g: one document "
                    "is that large (%d documents in all); give data.validation_path, or cut the corpus finer "
                    "(data.document_unit)", 100 * share, fraction, len(documents))  # fmt: skip
    return documents.select(train), documents.select(validation)


def too_few_documents(corpus: Corpus, cfg: Any) -> str:
    """Why a corpus of one document cannot be split into train and validation, and the setting that splits it
    (before: a 30k tokenizer was trained first, then a bare "the corpus has one document")."""
    if cfg.source != "text":
        return "the corpus has one document: it cannot be split into train and validation"
    where = f"data.path={cfg.path}"
    files = corpus.provenance.get("files") or []
    unit = str(cfg.document_unit)
    found = describe_documents(len(corpus.train), [Path(f["path"]) for f in files], unit) if files else ""
    lines = count_lines([Path(f["path"]) for f in files]) if files else 0
    if unit != "line" and lines > 1:
        better = "data.document_unit=line (each line a document)"
        if unit == "document":
            better = "data.document_unit=paragraph (blank lines separate documents) or " + better
        return f"{where}: {found}; a validation split needs at least 2. Set {better}, or give data.validation_path"
    return f"{where}: {found}; a validation split needs at least 2: give more text or data.validation_path"


def _file_record(path: Path, cache_dir: Path) -> dict[str, Any]:
    """Path, size and sha256 of a corpus file; the hash is cached by (path, size, mtime), read once."""
    stat = path.stat()
    remembered = cache_dir / "sha256" / cache_key(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if remembered.exists():
        digest = remembered.read_text().strip()
    else:
        digest = file_sha256(path)
        atomic_write_text(remembered, digest)
    return {"path": str(path.resolve()), "bytes": stat.st_size, "sha256": digest}


def _load_hub(cfg: Any) -> Corpus:
    args = [cfg.name] + ([cfg.config] if cfg.config else [])
    # revision: a branch, tag or commit of the data set's hub repository (null: the default branch).
    load = {"streaming": bool(cfg.streaming), "revision": cfg.revision}
    train = datasets.load_dataset(*args, split=cfg.split, **load)
    train = _drop_empty(_select_text_column(train, cfg.text_column, cfg.name), cfg.name, bool(cfg.streaming))
    validation = None
    if cfg.validation_split:
        validation = datasets.load_dataset(*args, split=cfg.validation_split, **load)
        validation = _select_text_column(validation, cfg.text_column, cfg.name)
        validation = _drop_empty(validation, cfg.name, bool(cfg.streaming))
    identity = cache_key("hub", *args, cfg.split, cfg.validation_split, cfg.revision)
    record = {"source": "hub", "name": cfg.name, "config": cfg.config, "split": cfg.split}
    record |= {"validation_split": cfg.validation_split, "revision": cfg.revision}
    return Corpus(train, validation, identity, record)


def _select_text_column(dataset: Any, column: str, where: str) -> Any:
    names = list(dataset.column_names or [])
    if column not in names:
        raise ValueError(f"text column {column!r} not found in {where}; columns are: {', '.join(names)}")
    dataset = dataset.select_columns([column])
    return dataset.rename_column(column, "text") if column != "text" else dataset


def _drop_empty(dataset: Any, where: str, streaming: bool) -> Any:
    dataset = dataset.map(lambda row: {"text": str(row["text"] or "").strip()})
    dataset = dataset.filter(lambda row: bool(row["text"]))
    if streaming:
        if next(iter(dataset), None) is None:
            raise ValueError(f"corpus {where} is empty: no non-blank document")
        return dataset
    if len(dataset) == 0:
        raise ValueError(f"corpus {where} is empty: no non-blank document")
    return dataset


def _check_utf8(files: list[Path], *, skip: bool) -> list[Path]:
    """Keep the files that decode as UTF-8; name the file and byte offset of the first bad byte."""
    good = []
    for path in files:
        offset = first_bad_utf8_offset(path)
        if offset is None:
            good.append(path)
            continue
        message = f"{path} is not valid UTF-8: bad byte at offset {offset}"
        if not skip:
            raise ValueError(message + " (data.on_decode_error=skip skips such files)")
        log.warning("%s; skipping the file", message)
    if not good:
        raise ValueError("no readable UTF-8 file is left in the corpus")
    return good


def first_bad_utf8_offset(path: Path, chunk_size: int = 1 << 20) -> int | None:
    """Byte offset of the first byte that is not valid UTF-8, or None; reads the file in chunks."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    consumed = 0  # bytes handed to the decoder so far
    pending = 0  # of those, bytes the decoder still holds (a split multi-byte character)
    with path.open("rb") as handle:
        while True:
            chunk = handle.read(chunk_size)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                return consumed - pending + error.start
            if not chunk:
                return None
            consumed += len(chunk)
            pending = len(decoder.getstate()[0])
