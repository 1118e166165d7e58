"""The dispersion loss (Liu, Sun, Xiao, Van Tassel et al., "Dispersion Loss Counteracts Embedding Condensation and
Improves Generalization in Small Language Models", ICML 2026, arXiv 2602.00217): the angular spread of each
sequence's token states, at every transformer layer."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import torch
from annotated_types import Ge, Gt, Interval
from torch import Tensor

from degen_train.devices.precision import autocast_off
from degen_train.losses.contract import LossTerm, TermOutput, distributed_mean, register_term
from degen_train.models.output import ForwardOutput


def angular_spread(states: Tensor, valid: Tensor, *, temperature: float, clamp: float,
                   epsilon: float = 1e-2) -> Tensor:  # fmt: skip
    """(B,) each sequence's log E_{i≠j}[exp(−D(z_i, z_j)/τ)], D = arccos(cos(z_i, z_j))/π, over its valid positions.

    As the released ``DispersionLoss(variant="angular_spread")`` (lm_dispersion/dispersion.py): z / (‖z‖ + ε), the
    cosines clamped to [−1 + t, 1 − t] in the forward pass only (the gradient passes as if unclamped, so arccos's
    slope stays bounded), the diagonal left out, the mean of the exponentials as a log-sum-exp less log(n(n − 1)),
    and ε added inside (a constant). A sequence of fewer than 2 valid positions gives 0. states: (B, T, H); valid:
    (B, T) bool."""
    with autocast_off(states):
        z = states.float()
        unit = z / (torch.linalg.norm(z, dim=-1, keepdim=True) + epsilon)  # (B, T, H)
        cosine = unit @ unit.transpose(1, 2)  # (B, T, T)
        clamped = cosine + (cosine.clamp(-1 + clamp, 1 - clamp) - cosine).detach()  # straight-through clamp
        logits = -(torch.arccos(clamped) / math.pi) / temperature  # (B, T, T)
        eye = torch.eye(z.shape[1], dtype=torch.bool, device=z.device)
        pairs = valid[:, :, None] & valid[:, None, :] & ~eye  # (B, T, T)
        logits = logits.masked_fill(~pairs, float("-inf"))
        count = valid.sum(1).float()  # (B,) n
        pair_count = (count * (count - 1)).clamp_min(1)
        spread = torch.logsumexp(logits.flatten(1) + epsilon, dim=1) - pair_count.log()  # (B,)
        return torch.where(count >= 2, spread, torch.zeros_like(spread))


@register_term("dispersion")
class DispersionTerm(LossTerm):
    """L_disp = (1/|S|) Σ_{l ∈ S} (1/B) Σ_b log( (1/(n_b(n_b − 1))) Σ_{i≠j} exp(−arccos(cos(z_i^l, z_j^l)) / (π τ)) )

    over the token states z^l of each sequence b at the transformer layers S (every layer's output, the embeddings
    left out: ``layers=all``, the released default; or the last only), its n_b positions that are not padding.
    Minimising it spreads a sequence's states apart in angle, against the "embedding condensation" of small models
    (Liu, Sun, Xiao, Van Tassel et al., ICML 2026, arXiv 2602.00217, §4 "Angular spread"; released code:
    KrishnaswamyLab/LM-Dispersion, lm_dispersion/dispersion.py and midtrain_gpt2_huggingface/midtrain_gpt2.py).

    The released settings: ``temperature`` τ_cos = 1, ``clamp`` 0.1 (midtrain_gpt2.py's --clamp_threshold),
    weight 0.1 (its README's --dispersion_coeff), at most ``max_tokens`` = 256 positions a sequence (a random
    subset, the same for the whole batch, where a block is longer). Here the mean over sequences is the global
    batch's (a mean over every process's sequences, like NSP's), and padding is left out, where the release scores
    every position of its packed blocks.

    Source: Liu, Sun, Xiao, Van Tassel et al. 2026 (ICML 2026, arXiv 2602.00217); released: KrishnaswamyLab/
    LM-Dispersion, lm_dispersion/dispersion.py (``DispersionLoss(variant="angular_spread")``).
    Needs: any model, encoder or decoder: every layer's hidden states (``all_hidden_states``, ``layers=all``) or
    the last one.
    Example: ``degen-train recipe=gpt2_mle model=gpt2_tiny regularizer=dispersion`` (logs train/dispersion/loss)
    """

    averages_over = ("sequences",)

    def __init__(
        self,
        *,
        temperature: Annotated[float, Gt(0)] = 1.0,
        clamp: Annotated[float, Interval(ge=0, lt=1)] = 0.1,
        layers: Literal["all", "last"] = "all",
        max_tokens: Annotated[int, Ge(2)] | None = 256,
    ) -> None:
        super().__init__()
        self.temperature, self.clamp, self.layers, self.max_tokens = temperature, clamp, layers, max_tokens
        self.requires = frozenset({"all_hidden_states"}) if layers == "all" else frozenset()

    def forward(self, output: ForwardOutput) -> TermOutput:
        layers = output.all_hidden_states[1:] if self.layers == "all" else (output.hidden_states,)
        assert layers[0] is not None, "layers=all needs all_hidden_states"
        valid = output.attention_mask.bool()  # (B, T)
        if self.max_tokens is not None and valid.shape[1] > self.max_tokens:
            kept = torch.randperm(valid.shape[1], device=valid.device)[: self.max_tokens]  # as released: one subset
            layers, valid = tuple(layer[:, kept] for layer in layers), valid[:, kept]
        spreads = torch.stack([angular_spread(layer, valid, temperature=self.temperature, clamp=self.clamp)
                               for layer in layers])  # (layers, B)  # fmt: skip
        total = spreads.mean(0).sum()  # Σ_b of the layers' mean
        sequences = torch.tensor(float(valid.shape[0]), device=total.device)
        return TermOutput(distributed_mean(total, sequences, over="sequences"), {"layers": spreads.new_tensor(
            float(len(layers)))})  # fmt: skip
