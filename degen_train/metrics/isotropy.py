"""Isotropy metrics over a matrix of vectors (M, d), batched, accumulated in float64.

Nothing here builds an M×M matrix: every metric is a function of running sums (Σx, Σx̂, XᵀX, ...)
gathered in chunks, so a million vectors cost O(M·d + d²) memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

CHUNK = 65_536


def _chunks(vectors: Tensor, size: int = CHUNK) -> Iterable[Tensor]:
    for start in range(0, vectors.shape[0], size):
        yield vectors[start : start + size].double()


@dataclass
class VectorMoments:
    """Running sums of a stream of vectors: count, Σx, Σx̂ (unit vectors) and XᵀX, in float64."""

    dim: int
    count: int = 0
    total: Tensor = field(init=False)
    unit_total: Tensor = field(init=False)
    gram: Tensor = field(init=False)
    nonzero: int = 0

    def __post_init__(self) -> None:
        self.total = torch.zeros(self.dim, dtype=torch.float64)
        self.unit_total = torch.zeros(self.dim, dtype=torch.float64)
        self.gram = torch.zeros(self.dim, self.dim, dtype=torch.float64)

    def update(self, vectors: Tensor) -> VectorMoments:
        """Add vectors (n, d), on their own device: the sums follow them there (a GPU run's monitor stays on it)."""
        if self.total.device != vectors.device:
            self.total, self.unit_total, self.gram = (t.to(vectors.device) for t in (self.total, self.unit_total,
                                                                                     self.gram))  # fmt: skip
        for chunk in _chunks(vectors.detach()):
            norms = chunk.norm(dim=1)
            self.count += chunk.shape[0]
            self.nonzero += int((norms > 0).sum())
            self.total += chunk.sum(0)
            self.unit_total += (chunk / norms.clamp_min(1e-300)[:, None]).sum(0)
            self.gram += chunk.T @ chunk
        return self

    @classmethod
    def of(cls, vectors: Tensor) -> VectorMoments:
        return cls(vectors.shape[1]).update(vectors)

    @property
    def mean(self) -> Tensor:
        return self.total / max(self.count, 1)

    @property
    def covariance(self) -> Tensor:
        """Unbiased covariance (d, d): (XᵀX − M·μμᵀ) / (M − 1)."""
        mean = self.mean
        return (self.gram - self.count * torch.outer(mean, mean)) / max(self.count - 1, 1)


def mean_pairwise_cosine(vectors: Tensor | VectorMoments) -> float:
    """(1/(M(M−1))) Σ_{i≠j} cos(x_i, x_j) = (‖Σ_i x̂_i‖² − M) / (M(M−1)); Ethayarajh 2019's anisotropy baseline."""
    moments = vectors if isinstance(vectors, VectorMoments) else VectorMoments.of(vectors)
    m = moments.nonzero
    if m < 2:
        return float("nan")
    return float((moments.unit_total @ moments.unit_total - m) / (m * (m - 1)))


def mean_cosine_across_groups(vectors: Tensor, groups: Tensor) -> float:
    """Mean cos(x_i, x_j) over pairs from different groups (sentences): (‖S‖² − Σ_g ‖S_g‖²) / (M² − Σ_g m_g²),
    S = Σ x̂; Ethayarajh 2019 (random words from different contexts)."""
    unit = torch.nn.functional.normalize(vectors.double(), dim=-1)
    labels, inverse = torch.unique(groups, return_inverse=True)
    per_group = unit.new_zeros(len(labels), unit.shape[1]).index_add_(0, inverse.to(unit.device), unit)
    sizes = torch.bincount(inverse, minlength=len(labels)).double()
    total = unit.sum(0)
    pairs = unit.shape[0] ** 2 - float((sizes**2).sum())
    if pairs <= 0:
        return float("nan")
    return float((total @ total - (per_group * per_group).sum()) / pairs)


def tacl_self_similarity(sequences: Iterable[Tensor]) -> dict[str, float]:
    """TaCL's self-similarity, the mean over sequences of s(x) = (1/(n(n−1))) Σ_{i≠j} cos(h_i, h_j) within a sequence
    (Su et al. 2021, "TaCL", fig. 2; its measure of token representations within one sentence), and the
    intra-sentence similarity (1/n) Σ_i cos(h_i, h̄) with h̄ the sequence mean (Ethayarajh 2019, §3.3). Not
    Ethayarajh's self-similarity, which is across contexts of one word (``word_self_similarity``)."""
    selfs, intras = [], []
    for tokens in sequences:
        if tokens.shape[0] < 2:
            continue
        unit = torch.nn.functional.normalize(tokens.double(), dim=-1)
        total = unit.sum(0)
        n = unit.shape[0]
        selfs.append(float((total @ total - n) / (n * (n - 1))))
        centre = tokens.double().mean(0)
        intras.append(float(torch.nn.functional.cosine_similarity(tokens.double(), centre[None], dim=-1).mean()))
    return {
        "tacl_self_similarity": float(np.mean(selfs)) if selfs else float("nan"),
        "intra_sentence_similarity": float(np.mean(intras)) if intras else float("nan"),
    }


FEWEST_CONTEXTS = 5  # Ethayarajh 2019 §3.3: words that occur in at least 5 contexts


def word_self_similarity(sequences: Sequence[Tensor], ids: Sequence[Tensor], *,
                         fewest: int = FEWEST_CONTEXTS) -> float:  # fmt: skip
    """Ethayarajh's self-similarity (2019, "How Contextual are Contextualized Word Representations?", §3.3):
    SelfSim(w) = (1/(n² − n)) Σ_j Σ_{k≠j} cos(f(s_j, i_j), f(s_k, i_k)) over the n contexts (sentences) of the token
    w, one occurrence per sentence (its first), averaged over the tokens that occur in at least ``fewest``
    sentences; NaN where none does. Computed per token as (‖Σ û‖² − n) / (n(n − 1)) from the unit vectors' sum."""
    firsts, vectors = [], []
    for tokens, hidden in zip(ids, sequences, strict=True):
        seen: dict[int, int] = {}
        for position, token in enumerate(tokens.tolist()):
            seen.setdefault(token, position)
        firsts.extend(seen)
        vectors.append(hidden[list(seen.values())])
    if not vectors:
        return float("nan")
    unit = torch.nn.functional.normalize(torch.cat(vectors).double(), dim=-1)
    labels, inverse = torch.unique(torch.tensor(firsts), return_inverse=True)
    sums = unit.new_zeros(len(labels), unit.shape[1]).index_add_(0, inverse.to(unit.device), unit)
    counts = torch.bincount(inverse, minlength=len(labels)).double().to(unit.device)
    kept = counts >= fewest
    if not kept.any():
        return float("nan")
    n = counts[kept]
    return float((((sums[kept] ** 2).sum(1) - n) / (n * (n - 1))).mean())


def _eigenvalues(moments: VectorMoments) -> Tensor:
    return torch.linalg.eigvalsh(moments.covariance).clamp_min(0).flip(0)  # descending


def isoscore(vectors: Tensor | VectorMoments) -> float:
    """IsoScore = ((n − δ²(n − √n))² − n) / (n(n − 1)), δ = ‖√n·λ/‖λ‖ − 1‖ / √(2(n − √n)), λ the covariance
    spectrum; Rudman et al. 2022 (IsoScore). 1 = isotropic, 0 = one direction."""
    moments = vectors if isinstance(vectors, VectorMoments) else VectorMoments.of(vectors)
    spectrum = _eigenvalues(moments)
    n = spectrum.numel()
    normalised = spectrum * math.sqrt(n) / spectrum.norm()
    defect = (normalised - 1).norm() / math.sqrt(2 * (n - math.sqrt(n)))
    return float(((n - defect**2 * (n - math.sqrt(n))) ** 2 - n) / (n * (n - 1)))


def partition_isotropy(vectors: Tensor, moments: VectorMoments | None = None) -> float:
    """I(W) = min_c Z(c) / max_c Z(c), Z(c) = Σ_i exp(cᵀw_i), c over ± the eigenvectors of WᵀW;
    Mu & Viswanath 2018 (all-but-the-top). 1 = isotropic.

    Both signs of every eigenvector enter: LAPACK returns each with an arbitrary sign, and without −c the
    value would depend on it (I(W) ≠ I(−W))."""
    moments = moments or VectorMoments.of(vectors)
    _, basis = torch.linalg.eigh(moments.gram)  # (d, d), columns are unit directions
    directions = torch.cat([basis, -basis], dim=1)  # (d, 2d)
    log_z = None
    for chunk in _chunks(vectors.detach().to(directions.device)):
        part = torch.logsumexp(chunk @ directions, dim=0)  # (d,)
        log_z = part if log_z is None else torch.logaddexp(log_z, part)
    assert log_z is not None
    return float(torch.exp(log_z.min() - log_z.max()))


def effective_rank(vectors: Tensor | VectorMoments) -> float:
    """exp(H(p)), p_k = σ_k / Σσ over the singular values of the centred matrix; Roy & Vetterli 2007."""
    moments = vectors if isinstance(vectors, VectorMoments) else VectorMoments.of(vectors)
    singular = _eigenvalues(moments).sqrt()
    p = singular / singular.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def top_k_variance_share(vectors: Tensor | VectorMoments, k: int = 1) -> float:
    """Σ_{top k} λ / Σ λ: the share of variance on the k leading principal directions (centred)."""
    moments = vectors if isinstance(vectors, VectorMoments) else VectorMoments.of(vectors)
    spectrum = _eigenvalues(moments)
    return float(spectrum[:k].sum() / spectrum.sum())


def singular_spectrum(vectors: Tensor | VectorMoments, *, centred: bool = True) -> Tensor:
    """Singular values of the matrix, descending: centred (√ of the scatter's eigenvalues) or raw (√ of WᵀW's).

    The raw spectrum of a cone is dominated by its mean direction; the centred one shows the rest."""
    moments = vectors if isinstance(vectors, VectorMoments) else VectorMoments.of(vectors)
    if not centred:
        return torch.linalg.eigvalsh(moments.gram).flip(0).clamp_min(0).sqrt()
    return (_eigenvalues(moments) * max(moments.count - 1, 1)).sqrt()


def outlier_dimensions(vectors: Tensor | VectorMoments, threshold: float = 3.0) -> dict:
    """Dimensions whose mean value lies more than ``threshold`` standard deviations from the mean of all
    dimensions' means, and their share of E‖x‖²; Luo et al. 2021 (positional artefacts / outliers),
    as defined by Kovaleva et al. 2021."""
    moments = vectors if isinstance(vectors, VectorMoments) else VectorMoments.of(vectors)
    means = moments.mean
    z = (means - means.mean()) / means.std().clamp_min(1e-12)
    dims = torch.nonzero(z.abs() > threshold).flatten()
    second_moment = moments.gram.diagonal() / max(moments.count, 1)  # E[x_d²]
    share = float(second_moment[dims].sum() / second_moment.sum()) if len(dims) else 0.0
    return {"dims": dims.tolist(), "z_scores": z[dims].tolist(), "norm_share": share, "means": means.tolist()}
