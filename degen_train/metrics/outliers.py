"""Outlier activations, massive activations and attention sinks of one layer's hidden states and attention maps.

The per-sequence statistics follow the released code of each paper on identical tensors (tests/unit/test_outliers.py
transcribes them): Bondarenko et al. average the per-sequence kurtosis and ∞-norm over sequences; Gu et al. count
the heads whose first token draws more than ε of the attention of the queries that see it.
"""

from __future__ import annotations

import torch
from torch import Tensor

MASSIVE_ABSOLUTE = 100.0  # Sun et al. 2024: |x| > 100 ...
MASSIVE_RELATIVE = 1000.0  # ... and ≥ 1000 × the median |x| of its hidden state
SINK_EPSILON = 0.3  # Gu et al. 2024's ε


def sequence_kurtosis(hidden: Tensor, eps: float = 1e-6) -> Tensor:
    """κ_b = mean((x − μ_b)⁴) / (σ_b⁴ + ε) over all T·d values of sequence b (σ unbiased); Bondarenko et al. 2023,
    transformers_language/utils.py (x viewed as (B, T·d)). hidden: (B, T, d) -> (B,)."""
    x = hidden.reshape(hidden.size(0), -1).double()
    mu = x.mean(dim=1, keepdim=True)
    return ((x - mu) ** 4).mean(dim=1) / (x.std(dim=1) ** 4 + eps)


def sequence_inf_norm(hidden: Tensor) -> Tensor:
    """‖x_b‖_∞ = max |x| over sequence b's T·d values; Bondarenko et al. 2023 (validate_mlm.py). (B, T, d) -> (B,)."""
    return hidden.reshape(hidden.size(0), -1).abs().amax(dim=1).double()


def massive_activations(hidden: Tensor, mask: Tensor | None = None) -> dict:
    """Count of |x| > 100 and > 1000 × median |x| of the sequence's hidden state; Sun et al. 2024 ("Massive
    Activations in Large Language Models", §2). hidden: (B, T, d); mask: (B, T), 1 for real tokens."""
    count, dims, positions = 0, set(), set()
    for b in range(hidden.size(0)):
        states = hidden[b] if mask is None else hidden[b][mask[b].bool()]
        magnitude = states.abs().double()
        median = magnitude.median()
        found = (magnitude > MASSIVE_ABSOLUTE) & (magnitude > MASSIVE_RELATIVE * median)
        count += int(found.sum())
        where = torch.nonzero(found)
        positions.update(where[:, 0].tolist())
        dims.update(where[:, 1].tolist())
    return {"count": count, "dims": sorted(dims), "token_positions": sorted(positions)}


def first_token_importance(attention: Tensor) -> Tensor:
    """Mean attention each head gives the first token over the queries that can see it: Σ_q α(q, 0) / T (all T
    queries see the first key, causal or not); Gu et al. 2024 (eval_sink_open_source.py: scores / (T − k) at k = 0).
    attention: (B, H, T, T) -> (B, H)."""
    return attention[..., :, 0].double().sum(dim=-1) / attention.size(-1)


def attention_sink_rate(attentions: list[Tensor], epsilon: float = SINK_EPSILON) -> float:
    """100 × share of (sequence, layer, head) whose first-token importance exceeds ε = 0.3; Gu et al. 2024
    ("When Attention Sink Emerges in Language Models", metric 1 at the first token). attentions: per layer
    (B, H, T, T)."""
    scores = torch.stack([first_token_importance(a) for a in attentions], dim=1)  # (B, L, H)
    return float((scores > epsilon).double().mean() * 100)


def attention_entropy(attention: Tensor) -> Tensor:
    """Mean over queries of H(α_q) = −Σ_k α(q,k) log α(q,k), per head (nats; low: a head that attends to one key);
    the quantity Zhai et al. 2023 track for entropy collapse. attention: (B, H, T, T) -> (H,)."""
    p = attention.double()
    return -(p * p.clamp_min(1e-30).log()).sum(dim=-1).mean(dim=(0, 2))


def layer_outliers(states: list[Tensor]) -> dict:
    """One layer's kurtosis and ∞-norm averaged over sequences (Bondarenko et al.) and its massive activations and
    their dimensions (Sun et al.); ``states``: each sequence's unpadded hidden states, (1, T, d)."""
    counts = [massive_activations(x) for x in states]
    return {
        "kurtosis": float(torch.cat([sequence_kurtosis(x) for x in states]).mean()),
        "inf_norm": float(torch.cat([sequence_inf_norm(x) for x in states]).mean()),
        "massive_activations": sum(c["count"] for c in counts),
        "massive_dims": sorted({d for c in counts for d in c["dims"]}),
    }
