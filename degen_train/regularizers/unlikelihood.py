"""Token-level unlikelihood training against repetition in decoders (Welleck et al., ICLR 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from degen_train.terms import LossTerm, distributed_mean, register_term
from degen_train.types import ForwardOutput, TermOutput


def context_candidates(ids: Tensor, context: Tensor, labels: Tensor) -> Tensor:
    """(B, T, T) bool: whether the token at position s is a negative candidate for the prediction at t.

    C^t = {tokens of the context x_≤t} \\ {the target at t}, each distinct token once (its first position):
    Welleck et al. 2020, eq. 4 ("previous context" candidates). ids, labels: (B, T); context: (B, T) bool.
    """
    length = ids.shape[1]
    same = ids[:, :, None] == ids[:, None, :]  # (B, T, T) [b, s', s]
    earlier = torch.ones(length, length, dtype=torch.bool, device=ids.device).triu(1)  # s' < s
    first = context & ~(same & earlier & context[:, :, None]).any(dim=1)  # (B, T) first valid occurrence
    up_to = torch.ones(length, length, dtype=torch.bool, device=ids.device).tril()  # [t, s]: s ≤ t
    candidates = up_to[None] & first[:, None, :] & (ids[:, None, :] != labels[:, :, None])  # (B, T, T)
    return candidates & (labels != -100)[:, :, None]


def unlikelihood_sum(logits: Tensor, ids: Tensor, context: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """(Σ_t Σ_{c∈C^t} −log(1 − p(c | x_≤t)), number of predictions), with 1 − p clamped at 1e-5 as in the
    released code. logits: (N, V) at the N labelled positions of ``labels`` (B, T), in row-major order."""
    selected = labels != -100  # (B, T)
    rows = selected.nonzero()[:, 0]  # (N,) the sequence of each labelled position
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (N, V)
    context_log_probs = log_probs.gather(1, ids[rows])  # (N, T) log p(token at s | x_≤t)
    candidates = context_candidates(ids, context, labels)[selected]  # (N, T)
    one_minus = (1 - context_log_probs.exp()).clamp_min(1e-5)
    penalty = -torch.log(one_minus) * candidates
    return penalty.sum(), torch.tensor(float(rows.numel()), device=logits.device)


@register_term("unlikelihood")
class TokenUnlikelihoodTerm(LossTerm):
    """L_UL = −(1/N) Σ_t Σ_{c ∈ C^t} log(1 − p(c | x_<t)), C^t the earlier context tokens; Welleck et al. 2020.

    Added to MLE with weight α (the paper's token-level α = 1). Reads the logits at every predicted position
    (the MLE term alone never builds them); the mean is over every prediction of the global batch.
    """

    family = "decoder"
    requires = frozenset({"logits"})

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert output.logits is not None
        total, count = unlikelihood_sum(output.logits, output.input_ids, output.attention_mask.bool(), output.labels)
        return TermOutput(distributed_mean(total, count), {})
