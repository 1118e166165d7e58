"""COCO-LM sequence contrastive learning (Meng et al. 2021): corrupted sequence vs a cropped original."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from annotated_types import Gt, Interval
from torch import Tensor, nn

from degen_train.core.rng import CROP_SALT, counter_uniforms
from degen_train.devices.collectives import gather_with_gradient, is_distributed
from degen_train.devices.precision import autocast_off
from degen_train.losses.contract import LossTerm, TermContext, TermOutput, register_term
from degen_train.models.output import ForwardOutput


def sequence_contrastive_loss(
    first: Tensor,
    second: Tensor,
    *,
    temperature: float,
    first_offset: int = 0,
    all_first: Tensor | None = None,
    all_second: Tensor | None = None,
) -> Tensor:
    """(1/2B) Σ_views −log( e^{cos(z, z⁺)/τ} / Σ_{z'≠z} e^{cos(z, z')/τ} ) over 2B views, in-batch negatives;
    Meng et al. 2021 (COCO-LM), eq. 7. With ``all_*`` (gathered across processes) the local rows start
    at ``first_offset`` in them and every process's views are negatives."""
    all_first = first if all_first is None else all_first
    all_second = second if all_second is None else all_second
    with autocast_off(first):
        total = all_first.shape[0]
        keys = F.normalize(torch.cat([all_first, all_second]).float(), dim=-1)  # (2G, H)
        queries = F.normalize(torch.cat([first, second]).float(), dim=-1)  # (2B, H)
        local = first.shape[0]
        own = torch.arange(local, device=queries.device)  # (B,)
        rows = torch.cat([own, own + total]) + first_offset
        positives = torch.cat([own + total, own]) + first_offset
        logits = queries @ keys.T / temperature  # (2B, 2G)
        logits[torch.arange(2 * local, device=logits.device), rows] = float("-inf")  # a view is not its own negative
        return F.cross_entropy(logits, positives)


def crop_views(ids: Tensor, attention_mask: Tensor, sample_seeds: Tensor, *, fraction: float) -> dict[str, Tensor]:
    """[CLS] + a contiguous ``fraction`` of each sequence's tokens after [CLS] (round(fraction·n), at least 1), its
    start drawn per example from (example seed, CROP_SALT); (B, T) like the input, padded after the crop.

    Made for the whole batch at once on its device (no per-example loop, no host read)."""
    size, length = ids.shape
    body = attention_mask.sum(1) - 1  # (B,) tokens after [CLS]
    keep = torch.round(fraction * body.double()).long().clamp_min(1)  # (B,) as Python's round: half to even
    seeds = sample_seeds.to(ids.device) ^ CROP_SALT  # (B,)
    uniforms = counter_uniforms(seeds, torch.zeros_like(seeds))  # (B,)
    start = (uniforms * (body - keep + 1).double()).long()  # (B,) in [0, body − keep]
    columns = torch.arange(length, device=ids.device)  # (T,)
    source = (1 + start[:, None] + columns[None, :] - 1).clamp(0, length - 1)  # (B, T) token j ← body[start + j − 1]
    source[:, 0] = 0  # [CLS] stays first
    inside = (columns[None, :] == 0) | (columns[None, :] <= keep[:, None])  # (B, T)
    cropped = torch.where(inside, ids.gather(1, source), torch.zeros_like(ids))
    mask = inside.to(attention_mask.dtype)
    no_labels = torch.full_like(cropped, -100)
    return {"input_ids": cropped, "attention_mask": mask, "labels": no_labels,
            "labelled_index": torch.empty(0, dtype=torch.long, device=ids.device)}  # fmt: skip


@register_term("coco_scl")
class SequenceContrastiveTerm(LossTerm):
    """InfoNCE between [CLS] projections of the main input and a cropped original, τ = 1; Meng et al. 2021
    (COCO-LM, sequence contrastive learning).

    Source: Meng et al. 2021 (COCO-LM, NeurIPS 2021); released: microsoft/COCO-LM,
    fairseq/fairseq/models/cocolm/model.py (the SCL head: dense, GELU, LayerNorm).
    Needs: an encoder trained with coco_clm, whose corrupted sequence is the main input; negatives from every
    process.
    Example: ``degen-train recipe=coco_lm model=tiny``
    """

    family = "encoder"
    mixes_samples = "the batch's other sequences as negatives"

    def __init__(
        self,
        *,
        crop_fraction: Annotated[float, Interval(gt=0, le=1)] = 0.9,
        temperature: Annotated[float, Gt(0)] = 1.0,
        gather_negatives: bool = False,
        projection: Literal["released", "linear"] = "released",
    ) -> None:
        super().__init__()
        self.projection_form = projection
        self.crop_fraction, self.temperature, self.gather_negatives = crop_fraction, temperature, gather_negatives
        self.projection: nn.Module | None = None

    def setup(self, context: TermContext) -> None:
        if context.batch_size < 2:
            raise ValueError(
                f"sequence contrastive learning needs data.batch_size >= 2 (in-batch negatives), "
                f"got {context.batch_size}"
            )
        hidden = context.hidden_size
        if self.projection_form == "released":  # COCO-LM's SCL head: dense → GELU → LayerNorm on [CLS]
            self.projection = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden))
        else:
            self.projection = nn.Linear(hidden, hidden)

    def prepare_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        crop = crop_views(
            batch["original_ids"], batch["attention_mask"], batch["sample_seed"], fraction=self.crop_fraction
        )
        self.view_index = len(batch.get("views", ()))
        return {**batch, "views": (*batch.get("views", ()), crop)}

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert self.projection is not None
        first = self.projection(output.hidden_states[:, 0])  # (B, H) [CLS] of the main input
        second = self.projection(output.views[self.view_index].hidden_states[:, 0])  # (B, H) of the crop
        if self.gather_negatives and is_distributed():
            all_first, offset = gather_with_gradient(first)
            all_second, _ = gather_with_gradient(second)
            loss = sequence_contrastive_loss(
                first,
                second,
                temperature=self.temperature,
                first_offset=offset,
                all_first=all_first,
                all_second=all_second,
            )
        else:
            loss = sequence_contrastive_loss(first, second, temperature=self.temperature)
        with torch.no_grad():
            similarity = F.cosine_similarity(first, second, dim=-1).mean()
        return TermOutput(loss, {"positive_cosine": similarity})
