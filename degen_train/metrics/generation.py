"""Repetition in what a decoder writes: greedy continuations of held-out prefixes and their n-gram statistics.

The protocol of Welleck et al. 2020 (§6): a prefix of 50 tokens from held-out text, 100 tokens continued
greedily; seq-rep-4 per continuation, then averaged; distinct-n over all continuations together.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from torch import Tensor, nn


def ngrams(tokens: Sequence[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def seq_rep_n(tokens: Sequence[int], n: int = 4) -> float:
    """seq-rep-n = 1 − |unique n-grams| / |n-grams| of one continuation; Welleck et al. 2020, §5.1."""
    grams = ngrams(tokens, n)
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def distinct_n(continuations: Sequence[Sequence[int]], n: int) -> float:
    """distinct-n = |unique n-grams| / |n-grams| over all continuations together; Li et al. 2016."""
    grams = [g for tokens in continuations for g in ngrams(tokens, n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def repeated_token_share(prefix: Sequence[int], continuation: Sequence[int], window: int = 128) -> float:
    """rep/l: share of continued tokens that already occur among the previous ``window`` tokens (prefix
    included); Welleck et al. 2020, §5.1, on generated rather than gold next tokens."""
    text = [*prefix, *continuation]
    start = len(prefix)
    hits = sum(text[i] in text[max(0, i - window) : i] for i in range(start, len(text)))
    return hits / len(continuation) if continuation else 0.0


@torch.no_grad()
def greedy_continuations(model: nn.Module, prefixes: Tensor, length: int) -> Tensor:
    """(P, length) greedy continuations of (P, L) prefixes (equal lengths, no padding), with the KV cache."""
    model.eval()
    # transformers >= 5.2x names the KV cache ``cache`` (``past_key_values`` is deprecated); older ones (the GPU
    # image's 5.17) know only ``past_key_values``.
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    past, step_input, generated = None, prefixes, []
    for _ in range(length):
        out = model(input_ids=step_input, use_cache=True, **{name: past})
        past = out[name]
        step_input = out.logits[:, -1].argmax(-1, keepdim=True)  # (P, 1)
        generated.append(step_input)
    return torch.cat(generated, dim=1)


def repetition_probe(
    model: nn.Module, documents: Sequence[Sequence[int]], *, prefix: int = 50, length: int = 100, limit: int = 200,
    batch_size: int = 32,
) -> dict[str, float]:  # fmt: skip
    """seq-rep-4, rep/128 and distinct-1/2/4 of greedy continuations of the first ``prefix`` tokens of each
    held-out document that has that many (at most ``limit`` documents)."""
    starts = [list(doc[:prefix]) for doc in documents if len(doc) >= prefix][:limit]
    if not starts:
        raise ValueError(f"no held-out document has {prefix} tokens to use as a prefix")
    device = next(model.parameters()).device
    continuations: list[list[int]] = []
    for first in range(0, len(starts), batch_size):
        batch = torch.tensor(starts[first : first + batch_size], device=device)
        continuations += greedy_continuations(model, batch, length).tolist()
    return {
        "prefixes": len(starts),
        "seq_rep_4": sum(seq_rep_n(c, 4) for c in continuations) / len(continuations),
        "rep_128": sum(repeated_token_share(p, c) for p, c in zip(starts, continuations, strict=True)) / len(starts),
        **{f"distinct_{n}": distinct_n(continuations, n) for n in (1, 2, 4)},
    }


def released_word_ngrams(text: str, n: int) -> list[tuple[str, ...]]:
    """The whitespace words' n-grams as SimCTG's released evaluation counts them: its windows stop one short of the
    text's end (its loop runs while the window's end is before the last word), so the last n-gram is never counted.
    Kept as released, so that rep-n and diversity compare with the paper's tables."""
    words = text.strip().split()
    return [tuple(words[i : i + n]) for i in range(max(0, len(words) - n))]


def rep_n(texts: Sequence[str], n: int) -> float:
    """rep-n = 100 × (1 − Σ unique n-grams of each text / Σ n-grams of each text), over whitespace words; Su et al.
    2022 (SimCTG) §5.1.1, as its released evaluation.py counts them."""
    unique = total = 0
    for text in texts:
        grams = released_word_ngrams(text, n)
        unique, total = unique + len(set(grams)), total + len(grams)
    return 100.0 * (1.0 - unique / total) if total else 0.0


def diversity(texts: Sequence[str]) -> float:
    """diversity = Π_{n=2}^{4} (1 − rep-n / 100); Su et al. 2022 (SimCTG) §5.1.1."""
    value = 1.0
    for n in (2, 3, 4):
        value *= 1.0 - rep_n(texts, n) / 100.0
    return value
