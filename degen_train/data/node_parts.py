"""Tokenizing one corpus on several nodes: ``prepare_only=true data.tokenize_parts=N data.tokenize_part=K``.

Node K of N tokenizes documents [K·n/N, (K+1)·n/N) of each split (n documents, in the order a run reads them) into
a part in ``data.cache_dir``. Once all N parts of a split are there, the run that builds its examples packs them
from the parts, part 0 first, tokenizing nothing: the same examples, byte for byte, as one node's build. Packing
stays one sequential pass (blocks and NSP pairs cross document boundaries), which is cheap beside tokenizing
(README: ~13 MB/s here against ~2 MB/s per core for the tokenizer). A part is written to a staging folder and
renamed whole, under the cache entry's build lock, so a half-written part is never read or counted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets

from degen_train.core.io import CACHE_ELSEWHERE, atomic_directory, cache_key, file_sha256
from degen_train.data.cache_lock import building
from degen_train.data.encoding import documents_ids, documents_segment_ids, encoded_batches

log = logging.getLogger(__name__)

PART_NAME = re.compile(r"part-(\d{5})-of-(\d{5})")
READ_BATCH = 512
MANIFEST = "part.json"  # what a part covers, written with it: checked before any run packs from it


def parts_folder(cache_root: Path, identity: str, *, segmented: bool) -> Path:
    """Where the parts of one split's documents, tokenized whole (ids) or by sentence (segments), are kept."""
    return cache_root / "tokenized" / cache_key(identity, "segments" if segmented else "ids")


def part_path(folder: Path, part: int, parts: int) -> Path:
    return folder / f"part-{part:05d}-of-{parts:05d}"


def document_range(count: int, part: int, parts: int) -> range:
    """The documents of node ``part`` of ``parts``: contiguous, in order, sizes differing by at most one."""
    return range(part * count // parts, (part + 1) * count // parts)


def tokenize_part(
    documents: datasets.Dataset | datasets.IterableDataset,
    tokenizer: Any,
    folder: Path,
    *,
    part: int,
    parts: int,
    segmented: bool,
    threads: int,
    tokenizer_hash: str,
) -> tuple[Path, int]:
    """Node ``part``'s documents tokenized into their part; (its folder, its document count)."""
    if isinstance(documents, datasets.IterableDataset):
        raise ValueError(
            "data.tokenize_part splits the corpus by document position, and a streamed corpus (data.streaming=true) "
            "has no length to split: prepare it on one node (leave data.tokenize_part unset)"
        )
    mine = document_range(len(documents), part, parts)
    target = part_path(folder, part, parts)
    with building(target):  # a node started twice by a requeue does not tokenize its part twice at once
        if (target / "dataset_info.json").exists():
            log.info("tokenized part %d of %d is in the cache already: %s", part, parts, target)
            return target, len(mine)
        encode = documents_segment_ids if segmented else documents_ids
        column = "segments" if segmented else "ids"
        texts = (batch["text"] for batch in documents.select(mine).iter(batch_size=READ_BATCH))
        batches = encoded_batches(texts, tokenizer, encode, threads=threads)

        def rows() -> Iterator[dict[str, Any]]:
            for batch in batches:
                yield from ({column: document} for document in batch)

        ids = datasets.Sequence(datasets.Value("int32"))
        features = datasets.Features({column: datasets.Sequence(ids) if segmented else ids})
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as scratch, atomic_directory(
            target, when_full=CACHE_ELSEWHERE
        ) as staging:
            if len(mine):
                table = datasets.Dataset.from_generator(rows, features=features, cache_dir=scratch,
                                                        fingerprint=cache_key(scratch))  # fmt: skip
            else:  # more nodes than documents (a small validation split): an empty part still completes the set
                table = datasets.Dataset.from_dict({column: []}, features=features)
            table.save_to_disk(str(staging))
            manifest = {"part": part, "parts": parts, "first_document": mine.start, "documents": len(mine),
                        "total_documents": len(documents), "tokenizer": tokenizer_hash, "segmented": segmented,
                        "documents_sha256": documents_sha256(documents, mine),
                        "files": file_hashes(Path(staging))}  # fmt: skip
            (Path(staging) / MANIFEST).write_text(json.dumps(manifest, indent=1))
    log.info("tokenized part %d of %d: %d documents (from %d) into %s", part, parts, len(mine), mine.start, target)
    return target, len(mine)


def documents_sha256(documents: datasets.Dataset, span: range) -> str:
    """sha256 of the texts of ``documents[span]``, each prefixed by its length: what binds a part to its corpus's
    content (its index alone would let a part cut from another corpus, with the same tokenizer, pass)."""
    digest = hashlib.sha256()
    for batch in documents.select(span).iter(batch_size=READ_BATCH):
        for text in batch["text"]:
            encoded = text.encode("utf-8")
            digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of each file a part holds (its tables and their descriptions), by name."""
    files = [path for path in sorted(folder.iterdir()) if path.is_file() and path.name != MANIFEST]
    return {path.name: file_sha256(path) for path in files}


def complete_parts(folder: Path, *, documents: datasets.Dataset, tokenizer_hash: str) -> list[Path] | None:
    """Every part of one split, in order, once some node count N has all N parts in ``folder``, each checked against
    its manifest (the documents it covers and their text's sha256, the tokenizer, its files' sha256) and the set
    against the split (the ranges tile its documents): None when no set was started; a ValueError, naming the part
    and what is wrong, when a set is incomplete or any part does not hold what it should."""
    if not folder.is_dir():
        return None
    found: dict[int, set[int]] = defaultdict(set)
    for entry in folder.iterdir():
        match = PART_NAME.fullmatch(entry.name)
        if match and (entry / "dataset_info.json").exists():
            found[int(match[2])].add(int(match[1]))
    if not found:
        return None
    complete = [parts for parts in sorted(found, reverse=True) if found[parts] == set(range(parts))]
    if not complete:
        parts = max(found)
        raise ValueError(
            f"tokenized parts in {folder}: {sorted(found[parts])} of {parts} are there, part(s) "
            f"{sorted(set(range(parts)) - found[parts])} missing. Run prepare_only=true data.tokenize_parts={parts} "
            f"data.tokenize_part=K for each missing K (same data settings), or remove {folder} to tokenize the whole "
            f"split in this run"
        )
    paths = [part_path(folder, part, complete[0]) for part in range(complete[0])]
    check_parts(paths, documents=documents, tokenizer_hash=tokenizer_hash)
    return paths


def check_parts(paths: list[Path], *, documents: datasets.Dataset, tokenizer_hash: str) -> None:
    """Each part's manifest against its name, its files, the tokenizer and the text of the documents it claims to
    hold; the ranges against the split."""
    total_documents = len(documents)
    expected_start = 0
    for index, path in enumerate(paths):
        manifest_path = path / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"tokenized part {path}: its manifest {manifest_path} is missing or unreadable ({error}); "
                             f"remove the part and tokenize it again") from None  # fmt: skip
        claims = (manifest.get("part"), manifest.get("parts"), manifest.get("first_document"))
        if claims != (index, len(paths), expected_start):
            raise ValueError(
                f"tokenized part {path} holds documents {manifest.get('first_document')}.. of part "
                f"{manifest.get('part')} of {manifest.get('parts')}, but this place is part {index} of {len(paths)} "
                f"(documents {expected_start}..): a copied or misplaced part. Remove it and tokenize part {index} again"
            )
        if manifest.get("total_documents") != total_documents:
            raise ValueError(f"tokenized part {path} was cut from a split of {manifest.get('total_documents')} "
                             f"documents, this run's has {total_documents}: tokenize the parts again")  # fmt: skip
        if manifest.get("tokenizer") != tokenizer_hash:
            raise ValueError(f"tokenized part {path} was made with another tokenizer than this run's: tokenize the "
                             f"parts again with it")  # fmt: skip
        span = range(expected_start, expected_start + int(manifest.get("documents", 0)))
        if manifest.get("documents_sha256") != documents_sha256(documents, span):
            raise ValueError(
                f"tokenized part {path} holds other text than this run's documents {span.start}..{span.stop - 1} "
                f"(a part cut from another corpus, or one made before parts recorded their text's sha256): remove it "
                f"and tokenize part {index} again"
            )
        for name, digest in (manifest.get("files") or {}).items():
            file = path / name
            if not file.is_file() or file_sha256(file) != digest:
                raise ValueError(f"tokenized part {path}: {file} is missing or not the file written (sha256 "
                                 f"differs: torn or changed); remove the part and tokenize it again")  # fmt: skip
        expected_start += int(manifest.get("documents", 0))
    if expected_start != total_documents:
        raise ValueError(f"tokenized parts in {paths[0].parent} cover {expected_start} documents, the split has "
                         f"{total_documents}: tokenize the parts again")  # fmt: skip


def missing_parts(folder: Path, parts: int) -> list[int]:
    """The parts of ``parts`` not yet in ``folder``."""
    return [k for k in range(parts) if not (part_path(folder, k, parts) / "dataset_info.json").exists()]


def tokenized_batches(parts: list[Path], *, skip: int = 0) -> Iterator[list]:
    """The parts' documents (id lists, or lists of segments' id lists), part 0 first, after the first ``skip``."""
    for path in parts:
        if not any(path.glob("*.arrow")):  # an empty part (more nodes than documents) is saved without a table file
            continue
        table = datasets.load_from_disk(str(path))
        if skip >= len(table):
            skip -= len(table)
            continue
        column = table.column_names[0]
        rows = table.select(range(skip, len(table))) if skip else table
        skip = 0
        for batch in rows.iter(batch_size=READ_BATCH):
            yield batch[column]
