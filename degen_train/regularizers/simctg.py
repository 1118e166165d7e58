"""SimCTG: a token-level contrastive loss on a decoder's last-layer states (Su et al., NeurIPS 2022)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from degen_train.terms import LossTerm, TermContext, distributed_mean, register_term
from degen_train.types import ForwardOutput, TermOutput

MASK_FROM = ("attention", "pad_token")


def simctg_loss_sum(hidden: Tensor, valid: Tensor, *, margin: float) -> tuple[Tensor, Tensor]:
    """(Σ_b Σ_{i≠j valid} max(0, ρ − s_ii + s_ij), number of such pairs), s = cosines of one sequence's
    states: the numerator and denominator of L_CL (Su et al. 2022, eq. 2). hidden: (B, T, H); valid: (B, T)."""
    unit = F.normalize(hidden.float(), dim=-1)  # (B, T, H)
    scores = unit @ unit.transpose(1, 2)  # (B, T, T) s_ij
    gold = scores.diagonal(dim1=1, dim2=2).unsqueeze(-1)  # (B, T, 1) s_ii (1 up to rounding)
    pairs = valid[:, :, None] & valid[:, None, :]  # (B, T, T)
    pairs &= ~torch.eye(scores.shape[1], dtype=torch.bool, device=scores.device)
    penalties = F.relu(margin - gold + scores) * pairs
    return penalties.sum(), pairs.sum().to(penalties.dtype)


@register_term("simctg")
class TokenContrastiveDecoderTerm(LossTerm):
    """L_CL = 1/(n(n−1)) Σ_i Σ_{j≠i} max(0, ρ − cos(h_i,h_i) + cos(h_i,h_j)); Su et al. 2022 (SimCTG), eq. 2.

    The mean is over every pair of the global batch (the released lossfunction.py divides the batch's
    sum by its number of pairs). ``mask_from``: which positions take part: ``attention`` (the paper: pads
    left out) or ``pad_token`` (the released code: every position holding the pad id is left out, which
    for GPT-2, whose pad is <|endoftext|>, also drops the document separators).
    """

    family = "decoder"
    averages_over = ("simctg_pairs",)

    def __init__(self, *, margin: float = 0.5, mask_from: str = "attention") -> None:
        super().__init__()
        if mask_from not in MASK_FROM:
            raise ValueError(f"regularizer.simctg.mask_from={mask_from!r} is not one of {', '.join(MASK_FROM)}")
        if not 0 <= margin <= 2:
            raise ValueError(f"regularizer.simctg.margin={margin}: a cosine margin lies in [0, 2]")
        self.margin, self.mask_from = margin, mask_from
        self.pad_id: int | None = None

    def setup(self, context: TermContext) -> None:
        if context.backbone is not None:
            self.pad_id = context.backbone.model.config.pad_token_id

    def valid_positions(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """(B, T) the positions that take part: real tokens, or (pad_token) every position not holding the pad id."""
        if self.mask_from == "pad_token" and self.pad_id is not None:
            return input_ids != self.pad_id
        return attention_mask.bool()

    def count(self, over: str, batch: dict[str, Tensor]) -> Tensor:
        """simctg_pairs: Σ_b n_b(n_b − 1), n_b the positions of sequence b that take part."""
        if over != "simctg_pairs":
            return super().count(over, batch)
        n = self.valid_positions(batch["input_ids"], batch["attention_mask"]).sum(1)  # (B,)
        return (n * (n - 1)).sum()

    def forward(self, output: ForwardOutput) -> TermOutput:
        valid = self.valid_positions(output.input_ids, output.attention_mask)
        total, count = simctg_loss_sum(output.hidden_states, valid, margin=self.margin)
        return TermOutput(distributed_mean(total, count, over="simctg_pairs"), {"pairs": count.detach()})
