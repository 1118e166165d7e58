"""Post-hoc transforms of representations: whitening, outlier clipping, all-but-the-top."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from degen_train.metrics.isotropy import VectorMoments, outlier_dimensions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Whitening:
    """x ↦ (x − μ) W with W = U·diag(1/√λ) from Σ = UΛUᵀ (Su et al. 2021, whitening-BERT)."""

    mean: Tensor
    matrix: Tensor

    def __call__(self, vectors: Tensor) -> Tensor:
        return ((vectors.double() - self.mean) @ self.matrix).to(vectors.dtype)


def fit_whitening(vectors: Tensor, *, eps: float = 1e-9) -> Whitening:
    """Fit mean and covariance on ``vectors``; warns when there are fewer vectors than dimensions."""
    count, dim = vectors.shape
    if count < dim:
        log.warning(
            "whitening fitted on %d vectors of dimension %d: the covariance is singular, the "
            "zero-variance directions are left at 0",
            count,
            dim,
        )
    moments = VectorMoments.of(vectors)
    values, vectors_u = torch.linalg.eigh(moments.covariance)
    scale = torch.where(values > eps, values.clamp_min(eps).rsqrt(), torch.zeros_like(values))
    return Whitening(moments.mean, vectors_u * scale[None, :])


def clip_outliers(vectors: Tensor, dims: list[int]) -> Tensor:
    """Zero the given dimensions (Luo et al. 2021: removing outlier dimensions)."""
    clipped = vectors.clone()
    if dims:
        clipped[:, dims] = 0
    return clipped


def clip_detected_outliers(vectors: Tensor, threshold: float = 3.0) -> tuple[Tensor, list[int]]:
    """Detect outlier dimensions on ``vectors`` themselves, then zero them."""
    dims = outlier_dimensions(vectors, threshold)["dims"]
    return clip_outliers(vectors, dims), dims


def remove_top_directions(vectors: Tensor, k: int = 1) -> Tensor:
    """x ↦ x − μ − Σ_{top k} (uᵀ(x − μ)) u over the leading principal directions; Mu & Viswanath 2018."""
    moments = VectorMoments.of(vectors)
    _, directions = torch.linalg.eigh(moments.covariance)
    top = directions[:, -k:] if k > 0 else directions[:, :0]  # (d, k)
    centred = vectors.double() - moments.mean
    return (centred - (centred @ top) @ top.T).to(vectors.dtype)
