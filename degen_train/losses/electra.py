"""ELECTRA replaced-token detection (Clark et al. 2020): the baseline COCO-LM improves on."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch.nn.functional as F
from annotated_types import Ge
from torch import Tensor, nn

from degen_train.losses.contract import TermContext, TermOutput, distributed_mean, masked_mean, register_term
from degen_train.losses.corruption import GeneratorCorruption
from degen_train.models.output import ForwardOutput


def replaced_token_detection(logits: Tensor, replaced: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Σ_t BCE(σ(d_t), 1[x̂_t ≠ x_t]) over real tokens, and their count; Clark et al. 2020 (ELECTRA)."""
    losses = F.binary_cross_entropy_with_logits(logits.float(), replaced.float(), reduction="none")  # (B, T)
    return (losses * mask).sum(), mask.sum().float()


@register_term("electra", section="objective")
class ElectraTerm(GeneratorCorruption):
    """L = L_gen + λ · L_RTD, λ = 50; Clark et al. 2020 (ELECTRA).

    Source: Clark et al. 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than Generators"
    (ICLR 2020); released: google-research/electra, run_pretraining.py, pretrain/pretrain_helpers.py and
    configure_pretraining.py.
    Needs: an encoder and masked blocks (ELECTRA's masking: 85% [MASK], 15% kept); it builds its generator.
    Example: ``degen-train recipe=electra model=tiny``
    """

    def __init__(
        self,
        *,
        detection_weight: Annotated[float, Ge(0)] = 50.0,
        detection_head: Literal["released", "linear"] = "released",
        **generator_options: Any,
    ) -> None:
        super().__init__(**generator_options)
        self.detection_weight, self.detection_head_form = detection_weight, detection_head
        self.detection_head: nn.Module | None = None

    perplexity_metric = "generator_mlm"  # the generator's MLM perplexity: the one vocabulary model here
    averages_over = ("targets", "tokens")  # the generator's masked tokens; every real token for detection
    paper_metrics = ("detection_accuracy", "generator_accuracy", "replaced_rate")

    def released_generator_shape(self, layers: int, hidden: int) -> tuple[int, float]:
        """Full depth; ⅓ of the width for base (hidden 768), ¼ otherwise (small, large): Clark et al. 2020."""
        return layers, (1 / 3 if hidden == 768 else 1 / 4)

    def setup(self, context: TermContext) -> None:
        super().setup(context)
        hidden = context.hidden_size
        if self.detection_head_form == "released":  # dense → GELU → dense(1), as ELECTRA's discriminator
            self.detection_head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))
        else:
            self.detection_head = nn.Linear(hidden, 1)

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert self.detection_head is not None
        logits = self.detection_head(output.hidden_states).squeeze(-1)  # (B, T)
        replaced, mask = output.extras["replaced"], output.attention_mask.bool()
        total, count = replaced_token_detection(logits, replaced, mask)
        detection = distributed_mean(total, count, over="tokens")
        generator = self.generator_loss(output)
        accuracy = masked_mean((logits.detach() > 0) == replaced, mask)
        loss = self.generator_weight * generator + self.detection_weight * detection
        metrics = {
            "generator_mlm": generator.detach(),
            "detection": detection.detach(),
            "detection_accuracy": accuracy,
            "generator_accuracy": self.generator_accuracy(output),
            "replaced_rate": masked_mean(replaced, mask),
        }
        return TermOutput(loss, metrics)
