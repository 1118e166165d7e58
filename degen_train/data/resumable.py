"""A preparation that survives a kill: examples committed in shards, each with the position in the corpus.

Building the examples of a large corpus (or of a hub stream) takes hours; a preparation killed at 90% should not
start again from the first document. Every ``SHARD_EXAMPLES`` examples, at a document boundary, the examples so
far become a shard on disk and ``progress.json`` records how many documents they used and the unfinished tail of
the packed stream. A rerun with the same settings (the same cache key) skips those documents, read but not
tokenized (a stream restarts where it stopped, not at the beginning), says so, and ends with the same table as an
uninterrupted build. The finished table replaces the shards; until then they sit in a hidden folder beside the
cache entry.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import datasets

from degen_train.core.io import CACHE_ELSEWHERE, DiskFull, atomic_directory, atomic_write_json

log = logging.getLogger(__name__)

SHARD_EXAMPLES = 20_000  # examples held in memory before they are committed (about 100 MB of 128-token rows)


def partial_folder(target: Path) -> Path:
    return target.parent / f".{target.name}.partial"


def build_in_shards(encoded_after: Callable[[int], Iterable[list]], maker: Any, target: Path) -> None:
    """Every document through ``maker`` (PackedBlocks or SentenceExamples) into the cache entry ``target``.
    ``encoded_after(n)``: the documents' token ids (or segments' ids) in batches, after the first n documents."""
    partial = partial_folder(target)
    progress = _read_progress(partial)
    done = int(progress["documents"])
    if done:
        log.info(
            "resuming the preparation of %s at document %d: %d examples in %d shards were kept from the run that "
            "stopped",
            target,
            done,
            progress["examples"],
            progress["shards"],
        )
        maker.carry = list(progress["carry"])
    try:
        _build(encoded_after, maker, target, partial, progress, done)
    except DiskFull as error:  # the shards committed so far stay: say where, and that the same command goes on
        kept = f" The examples committed so far are kept in {partial}; the same command resumes from them"
        raise DiskFull(error.errno, f"{error.strerror}.{kept if partial.is_dir() else ''}") from error
    shutil.rmtree(partial, ignore_errors=True)


def _build(encoded_after: Callable[[int], Iterable[list]], maker: Any, target: Path, partial: Path,
           progress: dict[str, Any], done: int) -> None:  # fmt: skip
    pending: list[dict] = []
    for batch in encoded_after(done):
        for document in batch:
            pending.extend(maker.feed(document))
        done += len(batch)
        if len(pending) >= SHARD_EXAMPLES:
            progress = _commit(partial, pending, progress, documents=done, carry=maker.carry)
            pending = []
    pending.extend(maker.finish())
    if pending:
        progress = _commit(partial, pending, progress, documents=done, carry=[])
    shards = [datasets.load_from_disk(str(partial / f"shard-{i:05d}")) for i in range(progress["shards"])]
    if not shards:
        raise ValueError("the corpus gave no training example: it is shorter than one block")
    with atomic_directory(target, when_full=CACHE_ELSEWHERE) as staging:
        table = shards[0] if len(shards) == 1 else datasets.concatenate_datasets(shards)
        table.save_to_disk(str(staging))


def _read_progress(partial: Path) -> dict[str, Any]:
    record = partial / "progress.json"
    if record.exists():
        return json.loads(record.read_text())
    return {"documents": 0, "examples": 0, "shards": 0, "carry": []}


def _commit(partial: Path, rows: list[dict], progress: dict, *, documents: int, carry: list[int]) -> dict[str, Any]:
    """The rows as the next shard, then the progress that counts it (a kill between the two redoes the shard)."""
    index = int(progress["shards"])
    with atomic_directory(partial / f"shard-{index:05d}", replace=True, when_full=CACHE_ELSEWHERE) as staging:
        _table(rows).save_to_disk(str(staging))
    progress = {"documents": documents, "examples": int(progress["examples"]) + len(rows), "shards": index + 1,
                "carry": list(carry)}  # fmt: skip
    atomic_write_json(partial / "progress.json", progress)
    return progress


def _table(rows: list[dict]) -> datasets.Dataset:
    return datasets.Dataset.from_list(rows)
