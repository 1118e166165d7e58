"""Turn documents into training examples, cached on disk by a hash of everything that shapes them.

- ``mlm``: documents joined by [SEP] into one stream, cut into blocks of T−2 and framed [CLS] … [SEP].
- ``causal``: documents joined by <|endoftext|>, cut into blocks of T.
- ``examples: sentences`` (mlm, causal): one example per sentence-like segment, cut to T (SimCSE's
  one-sentence inputs), never packed with the next.
- ``mlm_nsp``: [CLS] A [SEP] B [SEP] pairs, B the true continuation or (p = 0.5) text from another
  document, drawn once per corpus from the seed as in BERT's data preparation.

Documents are read in batches, tokenized by ``data.num_proc`` workers (encoding.py) and the examples
written to disk as they are made: in committed shards for blocks and sentences (resumable.py: a killed
preparation resumes), in one pass for NSP pairs. A streamed corpus larger than memory thus becomes a
memory-mapped table; random access then makes resuming a training run exact and cheap.
"""

from __future__ import annotations

import logging
import random
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import datasets

from degen_train.core.io import CACHE_ELSEWHERE, atomic_directory, cache_key
from degen_train.data.cache_lock import building
from degen_train.data.encoding import documents_ids, documents_segment_ids, encoded_batches
from degen_train.data.node_parts import complete_parts, parts_folder, tokenized_batches
from degen_train.data.resumable import build_in_shards
from degen_train.data.tokenizer import tokenizer_identity

log = logging.getLogger(__name__)

FORMATS = ("mlm", "mlm_nsp", "causal")
READ_BATCH = 512
NSP_POOL = 10_000  # documents kept for drawing random second segments


def build_examples(
    documents: datasets.Dataset | datasets.IterableDataset,
    tokenizer: Any,
    *,
    data_format: str,
    block_size: int,
    seed: int,
    cache_root: Path,
    identity: str,
    layout: str = "packed",
    num_proc: int = 1,
) -> datasets.Dataset:
    """Examples with ``input_ids`` (and ``token_type_ids``, ``next_sentence_label`` for NSP).

    ``num_proc`` threads tokenize; the examples are the same whatever it is (it is not in the cache key)."""
    if data_format not in FORMATS:
        raise ValueError(f"data format {data_format!r} is not one of {', '.join(FORMATS)}")
    # Only NSP pairs depend on the seed; packed blocks are shared by every seed of a sweep.
    pair_seed = seed if data_format == "mlm_nsp" else None
    key = cache_key(identity, data_format, block_size, pair_seed, *(() if layout == "packed" else (layout,)))
    target = cache_root / "examples" / key
    if (target / "dataset_info.json").exists():
        log.info("examples cache hit: %s", target)
        return datasets.load_from_disk(str(target))
    with building(target):  # a second run needing the same examples waits here, then finds them built
        if (target / "dataset_info.json").exists():
            log.info("examples cache hit (built by another process while this one waited): %s", target)
            return datasets.load_from_disk(str(target))
        log.info("building examples into %s", target)
        segmented = data_format == "mlm_nsp" or layout == "sentences"
        folder = parts_folder(cache_root, identity, segmented=segmented)
        streamed = isinstance(documents, datasets.IterableDataset)  # a stream has no parts (refused when made)
        parts = None if streamed else complete_parts(folder, documents=documents,
                                                     tokenizer_hash=tokenizer_identity(tokenizer))  # fmt: skip
        if parts is not None:
            log.info("packing from %d tokenized parts (data.tokenize_parts): nothing is tokenized", len(parts))

        def encoded_after(skip: int) -> Iterable[list]:
            """The documents' ids (segments' ids) in batches after the first ``skip``: from the nodes' parts when
            they are all there, else tokenized here."""
            if parts is not None:
                return tokenized_batches(parts, skip=skip)
            texts = _batches(documents.skip(skip) if skip else documents)
            encode = documents_segment_ids if segmented else documents_ids
            return encoded_batches(texts, tokenizer, encode, threads=num_proc)

        if data_format == "mlm_nsp":  # pairs draw from a pool of earlier documents: built in one pass
            documents_segments = (segments for batch in encoded_after(0) for segments in batch if segments)
            rows = nsp_pairs(documents_segments, tokenizer, block_size=block_size, seed=seed)
            staged = atomic_directory(target, when_full=CACHE_ELSEWHERE)
            with tempfile.TemporaryDirectory(dir=cache_root) as scratch, staged as staging:
                examples = _materialise(rows, scratch)
                if len(examples) == 0:
                    raise ValueError("the corpus gave no training example: it is shorter than one block")
                examples.save_to_disk(str(staging))
        else:
            maker = example_maker(tokenizer, data_format=data_format, layout=layout, block_size=block_size)
            build_in_shards(encoded_after, maker, target)
    return datasets.load_from_disk(str(target))


def _materialise(rows: Iterator[dict], scratch: str) -> datasets.Dataset:
    buffer: list[dict] = []

    def generate() -> Iterator[dict]:
        yield from buffer
        yield from rows

    first = next(rows, None)
    if first is None:
        return datasets.Dataset.from_dict({"input_ids": []})
    buffer.append(first)
    # A fresh fingerprint per call: the rows are identified by our own cache key, not by hashing.
    return datasets.Dataset.from_generator(generate, cache_dir=scratch, fingerprint=cache_key(scratch))


def _batches(documents: Any) -> Iterator[list[str]]:
    for batch in documents.iter(batch_size=READ_BATCH):
        yield batch["text"]


def frame(tokenizer: Any, data_format: str) -> tuple[list[int], list[int], int]:
    """(head, tail, separator) of an example: [CLS] … [SEP] joined by [SEP] (mlm), or … joined by <|endoftext|>."""
    if data_format == "mlm":
        return [tokenizer.cls_token_id], [tokenizer.sep_token_id], tokenizer.sep_token_id
    return [], [], tokenizer.eos_token_id


class PackedBlocks:
    """Documents joined by a separator, the stream cut into framed blocks. ``carry`` is the stream's unfinished
    tail: with it a preparation resumes where it stopped (resumable.build_in_shards)."""

    def __init__(self, tokenizer: Any, *, data_format: str, block_size: int) -> None:
        self.head, self.tail, self.separator = frame(tokenizer, data_format)
        self.body = block_size - len(self.head) - len(self.tail)
        self.carry: list[int] = []

    def feed(self, ids: list[int]) -> list[dict]:
        stream = self.carry
        stream.extend(ids)
        stream.append(self.separator)
        full = len(stream) // self.body
        rows = [{"input_ids": self.head + stream[i * self.body : (i + 1) * self.body] + self.tail} for i in range(full)]
        del stream[: full * self.body]
        return rows

    def finish(self) -> list[dict]:
        if len(self.carry) >= min(8, self.body):  # a short last block is kept (padded) rather than thrown away
            return [{"input_ids": self.head + self.carry + self.tail}]
        return []


class SentenceExamples:
    """One example per segment, truncated to the block: [CLS] s [SEP] (mlm) or s <|endoftext|> (causal)."""

    def __init__(self, tokenizer: Any, *, data_format: str, block_size: int) -> None:
        head, tail, separator = frame(tokenizer, data_format)
        self.head, self.tail = head, tail if data_format == "mlm" else [separator]
        self.body = block_size - len(self.head) - len(self.tail)
        self.carry: list[int] = []  # nothing crosses a document

    def feed(self, segments: list[list[int]]) -> list[dict]:
        return [{"input_ids": self.head + ids[: self.body] + self.tail} for ids in segments]

    def finish(self) -> list[dict]:
        return []


def example_maker(tokenizer: Any, *, data_format: str, layout: str, block_size: int) -> Any:
    kind = SentenceExamples if layout == "sentences" else PackedBlocks
    return kind(tokenizer, data_format=data_format, block_size=block_size)


def nsp_pairs(docs: Iterator[list[list[int]]], tokenizer: Any, *, block_size: int, seed: int) -> Iterator[dict]:
    """BERT-style sentence pairs; random B segments come from up to NSP_POOL earlier documents."""
    rng = random.Random(seed)
    budget = block_size - 3
    pool: deque[list[list[int]]] = deque(maxlen=NSP_POOL)
    for segments in docs:
        for chunk in _chunks(segments, budget):
            first, second, label = _make_pair(chunk, pool, budget, rng)
            yield {
                "input_ids": [tokenizer.cls_token_id, *first, tokenizer.sep_token_id, *second, tokenizer.sep_token_id],
                "token_type_ids": [0] * (len(first) + 2) + [1] * (len(second) + 1),
                "next_sentence_label": label,
            }
        pool.append(segments)


def _chunks(segments: list[list[int]], budget: int) -> list[list[list[int]]]:
    chunks, current, length = [], [], 0
    for segment in segments:
        current.append(segment)
        length += len(segment)
        if length >= budget:
            chunks.append(current)
            current, length = [], 0
    if current:
        chunks.append(current)
    return chunks


def _make_pair(chunk: list[list[int]], pool: deque, budget: int, rng: random.Random) -> tuple:
    # The very first document has no other document to draw from: its pairs are true continuations.
    is_random = rng.random() < 0.5 and len(pool) > 0
    if len(chunk) == 1:  # one long segment: its halves are a true continuation
        tokens = chunk[0]
        middle = max(1, len(tokens) // 2)
        chunk = [tokens[:middle], tokens[middle:]] if len(tokens) > 1 else [tokens, tokens]
    split = rng.randint(1, len(chunk) - 1)
    first = [t for segment in chunk[:split] for t in segment]
    if is_random:
        other = pool[rng.randrange(len(pool))]
        start = rng.randrange(len(other))
        second = [t for segment in other[start:] for t in segment]
    else:
        second = [t for segment in chunk[split:] for t in segment]
    first, second = _truncate_pair(first, second, budget, rng)
    return first, second, int(is_random)


def _truncate_pair(first: list[int], second: list[int], budget: int, rng: random.Random) -> tuple:
    first, second = list(first), list(second)
    # B is cut from its end first when long, which keeps A's end next to B's start.
    if len(second) > budget // 2:
        second = second[: max(budget // 2, budget - len(first))]
    while len(first) + len(second) > budget:
        longer = first if len(first) > len(second) else second
        # Trim A's front or back at random, as BERT does, so no position is always cut.
        longer.pop(0 if (longer is first and rng.random() < 0.5) else -1)
    return first, second
