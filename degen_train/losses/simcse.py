"""Unsupervised SimCSE: two dropout views of each sequence, contrasted over the batch (Gao, Yao, Chen 2021)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from annotated_types import Gt
from torch import Tensor, nn

from degen_train.devices.collectives import gather_with_gradient, is_distributed
from degen_train.devices.precision import autocast_off
from degen_train.losses.contract import LossTerm, TermContext, TermOutput, distributed_mean, register_term
from degen_train.models.output import ForwardOutput


def simcse_loss_sum(first: Tensor, second: Tensor, *, temperature: float, keys: Tensor | None = None,
                    offset: int = 0) -> Tensor:  # fmt: skip
    """Σ_i −log( e^{cos(z_i, z_i⁺)/τ} / Σ_j e^{cos(z_i, z_j⁺)/τ} ) over this process's B anchors z_i, the
    positives z_j⁺ of the whole batch (``keys``, gathered, with this process's rows from ``offset``);
    Gao et al. 2021 (SimCSE), eq. 1."""
    keys = second if keys is None else keys
    with autocast_off(first):
        logits = F.normalize(first.float(), dim=-1) @ F.normalize(keys.float(), dim=-1).T / temperature  # (B, G)
        targets = torch.arange(first.shape[0], device=first.device) + offset
        return F.cross_entropy(logits, targets, reduction="sum")


@register_term("simcse")
class DropoutContrastTerm(LossTerm):
    """L = −(1/N) Σ_i log softmax_j(cos(h_i, h_j⁺)/τ)[i], h and h⁺ two dropout passes of sequence i, τ = 0.05,
    the other sequences of the global batch as negatives; Gao, Yao, Chen 2021 (unsupervised SimCSE).

    ``pooler``: cls_mlp (the released unsupervised setting: [CLS] through dense + tanh while training; the
    export is the encoder alone), cls, or mean over the tokens; ``gather_negatives``: every process's views
    are negatives, gathered with their gradient (the released code keeps only the local rows' gradient).

    Source: Gao, Yao, Chen 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings" (EMNLP 2021);
    released: princeton-nlp/SimCSE, simcse/models.py (cl_forward).
    Needs: an encoder with dropout and sentence examples (``data.examples=sentences``); negatives from every
    process.
    Example: ``degen-train recipe=simcse start=runs/teacher``
    """

    family = "encoder"
    averages_over = ("sequences",)
    mixes_samples = "the batch's other sequences as negatives"

    def __init__(
        self,
        *,
        temperature: Annotated[float, Gt(0)] = 0.05,
        pooler: Literal["cls_mlp", "cls", "mean"] = "cls_mlp",
        gather_negatives: bool = True,
    ) -> None:
        super().__init__()
        self.temperature, self.pooler, self.gather_negatives = temperature, pooler, gather_negatives
        self.mlp: nn.Module | None = None

    def setup(self, context: TermContext) -> None:
        if context.batch_size < 2:
            raise ValueError(f"SimCSE needs data.batch_size >= 2 (in-batch negatives), got {context.batch_size}")
        if self.pooler == "cls_mlp":
            self.mlp = nn.Sequential(nn.Linear(context.hidden_size, context.hidden_size), nn.Tanh())
            # As the released cl_init (cls.init_weights(): BERT's init): normal(0, initializer_range), zero bias.
            config = context.backbone.model.config if context.backbone is not None else None
            nn.init.normal_(self.mlp[0].weight, std=float(getattr(config, "initializer_range", 0.02)))
            nn.init.zeros_(self.mlp[0].bias)

    def prepare_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Both views in one pass of 2B rows, the unmasked sequences twice (each row its own dropout mask), as
        the released code stacks them: one larger pass keeps the matrix products as efficient as the main one."""
        ids = batch.get("original_ids", batch["input_ids"])  # (B, T)
        twice = torch.cat([ids, ids])  # (2B, T)
        view = {
            "input_ids": twice,
            "attention_mask": torch.cat([batch["attention_mask"], batch["attention_mask"]]),
            "labels": torch.full_like(twice, -100),
            "labelled_index": torch.empty(0, dtype=torch.long, device=twice.device),  # nothing labelled
            "dropout": True,  # also in validation: the two views are two dropout masks
        }
        self.view_index = len(batch.get("views", ()))
        return {**batch, "views": (*batch.get("views", ()), view)}

    def pool(self, output: ForwardOutput) -> Tensor:
        if self.pooler == "mean":
            mask = output.attention_mask.unsqueeze(-1).to(output.hidden_states.dtype)
            return (output.hidden_states * mask).sum(1) / mask.sum(1).clamp_min(1)  # (B, H)
        cls = output.hidden_states[:, 0]  # (B, H)
        return self.mlp(cls) if self.mlp is not None else cls

    def forward(self, output: ForwardOutput) -> TermOutput:
        first, second = self.pool(output.views[self.view_index]).chunk(2)  # (B, H) each
        count = torch.tensor(float(first.shape[0]), device=first.device)
        if self.gather_negatives and is_distributed():
            keys, offset = gather_with_gradient(second)
            total = simcse_loss_sum(first, second, temperature=self.temperature, keys=keys, offset=offset)
        else:
            total = simcse_loss_sum(first, second, temperature=self.temperature)
        with torch.no_grad():
            positive = F.cosine_similarity(first, second, dim=-1).mean()
        return TermOutput(distributed_mean(total, count, over="sequences"), {"positive_cosine": positive})
