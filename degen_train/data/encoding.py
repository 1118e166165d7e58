"""Documents to token ids, on ``data.num_proc`` threads when there is more than one batch to encode.

The Rust tokenizer is most of the preparation's time (issue 26: about 1 MB/s on one core), and its
``encode_batch`` runs without Python's GIL, so threads of this process tokenize in parallel: no worker
process is started, nothing is pickled, and nothing is forked from a process that already runs threads
(torch's, a process group's, a test runner's): a child forked while another thread held a lock can wait
on it forever, which hung the suite when this module still forked workers. Batches come back in the order
they were read, so the examples are the same, byte for byte, whatever ``data.num_proc`` is; at most two
batches per thread are in flight, so memory stays flat in the corpus size (a streamed corpus is never held
whole). Each thread encodes with its own copy of the tokenizer, so no two threads share one.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tokenizers import Tokenizer

log = logging.getLogger(__name__)

SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])\s+|\n+")
IN_FLIGHT_PER_THREAD = 2


def split_segments(text: str) -> list[str]:
    """Sentence-like segments: split after . ! ? and at line breaks."""
    return [part.strip() for part in SENTENCE_BOUNDARY.split(text) if part and part.strip()]


def encode_texts(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids without special tokens, through the Rust tokenizer when there is one (whole documents:
    no length limit applies before packing, so the wrapper's max-length warning would be noise)."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if isinstance(backend, Tokenizer):
        return [encoding.ids for encoding in backend.encode_batch(texts, add_special_tokens=False)]
    return tokenizer(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]


def documents_ids(texts: list[str], tokenizer: Any) -> list[list[int]]:
    """One id list per document."""
    return encode_texts(tokenizer, texts)


def documents_segment_ids(texts: list[str], tokenizer: Any) -> list[list[list[int]]]:
    """Per document, its non-empty segments' id lists (an empty list for a document without any). The batch's
    segments are encoded in one call (one GIL-free stretch), then handed back to their documents."""
    segments = [split_segments(text) for text in texts]
    flat = [segment for document in segments for segment in document]
    ids = iter(encode_texts(tokenizer, flat) if flat else [])
    documents = []
    for document in segments:
        encoded = [next(ids) for _ in document]
        documents.append([s for s in encoded if s])
    return documents


def encoded_batches(
    batches: Iterable[list[str]],
    tokenizer: Any,
    encode: Callable[[list[str], Any], list],
    *,
    threads: int,
) -> Iterator[list]:
    """``encode(batch, tokenizer)`` for every batch, in order; on ``threads`` threads once a second batch
    exists (a corpus of one batch has nothing to share out)."""
    iterator = iter(batches)
    first = next(iterator, None)
    if first is None:
        return
    second = next(iterator, None)
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if threads <= 1 or second is None or not isinstance(backend, Tokenizer):
        if threads > 1 and second is not None:  # a slow (Python) tokenizer holds the GIL: threads would not help
            log.info("the tokenizer has no Rust backend: encoding on one thread (data.num_proc=%d unused)", threads)
        for batch in _chain(first, second, iterator):
            yield encode(batch, tokenizer)
        return
    log.info("tokenizing on %d threads (data.num_proc)", threads)
    encode_on_thread = _per_thread(backend.to_str(), encode)
    with ThreadPoolExecutor(threads, thread_name_prefix="degen-tokenize") as pool:
        pending: deque = deque()
        for batch in _chain(first, second, iterator):
            pending.append(pool.submit(encode_on_thread, batch))
            if len(pending) >= IN_FLIGHT_PER_THREAD * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _per_thread(tokenizer_json: str, encode: Callable[[list[str], Any], list]) -> Callable[[list[str]], list]:
    """``encode`` with a tokenizer of the calling thread's own, rebuilt from JSON on the thread's first batch."""
    local = threading.local()

    def encode_on_thread(batch: list[str]) -> list:
        if not hasattr(local, "tokenizer"):
            local.tokenizer = Tokenizer.from_str(tokenizer_json)
        return encode(batch, local.tokenizer)

    return encode_on_thread


def _chain(first: list[str], second: list[str] | None, rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield first
    if second is not None:
        yield second
        yield from rest
