"""Perplexity of an exported model on a text file: exact for decoders, pseudo-perplexity for encoders.

Decoders: the file's documents joined by EOS into one token stream, scored in windows of ``window`` tokens that
advance by ``stride``; each window predicts only the tokens the previous one did not (the rest is context), so
with stride = window the blocks are disjoint and with a smaller stride every token has more context.
Encoders have no left-to-right likelihood: pseudo-perplexity masks each token in turn and scores it from both
sides (Salazar et al. 2020), one forward pass per token, batched.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

from degen_train.core.handed_files import no_remote_code, not_a_plain_file
from degen_train.core.io import utf8_text
from degen_train.data.tokenizer import load_tokenizer
from degen_train.models.architectures import architecture_of
from degen_train.models.loading import load_pretrained


@dataclass(frozen=True)
class Perplexity:
    kind: str  # "perplexity" (decoders) | "pseudo_perplexity" (encoders)
    value: float
    nll_per_token: float
    tokens: int  # tokens scored
    documents: int
    window: int
    stride: int | None
    words: int | None = None  # decoders: the scored documents' words, as WikiText's word-level benchmarks count them
    per_word_perplexity: float | None = None  # exp(total NLL / words): comparable across tokenizers


def read_documents(path: str | Path, unit: str = "line", what: str = "perplexity file") -> list[str]:
    """The non-blank documents of a UTF-8 text file: each line, or each blank-line-separated paragraph."""
    path = Path(path)
    kind = not_a_plain_file(path)
    if kind:
        raise ValueError(f"{what} {path} is {kind}, not a plain file: give a UTF-8 text file")
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    text = utf8_text(path, what=what)
    if unit not in ("line", "paragraph"):
        raise ValueError(f"document unit {unit!r} is not one of line, paragraph")
    parts = text.split("\n\n") if unit == "paragraph" else text.splitlines()
    documents = [" ".join(part.split()) for part in parts if part.strip()]
    if not documents:
        raise ValueError(f"{what} {path} has no text")
    return documents


def causal_perplexity(
    model: Any, token_ids: list[int], *, window: int, stride: int, batch_size: int = 8
) -> tuple[float, int]:
    """(total NLL, tokens scored) of ``token_ids`` under a causal LM: exp(total / tokens) is the perplexity.

    Window k covers [start, start + window) with start = k·stride; it scores the tokens after the previous window's
    end (the first token of the stream has no context and is not scored)."""
    if not 0 < stride <= window:
        raise ValueError(f"stride={stride} must be in 1..window={window}")
    spans = []  # (start, end, first scored position)
    scored_until = 1
    for start in range(0, max(len(token_ids) - 1, 1), stride):
        end = min(start + window, len(token_ids))
        if end <= scored_until:
            continue
        spans.append((start, end, max(scored_until, start + 1)))
        scored_until = end
        if end == len(token_ids):
            break
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for first in range(0, len(spans), batch_size):
        chunk = spans[first : first + batch_size]
        width = max(end - start for start, end, _ in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        targets = torch.full((len(chunk), width), -100, dtype=torch.long)  # -100: not scored
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, (start, end, scored) in enumerate(chunk):
            piece = torch.tensor(token_ids[start:end])
            ids[row, : end - start] = piece
            mask[row, : end - start] = 1
            targets[row, scored - start : end - start] = piece[scored - start :]
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        # position t predicts token t + 1
        nll = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1).to(device), reduction="sum"
        )
        total += float(nll)
        count += int((targets[:, 1:] != -100).sum())
    return total, count


def pseudo_log_likelihood(
    model: Any, ids: list[int], mask_id: int, special: set[int], batch_size: int = 64
) -> tuple[float, int]:
    """(−Σ_t log p(w_t | w_{\\t}), tokens scored) of one sequence under a masked LM, each non-special token masked in
    turn (Salazar et al. 2020)."""
    positions = [i for i, token in enumerate(ids) if token not in special]
    device = next(model.parameters()).device
    sequence = torch.tensor(ids)
    total = 0.0
    for first in range(0, len(positions), batch_size):
        chunk = positions[first : first + batch_size]
        copies = sequence.repeat(len(chunk), 1)
        rows = torch.arange(len(chunk))
        copies[rows, torch.tensor(chunk)] = mask_id
        with torch.no_grad():
            logits = model(input_ids=copies.to(device)).logits.float()
        log_probs = logits[rows, torch.tensor(chunk)].log_softmax(dim=-1)
        total -= float(log_probs[rows, sequence[torch.tensor(chunk)]].sum())
    return total, len(positions)


def perplexity(
    model_dir: str | Path,
    path: str | Path,
    *,
    unit: str = "line",
    window: int | None = None,
    stride: int | None = None,
    limit: int | None = None,
    batch_size: int = 8,
) -> Perplexity:
    """Perplexity (decoders) or pseudo-perplexity (encoders) of the export in ``model_dir`` on the text file ``path``:
    exp(total NLL / tokens scored)."""
    documents = read_documents(path, unit)[:limit] if limit else read_documents(path, unit)
    tokenizer = load_tokenizer(model_dir)
    from transformers import AutoConfig

    arch = architecture_of(AutoConfig.from_pretrained(str(model_dir), **no_remote_code(model_dir)).model_type)
    decoder = arch is not None and arch.family == "decoder"
    loader = AutoModelForCausalLM if decoder else AutoModelForMaskedLM
    model = load_pretrained(loader, str(model_dir), "perplexity model").eval()
    longest = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    window = min(window or longest, longest)
    if decoder:
        eos = tokenizer.eos_token_id
        stream: list[int] = []
        for document in documents:
            ids = tokenizer(document, add_special_tokens=False, verbose=False)["input_ids"]  # windowed below
            stream += ids + ([eos] if eos is not None else [])
        if len(stream) < 2:
            raise ValueError(f"{path} has fewer than 2 tokens: nothing to predict")
        stride = stride or window
        total, count = causal_perplexity(model, stream, window=window, stride=stride, batch_size=batch_size)
        kind = "perplexity"
        words = word_count(documents)
    else:
        if tokenizer.mask_token_id is None:
            raise ValueError(f"{model_dir}'s tokenizer has no mask token: pseudo-perplexity needs one")
        special = set(tokenizer.all_special_ids)
        total, count = 0.0, 0
        for document in documents:
            ids = tokenizer(document, truncation=True, max_length=window)["input_ids"]
            nll, scored = pseudo_log_likelihood(model, ids, tokenizer.mask_token_id, special, batch_size * 8)
            total, count = total + nll, count + scored
        kind, stride, words = "pseudo_perplexity", None, None
    if count == 0:
        raise ValueError(f"{path}: no token to score")
    per_word = math.exp(total / words) if words else None
    return Perplexity(kind, math.exp(total / count), total / count, count, len(documents), window, stride, words,
                      per_word)  # fmt: skip


def word_count(documents: list[str]) -> int:
    """Words of the documents as WikiText's word-level language-modelling benchmarks count them (Merity et al. 2017;
    AWD-LSTM's data.py): each line's space-separated tokens and one end of line, here over the scored (non-blank)
    lines. Per-word perplexity exp(total NLL / words) puts a subword model beside Gao et al.'s word-level numbers
    (their 33k-word vocabulary), since the total NLL of a text does not depend on how it is cut into tokens."""
    return sum(len(document.split()) + 1 for document in documents)


def as_dict(result: Perplexity) -> dict[str, Any]:
    return asdict(result)
