"""Are a model's outlier dimensions positional artefacts? Luo et al. 2021 ("Positional artefacts propagate through
masked language model embeddings") trace BERT's outlier dimensions to its position embeddings. Two readings of
that claim on the tokens a model was given:

- the share of each hidden dimension's variance that the token's position explains (the correlation ratio η²),
  for the outlier dimensions beside the median over all dimensions;
- whether the position-embedding matrix has outlier dimensions of its own (the same 3σ rule, over its rows) and
  which of them the hidden states' outlier dimensions share.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from degen_train.metrics.isotropy import outlier_dimensions
from degen_train.models.backbone import position_tables


def position_variance_share(states: list[Tensor]) -> Tensor:
    """η²_d = Σ_p n_p (μ_p,d − μ_d)² / Σ_i (x_i,d − μ_d)²: per dimension d, the share of its variance over all tokens
    explained by the token's position p in its sequence (the correlation ratio; Luo et al. 2021's positional
    artefacts read per dimension). ``states``: one (T, H) tensor per sequence, row t at position t. Returns (H,)."""
    rows = torch.cat(states).double()  # (N, H)
    positions = torch.cat([torch.arange(len(s)) for s in states])  # (N,)
    overall = rows.mean(0)  # (H,)
    total = ((rows - overall) ** 2).sum(0)  # (H,)
    count = torch.bincount(positions).double()  # (P,)
    sums = torch.zeros(len(count), rows.shape[1], dtype=torch.float64).index_add_(0, positions, rows)  # (P, H)
    present = count > 0
    means = sums[present] / count[present, None]
    between = (count[present, None] * (means - overall) ** 2).sum(0)  # (H,)
    return between / total.clamp_min(1e-300)


def absolute_position_embeddings(model: nn.Module) -> Tensor | None:
    """The learned absolute position-embedding matrix (max positions, H) of an HF model (BERT's
    ``embeddings.position_embeddings``, GPT-2's ``wpe``), None for a model without one (rotary, ALiBi)."""
    tables = position_tables(model)
    return tables[0].weight.detach() if tables else None


def positional_artefacts(states: list[Tensor], outlier_dims: list[int], position_embeddings: Tensor | None,
                         *, threshold: float = 3.0) -> dict[str, Any]:  # fmt: skip
    """The two readings of the module docstring for a layer's ``states`` and its ``outlier_dims``."""
    share = position_variance_share(states)
    result: dict[str, Any] = {
        "outlier_dims": list(outlier_dims),
        "position_share_of_outlier_dims": {str(d): float(share[d]) for d in outlier_dims},
        "position_share_median_over_dims": float(share.median()),
        "position_embedding_outlier_dims": None,
        "outlier_dims_shared_with_position_embeddings": None,
    }
    if position_embeddings is not None and position_embeddings.shape[1] == share.shape[0]:
        longest = max(len(s) for s in states)  # the positions the states were read at
        dims = outlier_dimensions(position_embeddings[:longest].double(), threshold)["dims"]
        result["position_embedding_outlier_dims"] = dims
        result["outlier_dims_shared_with_position_embeddings"] = sorted(set(dims) & set(outlier_dims))
    return result
