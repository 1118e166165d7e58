"""Token-level unlikelihood training against repetition in decoders (Welleck et al., ICLR 2020)."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from degen_train.losses.contract import LossTerm, TermContext, TermOutput, distributed_mean, register_term
from degen_train.models.output import ForwardOutput
from degen_train.models.positions import at_positions, labelled_positions


def context_candidates(ids: Tensor, context: Tensor, labels: Tensor, *, include_current: bool = True) -> Tensor:
    """(B, T, T) bool: whether the token at position s is a negative candidate for the prediction at t.

    C^t = {ids at positions s ≤ t (s < t with include_current=False) where ``context``} \\ {the target at t}, each
    distinct token once (its first position); rows without a target are empty. ids, labels: (B, T); context:
    (B, T) bool. Paper (Welleck et al. 2020, eq. 4): ids = the input tokens, s ≤ t. Released criterion: ids = the
    targets, s < t (the earlier targets: the block's first input token is never one).
    """
    length = ids.shape[1]
    same = ids[:, :, None] == ids[:, None, :]  # (B, T, T) [b, s', s]
    earlier = torch.ones(length, length, dtype=torch.bool, device=ids.device).triu(1)  # s' < s
    first = context & ~(same & earlier & context[:, :, None]).any(dim=1)  # (B, T) first valid occurrence
    up_to = torch.ones(length, length, dtype=torch.bool, device=ids.device).tril(0 if include_current else -1)
    candidates = up_to[None] & first[:, None, :] & (ids[:, None, :] != labels[:, :, None])  # (B, T, T) [t, s]
    return candidates & (labels != -100)[:, :, None]


def unlikelihood_sum(
    logits: Tensor,
    ids: Tensor,
    context: Tensor,
    labels: Tensor,
    *,
    candidates: str = "paper",
    always: int | None = None,
    index: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """(Σ_t Σ_{c∈C^t} −log(1 − p(c | x_≤t)), number of predictions), with 1 − p clamped at 1e-5 as in the
    released code. logits: (N, V) at the N labelled positions of ``labels`` (B, T), in row-major order.

    ``candidates``: ``paper`` (C^t from the input tokens x_≤t) or ``released`` (from the earlier targets, as
    unlikelihood_training's candidate_penalty_ce_loss.py, within each sequence); ``always``: a token id in every
    C^t unless it is the target (released: the padding index). ``index``: the (N,) flat labelled positions, when
    known (ForwardOutput.labelled_index), else found from ``labels``.
    """
    selected = labels != -100  # (B, T)
    index = labelled_positions({"labels": labels, "labelled_index": index})  # (N,)
    rows = index // labels.shape[1]  # (N,) the sequence of each labelled position
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (N, V)
    if candidates == "released":
        tokens = labels.clamp_min(0)  # (B, T) the targets
        chosen = at_positions(context_candidates(tokens, selected, labels, include_current=False), index)  # (N, T)
    else:
        tokens = ids
        chosen = at_positions(context_candidates(ids, context, labels), index)  # (N, T)
    one_minus = (1 - log_probs.gather(1, tokens[rows]).exp()).clamp_min(1e-5)  # (N, T) 1 − p(token at s | x_≤t)
    total = (-torch.log(one_minus) * chosen).sum()
    if always is not None:  # once per prediction: not where it is the target or already a candidate
        targets = at_positions(labels, index)  # (N,)
        present = (chosen & (tokens[rows] == always)).any(1) | (targets == always)  # (N,)
        extra = -torch.log((1 - log_probs[:, always].exp()).clamp_min(1e-5))  # (N,)
        total = total + (extra * ~present).sum()
    return total, logits.new_tensor(float(rows.numel()), dtype=torch.float32)


@register_term("unlikelihood")
class TokenUnlikelihoodTerm(LossTerm):
    """L_UL = −(1/N) Σ_t Σ_{c ∈ C^t} log(1 − p(c | x_<t)), C^t the earlier context tokens; Welleck et al. 2020.

    Added to MLE with weight α (the paper's token-level α = 1). Reads the logits at every predicted position
    (the MLE term alone never builds them); the mean is over every prediction of the global batch.
    ``candidates``: ``released`` (default: the earlier targets of the sequence plus the padding id, as
    candidate_penalty_ce_loss.py) or ``paper`` (the earlier input tokens, eq. 4). The released code flattens the
    batch, so its candidates cross sequence boundaries; ours stay within a sequence.

    Source: Welleck et al. 2020, "Neural Text Generation with Unlikelihood Training" (ICLR 2020); released:
    facebookresearch/unlikelihood_training, custom/candidate_penalty_ce_loss.py.
    Needs: a decoder and causal blocks, beside mle (it adds to it); it reads the (N, V) logits.
    Example: ``degen-train recipe=unlikelihood model=gpt2_tiny``
    """

    family = "decoder"
    requires = frozenset({"logits"})
    averages_over = ("targets",)

    def __init__(self, *, candidates: Literal["released", "paper"] = "released") -> None:
        super().__init__()
        self.candidates = candidates
        self.pad_id: int | None = None

    def setup(self, context: TermContext) -> None:
        if context.backbone is not None:
            self.pad_id = context.backbone.model.config.pad_token_id

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert output.logits is not None
        total, count = unlikelihood_sum(
            output.logits,
            output.input_ids,
            output.attention_mask.bool(),
            output.labels,
            candidates=self.candidates,
            always=self.pad_id if self.candidates == "released" else None,
            index=output.labelled_index,
        )
        return TermOutput(distributed_mean(total, count, over="targets"), {})
