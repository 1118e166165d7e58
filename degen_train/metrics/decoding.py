"""Decoding a decoder's continuations as the degeneration papers do: greedy, beam, top-k, nucleus, contrastive search.

The end of text as SimCTG's release treats it, by default (``end_of_text="cut"``: simctg/simctggpt.py's decoding
functions with ``early_stop=True``, which inference.py of "Contrastive Search Is What You Need" passes for every
decoding): the decoding length is generated with no minimum, then each continuation is cut at its first end-of-text
token (``cut_at_end_of_text``), so a model that ends its text early scores the short text it wrote. The named switch
``end_of_text="banned"`` keeps every continuation at exactly ``length`` tokens (transformers' ``min_new_tokens``,
which also renormalises the sampling distribution without end-of-text; contrastive search never takes it).

Greedy, beam, top-k and nucleus run through transformers' ``generate``. Contrastive search (Su et al. 2022, SimCTG
§5) is written here: transformers 5 moved it to code on the Hub that runs only with trust_remote_code, which a run
never passes. Each step keeps the k most probable tokens, runs each once more to get its last-layer hidden state,
and picks
    argmax_v (1 − α) · p(v | x_<t) − α · max_j cos(h_v, h_j)    over the context's hidden states h_j,
as the released ``ContrastiveDecodingOneStepFast`` does (its KV cache repeated k times for the candidates, then the
chosen candidate's rows kept); tests/unit/test_decoding.py holds it to a transcription of the released step.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from degen_train.metrics.decoding_settings import DECODINGS, END_OF_TEXT, DecodingSettings  # noqa: F401 (their home)


def cache_name(model: nn.Module) -> str:
    """transformers >= 5.2x names the KV cache ``cache``; older ones (the GPU image's) ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def end_of_text_id(model: nn.Module) -> int | None:
    """The token that ends a text for ``model`` (GPT-2's ``<|endoftext|>``), or None."""
    eos = model.config.eos_token_id
    return eos[0] if isinstance(eos, list) and eos else eos


def cut_at_end_of_text(rows: list[list[int]], eos: int | None) -> list[list[int]]:
    """Each continuation up to (not including) its first end-of-text token, as the release's ``early_stop`` loop
    keeps the prefix and then each token until the end of sequence (simctg/simctggpt.py); every row whole when the
    model has no end-of-text token."""
    if eos is None:
        return [list(row) for row in rows]
    return [list(row[: row.index(eos)]) if eos in row else list(row) for row in rows]


@torch.no_grad()
def decode(model: nn.Module, prefixes: Tensor, length: int, decoding: str, settings: DecodingSettings) -> Tensor:
    """(P, ≤ length) continuations of (P, L) prefixes (equal lengths, no padding) by ``decoding``: with
    ``end_of_text="cut"`` transformers may stop once every row has ended its text, the rows that ended first
    padded with end-of-text (``cut_at_end_of_text`` keeps what came before it); with ``banned``, exactly
    ``length`` tokens each."""
    if decoding not in DECODINGS:
        raise ValueError(f"decoding {decoding!r} is not one of {', '.join(DECODINGS)}")
    model.eval()
    if decoding == "contrastive":
        banned = end_of_text_id(model) if settings.end_of_text == "banned" else None
        return contrastive_search(model, prefixes, length, k=settings.contrastive_k, alpha=settings.contrastive_alpha,
                                  banned=banned)  # fmt: skip
    options: dict = {"do_sample": False, "num_beams": 1}
    if decoding == "beam":
        options = {"do_sample": False, "num_beams": settings.beam_width, "early_stopping": False}
    elif decoding == "top_k":
        options = {"do_sample": True, "top_k": settings.top_k, "top_p": 1.0, "temperature": 1.0}
    elif decoding == "nucleus":
        options = {"do_sample": True, "top_k": 0, "top_p": settings.top_p, "temperature": 1.0}
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(settings.seed)
    try:
        minimum = {"min_new_tokens": length} if settings.end_of_text == "banned" else {}
        eos = end_of_text_id(model)  # the model's own, whatever its generation_config says
        out = model.generate(
            input_ids=prefixes, attention_mask=torch.ones_like(prefixes), max_new_tokens=length,
            eos_token_id=eos, pad_token_id=eos if eos is not None else 0, **minimum, **options,
        )  # fmt: skip
    finally:
        torch.random.set_rng_state(generator_state)
    return out[:, prefixes.shape[1] :]


@torch.no_grad()
def contrastive_search(model: nn.Module, prefixes: Tensor, length: int, *, k: int, alpha: float,
                       banned: int | None = None) -> Tensor:  # fmt: skip
    """(P, length) tokens by contrastive search: score = (1 − α)·p(v) − α·max_j cos(h_v, h_j); Su et al. 2022.
    ``banned``: a token never taken (end-of-text under ``end_of_text="banned"``); the release bans none."""
    name = cache_name(model)
    out = model(input_ids=prefixes, attention_mask=torch.ones_like(prefixes), use_cache=True, output_hidden_states=True)
    cache, context = out[name], out.hidden_states[-1]  # context: (P, S, E), the prefix's last-layer states
    logits = out.logits[:, -1, :]  # (P, V)
    count = prefixes.shape[0]
    rows = torch.arange(count, device=prefixes.device)
    chosen = []
    for step in range(length):
        if banned is not None:
            logits = logits.clone()
            logits[:, banned] = float("-inf")
        probabilities = logits.float().softmax(dim=-1)
        candidates = logits.topk(k, dim=-1).indices  # (P, k)
        candidate_p = probabilities.gather(1, candidates)  # (P, k)
        cache.batch_repeat_interleave(k)  # each prefix's cache once per candidate: rows p·k … p·k + k − 1
        seen = torch.ones(count * k, prefixes.shape[1] + step + 1, dtype=prefixes.dtype, device=prefixes.device)
        out = model(input_ids=candidates.reshape(-1, 1), attention_mask=seen, use_cache=True,
                    output_hidden_states=True, **{name: cache})  # fmt: skip
        cache = out[name]
        hidden = out.hidden_states[-1][:, -1, :]  # (P·k, E): each candidate's state
        unit_context = context / context.norm(dim=-1, keepdim=True)  # (P, S, E)
        unit_hidden = (hidden / hidden.norm(dim=-1, keepdim=True)).view(count, k, -1)  # (P, k, E)
        penalty = torch.einsum("pke,pse->pks", unit_hidden, unit_context).max(dim=-1).values  # (P, k)
        score = (1.0 - alpha) * candidate_p - alpha * penalty.float()
        pick = score.max(dim=-1).indices  # (P,)
        kept = rows * k + pick  # the chosen candidate's row of the repeated cache
        cache.batch_select_indices(kept)
        context = torch.cat([context, hidden[kept].unsqueeze(1)], dim=1)
        logits = out.logits[:, -1, :][kept]
        chosen.append(candidates.gather(1, pick.unsqueeze(1)))
    return torch.cat(chosen, dim=1)


def continuation_nll(model: nn.Module, prefixes: Tensor, continuations: list[list[int]]) -> tuple[float, int]:
    """(total NLL, tokens) of ``continuations`` (each its own length, the kept tokens) given their prefixes under
    ``model``: the generated text's perplexity under the model itself is exp(total / tokens) (SimCTG's and
    contrastive decoding's gen-ppl)."""
    nll, counts = continuation_nll_rows(model, prefixes, continuations)
    return float(sum(nll)), int(sum(counts))


@torch.no_grad()
def continuation_nll_rows(model: nn.Module, prefixes: Tensor,
                          continuations: list[list[int]]) -> tuple[list[float], list[int]]:  # fmt: skip
    """Each continuation's (NLL, tokens) given its prefix: ``continuation_nll`` per prompt."""
    model.eval()
    longest = max((len(c) for c in continuations), default=0)
    if longest == 0:
        return [0.0] * len(continuations), [0] * len(continuations)
    pad = end_of_text_id(model) or 0
    rows = torch.tensor([c + [pad] * (longest - len(c)) for c in continuations], device=prefixes.device)
    kept = torch.tensor([[i < len(c) for i in range(longest)] for c in continuations], device=prefixes.device)
    ids = torch.cat([prefixes, rows], dim=1)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
    logits = logits[:, prefixes.shape[1] - 1 : -1, :]  # the positions predicting each continuation token
    nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), rows.reshape(-1), reduction="none")
    nll = (nll.view(rows.shape) * kept).sum(dim=1)
    return nll.tolist(), kept.sum(dim=1).tolist()
