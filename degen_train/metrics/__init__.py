"""Degeneration instruments: isotropy metrics (pure functions), transforms, and STS/WiC probes."""

from degen_train.metrics.isotropy import (  # noqa: F401
    VectorMoments,
    effective_rank,
    isoscore,
    mean_cosine_across_groups,
    mean_pairwise_cosine,
    outlier_dimensions,
    partition_isotropy,
    self_similarity,
    top_k_variance_share,
)
