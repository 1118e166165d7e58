"""I-STAR: IsoScore*-based regularization of the batch's token states (Rudman & Eickhoff, ICLR 2024)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from degen_train.terms import LossTerm, TermContext, register_term
from degen_train.types import ForwardOutput, TermOutput

DIRECTIONS = ("increase", "decrease")
LAYERS = ("last", "all")
PRIORS = ("warmup", "identity")


def isoscore_of_covariance(covariance: Tensor) -> Tensor:
    """IsoScore = ((n − δ²(n − √n))² − n) / (n(n − 1)), δ = ‖√n·σ/‖σ‖ − 1‖ / √(2(n − √n)), σ the singular
    values of the (shrunk) covariance; Rudman et al. 2022, differentiable as IsoScore* (Rudman & Eickhoff 2024)."""
    n = covariance.shape[0]
    spectrum = torch.linalg.svdvals(covariance)  # (n,) as the released istar.py (= eigenvalues for a covariance)
    normalised = spectrum * math.sqrt(n) / spectrum.norm().clamp_min(1e-30)
    defect = (normalised - 1).norm() / math.sqrt(2 * (n - math.sqrt(n)))
    return ((n - defect**2 * (n - math.sqrt(n))) ** 2 - n) / (n * (n - 1))


def global_covariance(vectors: Tensor) -> Tensor:
    """Unbiased covariance (d, d) of the vectors of every process: Σx, Σxxᵀ and N summed with a differentiable
    all-reduce (torch.cov's value when there is one process)."""
    vectors = vectors.float()
    parts = [vectors.sum(0), vectors.T @ vectors]
    count = torch.tensor(float(vectors.shape[0]), device=vectors.device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        from torch.distributed.nn.functional import all_reduce

        parts = [all_reduce(part) for part in parts]
        torch.distributed.all_reduce(count)
    total, gram = parts
    mean = total / count
    return (gram - count * torch.outer(mean, mean)) / (count - 1).clamp_min(1)


@register_term("istar")
class IsoScoreStarTerm(LossTerm):
    """L_I-STAR = ∓ IsoScore*(C*), C* = (1 − ζ)·C_batch + ζ·C0, over the batch's token states (weight = |λ|);
    Rudman & Eickhoff 2024 (I-STAR): L − λ·IsoScore*, λ > 0 spreads the states out, λ < 0 narrows them.

    ``direction``: increase (λ > 0) or decrease (λ < 0) isotropy; ``zeta``: the shrinkage ζ; ``prior``: C0
    from the first training batch's states (``warmup``, kept in checkpoints) or the identity (the released
    code's advice without a larger sample); ``layers``: the last layer's states or the union of every
    layer's (``all``). C_batch is the covariance of the global batch's non-pad token states.
    """

    mixes_samples = "the covariance of the batch's token states"

    def __init__(self, *, direction: str = "decrease", zeta: float = 0.2, prior: str = "warmup", layers: str = "last"):
        super().__init__()
        for name, value, choices in (("direction", direction, DIRECTIONS), ("prior", prior, PRIORS),
                                     ("layers", layers, LAYERS)):  # fmt: skip
            if value not in choices:
                raise ValueError(f"regularizer.istar.{name}={value!r} is not one of {', '.join(choices)}")
        if not 0 <= zeta <= 1:
            raise ValueError(f"regularizer.istar.zeta={zeta}: the shrinkage weight lies in [0, 1]")
        self.direction, self.zeta, self.prior, self.layers = direction, zeta, prior, layers
        self.requires = frozenset({"all_hidden_states"}) if layers == "all" else frozenset()
        # C0 and whether it is estimated yet: buffers, so a resumed run keeps the warm-up sample's C0.
        self.register_buffer("prior_covariance", torch.zeros(0))
        self.register_buffer("prior_ready", torch.tensor(False))

    def setup(self, context: TermContext) -> None:
        identity = self.prior == "identity"
        self.prior_covariance = torch.eye(context.hidden_size) if identity else torch.zeros(2 * (context.hidden_size,))
        self.prior_ready = torch.tensor(identity)

    def forward(self, output: ForwardOutput) -> TermOutput:
        mask = output.attention_mask.bool()
        if self.layers == "all":
            assert output.all_hidden_states is not None
            vectors = torch.cat([layer[mask] for layer in output.all_hidden_states])  # (L·tokens, H)
        else:
            vectors = output.hidden_states[mask]  # (tokens, H)
        batch_covariance = global_covariance(vectors)
        if not self.prior_ready and self.training:  # the warm-up sample: the first training batch
            self.prior_covariance.copy_(batch_covariance.detach())
            self.prior_ready.fill_(True)
        if self.prior_ready:
            shrunk = (1 - self.zeta) * batch_covariance + self.zeta * self.prior_covariance.to(batch_covariance)
        else:  # validation before any training batch (a sanity check): the batch alone
            shrunk = batch_covariance
        score = isoscore_of_covariance(shrunk)
        loss = -score if self.direction == "increase" else score
        return TermOutput(loss, {"isoscore_star": score.detach()})
