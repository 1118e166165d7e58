"""Causal language modelling, maximum likelihood (Radford et al. 2019)."""

from __future__ import annotations

from degen_train.losses.contract import register_term
from degen_train.losses.mlm import TokenPredictionTerm


@register_term("mle", section="objective")
class CausalLMTerm(TokenPredictionTerm):
    """L_MLE = −(1/N) Σ_t log p(x_{t+1} | x_≤t); Radford et al. 2019 (GPT-2), as in Gao et al. 2019."""

    family = "decoder"
    data_format = "causal"
