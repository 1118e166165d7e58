"""Causal language modelling, maximum likelihood (Radford et al. 2019)."""

from __future__ import annotations

from degen_train.objectives.mlm import token_accuracy, token_cross_entropy_sum
from degen_train.terms import LossTerm, distributed_mean, register_term
from degen_train.types import ForwardOutput, TermOutput


@register_term("mle")
class CausalLMTerm(LossTerm):
    """L_MLE = −(1/N) Σ_t log p(x_{t+1} | x_≤t); Radford et al. 2019 (GPT-2), as in Gao et al. 2019."""

    family = "decoder"
    perplexity_metric = "loss"
    data_format = "causal"

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert output.logits is not None
        total, count = token_cross_entropy_sum(output.logits, output.target_ids)
        loss = distributed_mean(total, count)
        return TermOutput(loss, {"accuracy": token_accuracy(output.logits.detach(), output.target_ids)})
