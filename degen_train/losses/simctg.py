"""SimCTG: a token-level contrastive loss on a decoder's last-layer states (Su et al., NeurIPS 2022)."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from annotated_types import Interval
from torch import Tensor

from degen_train.devices.precision import autocast_off
from degen_train.losses.contract import LossTerm, TermContext, TermOutput, distributed_mean, register_term
from degen_train.models.output import ForwardOutput


def simctg_loss_sum(
    hidden: Tensor, pairs: Tensor, *, margin: float, rows: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """(Σ_b Σ_{(i,j) in pairs} max(0, ρ − s_ii + s_ij), number of pairs), s = cosines of one sequence's states: the
    numerator and denominator of L_CL (Su et al. 2022, eq. 2). hidden: (B, T, H); pairs: (B, T, T) bool without
    the diagonal; rows: (B, T) bool, the anchors i whose penalties count in the numerator (default: all)."""
    # float32 whatever the autocast dtype: under bf16 autocast the product ran in bf16 and the pair count was
    # rounded to 8 significant bits (16·1024·1023 pairs read as 2^24, which the accumulation check refused on a GPU)
    with autocast_off(hidden):
        unit = F.normalize(hidden.float(), dim=-1)  # (B, T, H)
        scores = unit @ unit.transpose(1, 2)  # (B, T, T) s_ij
        gold = scores.diagonal(dim1=1, dim2=2).unsqueeze(-1)  # (B, T, 1) s_ii (1 up to rounding)
        counted = pairs if rows is None else pairs & rows[:, :, None]
        penalties = F.relu(margin - gold + scores) * counted
        return penalties.sum(), pairs.sum().float()


def off_diagonal_pairs(valid: Tensor) -> Tensor:
    """(B, T, T) bool: i ≠ j, both valid. valid: (B, T) bool."""
    pairs = valid[:, :, None] & valid[:, None, :]
    return pairs & ~torch.eye(valid.shape[1], dtype=torch.bool, device=valid.device)


@register_term("simctg")
class TokenContrastiveDecoderTerm(LossTerm):
    """L_CL = 1/(n(n−1)) Σ_i Σ_{j≠i} max(0, ρ − cos(h_i,h_i) + cos(h_i,h_j)); Su et al. 2022 (SimCTG), eq. 2.

    The mean is over every pair of the global batch (the released lossfunction.py divides the batch's
    sum by its number of pairs). ``mask_from``: which positions take part: ``attention`` (the paper: pads
    left out) or ``pad_token`` (the released lossfunction.py: its mask is built from the count of positions not
    holding the pad id, by length, see pairs_and_rows; for GPT-2, whose pad is <|endoftext|>, a document
    separator inside a block thus shifts which positions take part).

    Source: Su et al. 2022, "A Contrastive Framework for Neural Text Generation" (NeurIPS 2022); released:
    yxuansu/SimCTG, simctg/lossfunction.py.
    Needs: a decoder's last-layer states and causal blocks.
    Example: ``degen-train recipe=simctg model=gpt2_tiny``
    """

    family = "decoder"
    averages_over = ("simctg_pairs",)

    def __init__(
        self,
        *,
        margin: Annotated[float, Interval(ge=0, le=2)] = 0.5,  # a cosine margin
        mask_from: Literal["attention", "pad_token"] = "attention",
    ) -> None:
        super().__init__()
        self.margin, self.mask_from = margin, mask_from
        self.pad_id: int | None = None

    def setup(self, context: TermContext) -> None:
        if context.backbone is not None:
            self.pad_id = context.backbone.model.config.pad_token_id

    def pairs_and_rows(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor | None]:
        """The (B, T, T) pairs of the mean and the anchors counted in its numerator.

        attention: every i ≠ j among real tokens. pad_token, as the released build_mask_matrix: with n the number
        of positions not holding the pad id, the pairs among the *first n positions* (by length, not by id), and
        in the numerator only anchors that do not hold the pad id; so a pad id inside a sequence still counts in
        the denominator, and the last real positions fall out when one does.
        """
        if self.mask_from == "pad_token" and self.pad_id is not None:
            not_pad = input_ids != self.pad_id  # (B, T)
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
            first_n = positions[None, :] < not_pad.sum(1, keepdim=True)  # (B, T)
            return off_diagonal_pairs(first_n), not_pad
        return off_diagonal_pairs(attention_mask.bool()), None

    def count(self, over: str, batch: dict[str, Tensor]) -> Tensor:
        """simctg_pairs: Σ_b n_b(n_b − 1), n_b the positions of sequence b that take part."""
        if over != "simctg_pairs":
            return super().count(over, batch)
        return self.pairs_and_rows(batch["input_ids"], batch["attention_mask"])[0].sum()

    def forward(self, output: ForwardOutput) -> TermOutput:
        pairs, rows = self.pairs_and_rows(output.input_ids, output.attention_mask)
        total, count = simctg_loss_sum(output.hidden_states, pairs, margin=self.margin, rows=rows)
        return TermOutput(distributed_mean(total, count, over="simctg_pairs"), {"pairs": count.detach()})
