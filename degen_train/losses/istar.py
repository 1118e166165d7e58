"""I-STAR: IsoScore*-based regularization of the batch's token states (Rudman & Eickhoff, ICLR 2024)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Annotated, Literal

import torch
from annotated_types import Ge, Interval
from torch import Tensor

from degen_train.devices.collectives import is_distributed, sum_over_processes, sum_with_gradient
from degen_train.devices.precision import autocast_off
from degen_train.losses.contract import LossTerm, TermContext, TermOutput, register_term
from degen_train.models.output import ForwardOutput


def isoscore_of_covariance(covariance: Tensor) -> Tensor:
    """IsoScore = ((n − δ²(n − √n))² − n) / (n(n − 1)), δ = ‖√n·σ/‖σ‖ − 1‖ / √(2(n − √n)), σ the singular
    values of the (shrunk) covariance; Rudman et al. 2022, differentiable as IsoScore* (Rudman & Eickhoff 2024)."""
    n = covariance.shape[0]
    with autocast_off(covariance):
        spectrum = torch.linalg.svdvals(covariance.float())  # (n,) as the released istar.py (= its eigenvalues)
    normalised = spectrum * math.sqrt(n) / spectrum.norm().clamp_min(1e-30)
    defect = (normalised - 1).norm() / math.sqrt(2 * (n - math.sqrt(n)))
    return ((n - defect**2 * (n - math.sqrt(n))) ** 2 - n) / (n * (n - 1))


def global_covariance(vectors: Tensor) -> Tensor:
    """Unbiased covariance (d, d) of the vectors of every process (torch.cov's value with one process).

    Two passes, as a centred covariance should be: Σx and N all-reduced give the global mean μ, then Σ(x − μ)(x − μ)ᵀ
    is all-reduced. The one-pass Σxxᵀ − N·μμᵀ loses the covariance to float32 cancellation when ‖μ‖ is large
    (IsoScore 0.2778 instead of 0.2729 at ‖μ‖ ≈ 800).
    """
    with autocast_off(vectors):  # float32 throughout: CUDA's SVD has no bf16 kernel, and the sums need the bits
        vectors = vectors.float()
        count = sum_over_processes(vectors.new_tensor(float(vectors.shape[0])))
        mean = sum_with_gradient(vectors.sum(0)) / count  # (d,)
        centred = vectors - mean  # (N, d)
        return sum_with_gradient(centred.T @ centred) / (count - 1).clamp_min(1)


class CovarianceSums:
    """Σx, Σxxᵀ and N in float64 over batches of states, for the refreshed C0 (no gradient: float64 keeps the
    one-pass formula exact enough, as the released np.cov over the stacked sample is)."""

    def __init__(self) -> None:
        self.total: Tensor | None = None
        self.gram: Tensor | None = None
        self.count = 0.0

    def add(self, states: Tensor) -> None:
        states = states.detach().double()
        total, gram = states.sum(0), states.T @ states
        self.total = total if self.total is None else self.total + total
        self.gram = gram if self.gram is None else self.gram + gram
        self.count += states.shape[0]

    def all_reduce(self) -> None:
        """Sum over processes (each sampled its share of the same global batches)."""
        if self.total is None or not is_distributed():
            return
        joined = sum_over_processes(torch.cat([self.total, self.gram.reshape(-1), self.total.new_tensor([self.count])]))
        d = self.total.numel()
        self.total, self.gram, self.count = joined[:d], joined[d : d + d * d].reshape(d, d), float(joined[-1])

    def covariance(self) -> Tensor:
        assert self.total is not None and self.gram is not None
        mean = self.total / self.count
        return (self.gram - self.count * torch.outer(mean, mean)) / max(self.count - 1, 1)


@register_term("istar")
class IsoScoreStarTerm(LossTerm):
    """L_I-STAR = ∓ IsoScore*(C*), C* = (1 − ζ)·C_batch + ζ·C0, over the batch's token states (weight = |λ|);
    Rudman & Eickhoff 2024 (I-STAR): L − λ·IsoScore*, λ > 0 spreads the states out, λ < 0 narrows them.

    ``direction``: increase (λ > 0) or decrease (λ < 0) isotropy; ``zeta``: the shrinkage ζ; ``prior``: C0 as the
    released run_model.py estimates it (``refresh``, the default: at the start of every epoch, or every
    ``refresh_every_steps`` updates, from more than ``refresh_points`` states of the upcoming training batches, in
    eval mode without gradient, all processes' samples together), from the first training batch's states
    (``warmup``, kept) or the identity (the released code's advice without a larger sample); ``layers``: the last
    layer's states or every layer's but the embedding output (``all``, as released: hidden_states[1:]);
    ``padding``: whether padded positions count in C_batch and C0 (``include``, as released: its states are the
    reshaped (B·T, H) tensors) or not (``exclude``).

    Source: Rudman & Eickhoff 2024, "Stable Anisotropic Regularization" (ICLR 2024); released:
    bcbi-edu/p_eickhoff_isoscore, I-STAR/training_utils.py (get_ci) and run_model.py.
    Needs: any model: the batch's token states (every layer with ``layers=all``); the prior's sample is read from
    the coming training batches.
    Example: ``degen-train recipe=istar model=tiny``
    """

    mixes_samples = "the covariance of the batch's token states"

    def __init__(
        self,
        *,
        direction: Literal["increase", "decrease"] = "decrease",
        zeta: Annotated[float, Interval(ge=0, le=1)] = 0.2,
        prior: Literal["refresh", "warmup", "identity"] = "refresh",
        layers: Literal["last", "all"] = "last",
        padding: Literal["include", "exclude"] = "include",
        refresh_every_steps: Annotated[int, Ge(1)] | None = None,
        refresh_points: Annotated[int, Ge(2)] = 250_000,
    ) -> None:
        super().__init__()
        self.direction, self.zeta, self.prior, self.layers = direction, zeta, prior, layers
        self.padding, self.refresh_every_steps, self.refresh_points = padding, refresh_every_steps, refresh_points
        self.requires = frozenset({"all_hidden_states"}) if layers == "all" else frozenset()
        # C0 and whether it is estimated yet: buffers, so a resumed run keeps the C0 it had.
        self.register_buffer("prior_covariance", torch.zeros(0))
        self.register_buffer("prior_ready", torch.tensor(False))

    def setup(self, context: TermContext) -> None:
        identity = self.prior == "identity"
        self.prior_covariance = torch.eye(context.hidden_size) if identity else torch.zeros(2 * (context.hidden_size,))
        self.prior_ready = torch.tensor(identity)

    def states(self, output: ForwardOutput) -> Tensor:
        """(n, H) the token states the covariances are taken of: the chosen layers, padded positions or not."""
        layers = output.all_hidden_states[1:] if self.layers == "all" else (output.hidden_states,)
        assert layers[0] is not None, "layers=all needs all_hidden_states"
        if self.padding == "include":
            return torch.cat([layer.reshape(-1, layer.shape[-1]) for layer in layers])  # (L·B·T, H)
        mask = output.attention_mask.bool()
        return torch.cat([layer[mask] for layer in layers])  # (L·tokens, H)

    def states_wanted(self, step: int, steps_per_epoch: int) -> int:
        """How many states to sample before update ``step`` for a refreshed C0 (0: none now)."""
        if self.prior != "refresh":
            return 0
        every = self.refresh_every_steps or max(steps_per_epoch, 1)
        return self.refresh_points if step % every == 0 else 0

    def refresh(self, outputs: Iterator[ForwardOutput], wanted: int) -> None:
        """C0 = the covariance of the states of the upcoming batches, until more than ``wanted`` are taken (counted
        over every process, so every process runs as many passes and 2 processes sample what 1 process does)."""
        sums = CovarianceSums()
        for output in outputs:
            sums.add(self.states(output))
            taken = sum_over_processes(torch.tensor(sums.count, device=output.hidden_states.device))
            if taken.item() > wanted:  # released get_ci: stop once past max_points
                break
        sums.all_reduce()
        self.prior_covariance.copy_(sums.covariance().to(self.prior_covariance))
        self.prior_ready.fill_(True)

    def forward(self, output: ForwardOutput) -> TermOutput:
        batch_covariance = global_covariance(self.states(output))
        ready = self.prior_ready  # a device flag, used without reading it on the host (no wait in the step)
        if self.prior == "warmup" and self.training:  # the first training batch's covariance becomes C0, kept
            self.prior_covariance.copy_(torch.where(ready, self.prior_covariance, batch_covariance.detach()))
            self.prior_ready.fill_(True)
        # Without a C0 yet (validation before any training, a term used outside training): the batch alone.
        zeta = self.zeta * ready.to(batch_covariance.dtype)
        shrunk = (1 - zeta) * batch_covariance + zeta * self.prior_covariance.to(batch_covariance)
        score = isoscore_of_covariance(shrunk)
        loss = -score if self.direction == "increase" else score
        return TermOutput(loss, {"isoscore_star": score.detach()})
