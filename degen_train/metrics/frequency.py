"""Token-frequency views of the embedding matrix, and Gao et al.'s uniformly-negative-direction test."""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linprog
from scipy.stats import spearmanr
from torch import Tensor

from degen_train.metrics.isotropy import mean_pairwise_cosine


def norm_frequency_correlation(weights: Tensor, counts: Tensor) -> float:
    """Spearman ρ between ‖w_i‖ and log(1 + count_i) over the vocabulary (Gao et al. 2019: rare tokens drift)."""
    norms = weights.detach().double().norm(dim=1).cpu().numpy()
    return float(spearmanr(norms, np.log1p(counts.double().cpu().numpy())).statistic)


def rare_frequent_cosine(weights: Tensor, counts: Tensor, fraction: float = 0.2) -> dict[str, float]:
    """Mean pairwise cosine among the ``fraction`` most frequent and the ``fraction`` rarest seen tokens,
    and among tokens never seen in the corpus."""
    seen = torch.nonzero(counts > 0).flatten()
    order = seen[torch.argsort(counts[seen], descending=True)]
    size = max(2, int(len(order) * fraction))
    unseen = torch.nonzero(counts == 0).flatten()
    return {
        "frequent": mean_pairwise_cosine(weights[order[:size]]),
        "rare": mean_pairwise_cosine(weights[order[-size:]]),
        "unseen": mean_pairwise_cosine(weights[unseen]) if len(unseen) > 1 else float("nan"),
        "group_size": size,
        "unseen_count": len(unseen),
    }


def uniformly_negative_direction(hidden: Tensor) -> dict:
    """Is there a v with vᵀh_i < 0 for every hidden state h_i? Solves the LP h_iᵀv ≤ −1 for feasibility
    (any strict solution rescales to it); Gao et al. 2019, theorem 1: if so, rare-token embeddings that are
    pushed along −v lower their loss without bound (degeneration)."""
    matrix = hidden.detach().double().cpu().numpy()
    result = linprog(
        np.zeros(matrix.shape[1]),
        A_ub=matrix,
        b_ub=-np.ones(matrix.shape[0]),
        bounds=[(None, None)] * matrix.shape[1],
        method="highs",
    )
    return {"exists": bool(result.status == 0), "vectors": int(matrix.shape[0])}
