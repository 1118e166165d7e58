"""Masked language modelling (Devlin et al. 2019)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from degen_train.terms import LossTerm, distributed_mean, register_term
from degen_train.types import ForwardOutput, TermOutput


def token_cross_entropy_sum(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """Σ_i −log softmax(z_i)[y_i] over N targets, and N; computed in float32 (Devlin et al. 2019)."""
    total = F.cross_entropy(logits.float(), targets, reduction="sum")
    return total, torch.tensor(float(targets.numel()), device=logits.device)


def token_accuracy(logits: Tensor, targets: Tensor) -> Tensor:
    """Share of targets whose arg-max logit is the target id."""
    if targets.numel() == 0:
        return torch.zeros((), device=logits.device)
    return (logits.argmax(-1) == targets).float().mean()


class TokenPredictionTerm(LossTerm):
    """−(1/N) Σ log p(target) over the N labelled positions of every process: the MLM and MLE loss alike."""

    perplexity_metric = "loss"

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert output.logits is not None
        total, count = token_cross_entropy_sum(output.logits, output.target_ids)
        loss = distributed_mean(total, count)
        return TermOutput(loss, {"accuracy": token_accuracy(output.logits.detach(), output.target_ids)})


@register_term("mlm")
class MaskedLMTerm(TokenPredictionTerm):
    """L_MLM = −(1/N) Σ_{i masked} log p(x_i | x̃); Devlin et al. 2019 (BERT)."""

    family = "encoder"
    paper_metrics = ("accuracy",)
    data_format = "mlm"
