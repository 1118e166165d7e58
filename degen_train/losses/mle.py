"""Causal language modelling, maximum likelihood (Radford et al. 2019)."""

from __future__ import annotations

from degen_train.losses.contract import register_term
from degen_train.losses.mlm import TokenPredictionTerm


@register_term("mle", section="objective")
class CausalLMTerm(TokenPredictionTerm):
    """L_MLE = −(1/N) Σ_t log p(x_{t+1} | x_≤t); Radford et al. 2019 (GPT-2), as in Gao et al. 2019.

    Source: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners" (GPT-2), the objective
    Gao et al. 2019 train; released: no training code (openai/gpt-2 samples only): the shifted cross-entropy as
    transformers' GPT2LMHeadModel computes it.
    Needs: a decoder and causal blocks.
    Example: ``degen-train recipe=gpt2_mle model=gpt2_tiny``
    """

    family = "decoder"
    data_format = "causal"
