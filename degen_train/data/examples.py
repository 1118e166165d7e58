"""Turn documents into training examples, cached on disk by a hash of everything that shapes them.

- ``mlm``: documents joined by [SEP] into one stream, cut into blocks of T−2 and framed [CLS] … [SEP].
- ``causal``: documents joined by <|endoftext|>, cut into blocks of T.
- ``mlm_nsp``: [CLS] A [SEP] B [SEP] pairs, B the true continuation or (p = 0.5) text from another
  document, fixed once per corpus from the seed as in BERT's data preparation.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from pathlib import Path
from typing import Any

import datasets

from degen_train.io import atomic_directory

log = logging.getLogger(__name__)

FORMATS = ("mlm", "mlm_nsp", "causal")
SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])\s+|\n+")


def build_examples(
    documents: datasets.Dataset,
    tokenizer: Any,
    *,
    data_format: str,
    block_size: int,
    seed: int,
    cache_root: Path,
    identity: str,
) -> datasets.Dataset:
    """Examples with ``input_ids`` (and ``token_type_ids``, ``next_sentence_label`` for NSP)."""
    if data_format not in FORMATS:
        raise ValueError(f"data format {data_format!r} is not one of {', '.join(FORMATS)}")
    key = hashlib.sha256(repr([identity, data_format, block_size, seed]).encode()).hexdigest()[:16]
    target = cache_root / "examples" / key
    if (target / "dataset_info.json").exists():
        log.info("examples cache hit: %s", target)
        return datasets.load_from_disk(str(target))
    if data_format == "mlm_nsp":
        examples = _nsp_pairs(documents, tokenizer, block_size=block_size, seed=seed)
    else:
        examples = _packed_blocks(documents, tokenizer, data_format=data_format, block_size=block_size)
    if len(examples) == 0:
        raise ValueError("the corpus gave no training example: it is shorter than one block")
    with atomic_directory(target) as staging:
        examples.save_to_disk(str(staging))
    return datasets.load_from_disk(str(target))


def _tokenize(documents: datasets.Dataset, tokenizer: Any) -> datasets.Dataset:
    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        encoded = tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False)
        return {"ids": encoded["input_ids"]}

    return documents.map(encode, batched=True, remove_columns=documents.column_names, desc="tokenizing")


def _packed_blocks(documents: datasets.Dataset, tokenizer: Any, *, data_format: str, block_size: int) -> Any:
    if data_format == "mlm":
        head, tail, separator = [tokenizer.cls_token_id], [tokenizer.sep_token_id], tokenizer.sep_token_id
    else:
        head, tail, separator = [], [], tokenizer.eos_token_id
    body = block_size - len(head) - len(tail)
    min_tail = max(8, body // 4)  # a short last block is kept (padded) rather than thrown away

    def pack(batch: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        stream: list[int] = []
        for ids in batch["ids"]:
            stream.extend(ids)
            stream.append(separator)
        blocks = [stream[start : start + body] for start in range(0, len(stream), body)]
        if blocks and len(blocks[-1]) < min(min_tail, len(stream)):
            blocks.pop()
        return {"input_ids": [head + block + tail for block in blocks]}

    tokenized = _tokenize(documents, tokenizer)
    return tokenized.map(pack, batched=True, batch_size=1000, remove_columns=["ids"], desc="packing")


def split_segments(text: str) -> list[str]:
    """Sentence-like segments: split after . ! ? and at line breaks."""
    return [part.strip() for part in SENTENCE_BOUNDARY.split(text) if part and part.strip()]


def _nsp_pairs(documents: datasets.Dataset, tokenizer: Any, *, block_size: int, seed: int) -> datasets.Dataset:
    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[list[int]]]]:
        out = []
        for text in batch["text"]:
            segments = split_segments(text)
            ids = (
                tokenizer(segments, add_special_tokens=False, return_attention_mask=False)["input_ids"]
                if segments
                else []
            )
            out.append([s for s in ids if s])
        return {"segments": out}

    docs = documents.map(encode, batched=True, remove_columns=documents.column_names, desc="segmenting")
    docs = [d for d in docs["segments"] if d]
    if len(docs) < 2:
        raise ValueError("next-sentence prediction needs at least 2 non-empty documents in the corpus")
    rng = random.Random(seed)
    budget = block_size - 3
    rows: dict[str, list] = {"input_ids": [], "token_type_ids": [], "next_sentence_label": []}
    for index, segments in enumerate(docs):
        for chunk in _chunks(segments, budget):
            first, second, label = _make_pair(chunk, docs, index, budget, rng)
            ids = [tokenizer.cls_token_id, *first, tokenizer.sep_token_id, *second, tokenizer.sep_token_id]
            rows["input_ids"].append(ids)
            rows["token_type_ids"].append([0] * (len(first) + 2) + [1] * (len(second) + 1))
            rows["next_sentence_label"].append(label)
    return datasets.Dataset.from_dict(rows)


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


def _make_pair(chunk: list[list[int]], docs: list, index: int, budget: int, rng: random.Random) -> tuple:
    is_random = rng.random() < 0.5
    if len(chunk) == 1:  # one long segment: its halves are a true continuation
        tokens = chunk[0]
        middle = max(1, len(tokens) // 2)
        chunk = [tokens[:middle], tokens[middle:]] if len(tokens) > 1 else [tokens, tokens]
    split = rng.randint(1, len(chunk) - 1)
    first = [t for segment in chunk[:split] for t in segment]
    if is_random:
        other = rng.randrange(len(docs) - 1)
        other = other + 1 if other >= index else other
        start = rng.randrange(len(docs[other]))
        second = [t for segment in docs[other][start:] for t in segment]
    else:
        second = [t for segment in chunk[split:] for t in segment]
    first, second = _truncate_pair(first, second, budget, rng)
    return first, second, int(is_random)


def _truncate_pair(first: list[int], second: list[int], budget: int, rng: random.Random) -> tuple:
    first, second = list(first), list(second)
    # B is truncated from its end first when it is long (keeps A's end next to B's start).
    if len(second) > budget // 2:
        second = second[: max(budget // 2, budget - len(first))]
    while len(first) + len(second) > budget:
        longer = first if len(first) > len(second) else second
        # Trim the front or back at random, as BERT does, so no position is always cut.
        longer.pop(0 if (longer is first and rng.random() < 0.5) else -1)
    return first, second
