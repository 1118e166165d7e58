"""COCO-LM corrective language modelling (Meng et al. 2021): copy head + LM over the vocabulary."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from degen_train.objectives.corruption import GeneratorCorruption
from degen_train.objectives.electra import replaced_token_detection
from degen_train.terms import TermContext, distributed_mean, register_term
from degen_train.types import ForwardOutput, TermOutput

LM_FORMS = ("paper", "released")


def corrective_lm_paper(lm_logits: Tensor, targets: Tensor, copy_logits: Tensor, copied: Tensor) -> Tensor:
    """Σ_i −log(1[x̂_i = x_i]·sg(p_copy(1|h_i)) + sg(p_copy(0|h_i))·p_LM(x_i|h_i)); Meng et al. 2021, eq. 5."""
    log_copy = F.logsigmoid(copy_logits.detach().float())  # log p_copy(1|h)
    log_not_copy = F.logsigmoid(-copy_logits.detach().float())  # log p_copy(0|h)
    log_lm = -F.cross_entropy(lm_logits.float(), targets, reduction="none")  # log p_LM(x_i|h_i)
    generate = log_not_copy + log_lm
    copy_term = torch.where(copied, log_copy, torch.full_like(log_copy, float("-inf")))
    return -torch.logaddexp(copy_term, generate).sum()


def corrective_lm_released(lm_logits: Tensor, targets: Tensor, copy_logits: Tensor) -> Tensor:
    """Σ_i sg(1 − p_copy(1|h_i)) · −log p_LM(x_i|h_i): the authors' released implementation."""
    weight = 1 - torch.sigmoid(copy_logits.detach().float())
    return (weight * F.cross_entropy(lm_logits.float(), targets, reduction="none")).sum()


@register_term("coco_clm")
class CorrectiveLMTerm(GeneratorCorruption):
    """L = L_gen + λ_copy · L_copy + L_LM with λ_copy = 50; Meng et al. 2021 (COCO-LM)."""

    main_model_predicts_tokens = True
    perplexity_metric = "clm"

    def __init__(self, *, copy_weight: float = 50.0, lm_form: str = "paper", **generator_options) -> None:
        super().__init__(**generator_options)
        if lm_form not in LM_FORMS:
            raise ValueError(f"objective.coco_clm.lm_form={lm_form!r} is not one of {', '.join(LM_FORMS)}")
        if copy_weight < 0:
            raise ValueError(f"objective.coco_clm.copy_weight must be >= 0, got {copy_weight}")
        self.copy_weight, self.lm_form = copy_weight, lm_form
        self.copy_head: nn.Module | None = None

    def setup(self, context: TermContext) -> None:
        super().setup(context)
        self.copy_head = nn.Linear(context.hidden_size, 1)

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert self.copy_head is not None and output.logits is not None
        copy_logits = self.copy_head(output.hidden_states).squeeze(-1)  # (B, T)
        mask = output.attention_mask.bool()
        copied = ~output.extras["replaced"]  # 1 = the token is the original one
        copy_total, copy_count = replaced_token_detection(copy_logits, copied, mask)
        copy_loss = distributed_mean(copy_total, copy_count)
        selected = output.labels != -100
        if self.lm_form == "paper":
            lm_total = corrective_lm_paper(output.logits, output.target_ids, copy_logits[selected], copied[selected])
        else:
            lm_total = corrective_lm_released(output.logits, output.target_ids, copy_logits[selected])
        count = torch.tensor(float(output.target_ids.numel()), device=lm_total.device)
        lm_loss = distributed_mean(lm_total, count)
        generator = self.generator_loss(output)
        loss = self.generator_weight * generator + self.copy_weight * copy_loss + lm_loss
        metrics = {
            "generator_mlm": generator.detach(),
            "copy": copy_loss.detach(),
            "clm": lm_loss.detach(),
            "copy_accuracy": ((copy_logits.detach() > 0) == copied)[mask].float().mean(),
            "replaced_rate": (~copied)[mask].float().mean(),
        }
        return TermOutput(loss, metrics)
