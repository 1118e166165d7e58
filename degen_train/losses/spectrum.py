"""Spectrum control (Wang et al., ICLR 2020): the output embedding as U·diag(σ)·Vᵀ, kept near-orthogonal, with its
singular values pulled to a prescribed slow-decaying profile. No code was released: this is our reading of the
paper, and the yaml names each choice."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
from annotated_types import Ge
from torch import Tensor, nn

from degen_train.losses.contract import LossTerm, TermContext, TermOutput, register_term
from degen_train.models.output import ForwardOutput

FACTORS = "spectral_factors"  # the submodule's name in the HF model (and in checkpoints)


class SpectralFactors(nn.Module):
    """W = U·diag(σ)·Vᵀ, U (V, d), σ (d,), V (d, d); built from the SVD of the matrix it replaces (same W)."""

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        left, singular, right_t = torch.linalg.svd(weight.detach().float(), full_matrices=False)
        self.left = nn.Parameter(left.to(weight.dtype))  # (V, d)
        self.singular = nn.Parameter(singular.to(weight.dtype))  # (d,)
        self.right = nn.Parameter(right_t.T.contiguous().to(weight.dtype))  # (d, d)

    def forward(self) -> Tensor:
        return (self.left * self.singular) @ self.right.T  # (V, d)


def embedding_weight_names(model: nn.Module) -> list[str]:
    """The state-dict names the factors stand for: the output matrix, and the input one when the two are tied."""
    modules = {id(m): name for name, m in model.named_modules()}
    names = [f"{modules[id(model.get_output_embeddings())]}.weight"]
    if getattr(model.config, "tie_word_embeddings", False):
        names.insert(0, f"{modules[id(model.get_input_embeddings())]}.weight")
    return names


def install_spectral_factors(model: nn.Module) -> SpectralFactors:
    """Replace the output (and tied input) embedding's weight by U·diag(σ)·Vᵀ, recomputed before each pass."""
    existing = getattr(model, FACTORS, None)
    if existing is not None:
        return existing
    names = embedding_weight_names(model)
    targets = [model.get_submodule(name.rsplit(".", 1)[0]) for name in names]
    factors = SpectralFactors(targets[-1].weight)
    for module in targets:
        del module.weight  # nn.Module drops the parameter: a computed tensor from now on
    model.add_module(FACTORS, factors)

    def refresh(*_: Any) -> None:
        weight = factors()
        for module in targets:
            module.weight = weight

    refresh()
    # Before the body's pass, which reads the input matrix; the model's own forward runs the body first, so the
    # output layer after it reads the same fresh matrix (one product per pass, not two).
    model.base_model.register_forward_pre_hook(refresh)
    return factors


def fold_spectral_state(weights: dict[str, Tensor], model: nn.Module) -> dict[str, Tensor]:
    """A state dict with U·diag(σ)·Vᵀ written back as the plain matrix (one tensor for tied names), so that
    ``AutoModel*`` loads it; unchanged without factors. Names relative to ``model`` (the HF model)."""
    prefix = f"{FACTORS}."
    if f"{prefix}left" not in weights:
        return weights
    left, singular, right = (weights[prefix + k] for k in ("left", "singular", "right"))
    matrix = ((left.float() * singular.float()) @ right.float().T).to(left.dtype)
    folded = {k: v for k, v in weights.items() if not k.startswith(prefix)}
    for name in embedding_weight_names(model):
        folded[name] = matrix
    return folded


def spectrum_penalties(factors: SpectralFactors, *, profile: str, decay: float) -> tuple[Tensor, Tensor]:
    """(orthogonality, spectrum): mean((UᵀU − I)²) + mean((VᵀV − I)²), and mean_k (σ_(k)/σ_(1) − p_k)² with σ sorted,
    σ_(1) not differentiated, p_k = k^(−decay) (polynomial) or exp(−decay·(k − 1)) (exponential)."""
    left, right, singular = factors.left.float(), factors.right.float(), factors.singular.float()
    eye = torch.eye(left.shape[1], device=left.device)
    orthogonality = ((left.T @ left - eye) ** 2).mean() + ((right.T @ right - eye) ** 2).mean()
    ordered = singular.abs().sort(descending=True).values  # (d,)
    ranks = torch.arange(1, ordered.numel() + 1, device=ordered.device, dtype=ordered.dtype)
    target = ranks ** (-decay) if profile == "polynomial" else torch.exp(-decay * (ranks - 1))
    spectrum = ((ordered / ordered[0].detach().clamp_min(1e-12) - target) ** 2).mean()
    return orthogonality, spectrum


@register_term("spectrum_control")
class SpectrumControlTerm(LossTerm):
    """R = λ_o·[mean((UᵀU − I)²) + mean((VᵀV − I)²)] + mean_k (σ_k/σ_1 − p_k)², the output embedding
    W = U·diag(σ)·Vᵀ, p_k = k^(−γ) or exp(−γ(k−1)); Wang et al. 2020 (spectrum control).

    The export folds the factors back into one matrix (``fold_spectral_state``), so ``AutoModel*`` loads it.

    Source: Wang et al. 2020, "Improving Neural Language Generation with Spectrum Control" (ICLR 2020); no
    released code: our reading of the paper, each choice named in docs/losses.md and the yaml.
    Needs: any model: its output embedding is trained as U·diag(σ)·Vᵀ (folded back at export).
    Example: ``degen-train recipe=spectrum_control model=gpt2_tiny``
    """

    paper_metrics = ("spectrum_gap",)

    def __init__(
        self,
        *,
        profile: Literal["polynomial", "exponential"] = "polynomial",
        decay: Annotated[float, Ge(0)] = 0.5,
        orthogonality_weight: Annotated[float, Ge(0)] = 1.0,
    ) -> None:
        super().__init__()
        self.profile, self.decay, self.orthogonality_weight = profile, decay, orthogonality_weight
        self._model: list[nn.Module] = []  # not a submodule: the factors belong to the HF model

    def setup(self, context: TermContext) -> None:
        if context.backbone is None:
            raise ValueError("spectrum_control needs the model (TermContext.backbone) to reparameterise its embedding")
        model = context.backbone.model
        if model.config.vocab_size != context.vocab_size:
            raise ValueError(
                f"spectrum_control factors the whole output matrix, whose {model.config.vocab_size} rows hold "
                f"{model.config.vocab_size - context.vocab_size} of padding (model.pad_vocab_to_multiple_of): their "
                f"rows would enter U and the spectrum; set model.pad_vocab_to_multiple_of=1"
            )
        self._model = [model]
        install_spectral_factors(model)

    def forward(self, output: ForwardOutput) -> TermOutput:
        factors = getattr(self._model[0], FACTORS)
        orthogonality, spectrum = spectrum_penalties(factors, profile=self.profile, decay=self.decay)
        loss = self.orthogonality_weight * orthogonality + spectrum
        return TermOutput(loss, {"orthogonality": orthogonality.detach(), "spectrum_gap": spectrum.detach()})
