"""Isotropy metrics and transforms against hand-computed cases and the naive forms."""

from __future__ import annotations

import math

import pytest
import torch

from degen_train.metrics.frequency import norm_frequency_correlation, rare_frequent_cosine, uniformly_negative_direction
from degen_train.metrics.isotropy import (
    VectorMoments,
    effective_rank,
    isoscore,
    mean_cosine_across_groups,
    mean_pairwise_cosine,
    outlier_dimensions,
    partition_isotropy,
    tacl_self_similarity,
    top_k_variance_share,
    word_self_similarity,
)
from degen_train.metrics.transforms import clip_outliers, fit_whitening, remove_top_directions

THREE = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def test_mean_pairwise_cosine_hand_case_and_naive_form() -> None:
    assert mean_pairwise_cosine(THREE) == pytest.approx(math.sqrt(2) / 3, rel=1e-12)
    x = torch.randn(500, 16) + 0.5
    unit = torch.nn.functional.normalize(x.double(), dim=-1)
    cos = unit @ unit.T
    naive = (cos.sum() - cos.diagonal().sum()) / (500 * 499)
    assert mean_pairwise_cosine(x) == pytest.approx(naive.item(), abs=1e-12)
    chunked = VectorMoments(16).update(x[:123]).update(x[123:])
    assert mean_pairwise_cosine(chunked) == pytest.approx(naive.item(), abs=1e-12)


def test_cosine_across_sentences_only() -> None:
    vectors = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    groups = torch.tensor([0, 0, 1, 1])
    # Cross pairs: (a,c) 0, (a,d) 1/√2, (b,c) 0, (b,d) 1/√2 -> mean √2/4.
    assert mean_cosine_across_groups(vectors, groups) == pytest.approx(math.sqrt(2) / 4, rel=1e-12)


def test_self_and_intra_sentence_similarity() -> None:
    result = tacl_self_similarity([THREE])
    assert result["tacl_self_similarity"] == pytest.approx(math.sqrt(2) / 3, rel=1e-12)
    # Mean (2/3, 2/3): cosines 1/√2, 1/√2, 1.
    assert result["intra_sentence_similarity"] == pytest.approx((math.sqrt(2) + 1) / 3, rel=1e-12)


def test_isoscore_matches_the_reference_package() -> None:
    from IsoScore.IsoScore import IsoScore as reference

    torch.manual_seed(0)
    anisotropic = torch.randn(2000, 8) * torch.tensor([5.0, 3, 1, 1, 0.5, 0.2, 0.1, 0.1])
    assert isoscore(anisotropic) == pytest.approx(float(reference(anisotropic.numpy())), abs=1e-4)
    assert isoscore(torch.randn(20000, 8)) > 0.95
    assert isoscore(torch.randn(2000, 1) * torch.ones(1, 8) + 1e-4 * torch.randn(2000, 8)) < 0.01


def test_partition_isotropy_hand_case() -> None:
    # WᵀW = diag(4, 1), c over ±e1, ±e2: Z(e1) = e² + 1 (max), Z(−e1) = e⁻² + 1 (min), Z(±e2) = 1 + e^{±1}.
    assert partition_isotropy(torch.tensor([[2.0, 0.0], [0.0, 1.0]])) == pytest.approx(
        (1 + math.e**-2) / (math.e**2 + 1), rel=1e-9
    )
    balanced = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    assert partition_isotropy(balanced) == pytest.approx(1.0)


def test_effective_rank_and_variance_share_hand_case() -> None:
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    # Singular values 1 : 2 -> p = (1/3, 2/3); variances 2/3 and 8/3.
    assert effective_rank(x) == pytest.approx(math.exp(-(1 / 3 * math.log(1 / 3) + 2 / 3 * math.log(2 / 3))))
    assert top_k_variance_share(x, 1) == pytest.approx(0.8)


def test_outlier_dimensions_hand_case() -> None:
    x = torch.ones(10, 20)
    x[:, 7] = 10.0
    result = outlier_dimensions(x)
    # Means: 19 ones and one 10 -> z = 9 · 0.95 / std, std = √(19·0.45² + 8.55²)/√19 ... > 3.
    assert result["dims"] == [7]
    assert result["norm_share"] == pytest.approx(100 / 119)


def test_frequency_views_and_negative_direction() -> None:
    weights = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, 4.0]])
    assert norm_frequency_correlation(weights, torch.tensor([1, 10, 100, 1000])) == pytest.approx(1.0)
    views = rare_frequent_cosine(
        torch.tensor([[1.0, 0], [1, 0.01], [0, 1], [0.01, 1], [1, 1]]), torch.tensor([100, 90, 2, 1, 0]), fraction=0.5
    )
    assert views["frequent"] > 0.99 and views["rare"] > 0.99 and views["unseen_count"] == 1
    assert uniformly_negative_direction(torch.eye(2))["exists"]
    assert not uniformly_negative_direction(torch.tensor([[1.0, 0], [-1, 0], [0, 1], [0, -1]]))["exists"]


def test_whitening_gives_identity_covariance() -> None:
    x = torch.randn(3000, 6, dtype=torch.float64) @ torch.randn(6, 6, dtype=torch.float64) + 3
    white = fit_whitening(x)(x)
    assert torch.allclose(white.mean(0), torch.zeros(6, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(torch.cov(white.T), torch.eye(6, dtype=torch.float64), atol=1e-6)


def test_fewer_vectors_than_dimensions_warns(caplog: pytest.LogCaptureFixture) -> None:
    fit_whitening(torch.randn(3, 8))
    assert "whitening fitted on 3 vectors of dimension 8" in caplog.text


def test_clipping_and_all_but_the_top() -> None:
    x = torch.randn(100, 4)
    assert (clip_outliers(x, [1, 3])[:, [1, 3]] == 0).all()
    stretched = torch.randn(2000, 4) * torch.tensor([10.0, 1, 1, 1])
    removed = remove_top_directions(stretched, 1)
    assert removed.var(0)[0] < 0.1 and removed.var(0)[1:].min() > 0.5


def test_partition_isotropy_ignores_eigenvector_signs() -> None:
    """I(X) = I(−X), and a hand-rotated basis gives the same value (the eigenvectors' signs are LAPACK's)."""
    torch.manual_seed(0)
    cloud = torch.randn(400, 6) * torch.tensor([3.0, 2.0, 1.0, 1.0, 0.5, 0.2])
    cloud = cloud - cloud.mean(0)
    assert partition_isotropy(-cloud) == pytest.approx(partition_isotropy(cloud), rel=1e-9)
    rotation, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    rotated = (cloud.double() @ rotation).float()
    assert partition_isotropy(rotated) == pytest.approx(partition_isotropy(cloud), rel=1e-4)
    # By hand: W = {(1, 0), (−1, 0), (0, 2)}: Z(±e1) = e + e⁻¹ + 1, Z(e2) = 2 + e², Z(−e2) = 2 + e⁻²: min/max.
    hand = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0]])
    values = [math.e + 1 / math.e + 1, 2 + math.e**2, 2 + math.e**-2]
    assert partition_isotropy(hand) == pytest.approx(min(values) / max(values), rel=1e-6)


def test_wic_threshold_is_fitted_on_one_split_and_scored_on_another() -> None:
    from degen_train.metrics.probes import WicItems, best_threshold, wic_scores

    # Hand case: cosines 0.1, 0.4, 0.6, 0.9 with labels F, F, T, T: the midpoint 0.5 separates them.
    threshold, accuracy = best_threshold(torch.tensor([0.1, 0.4, 0.6, 0.9]), torch.tensor([False, False, True, True]))
    assert threshold == pytest.approx(0.5) and accuracy == 1.0

    def split(angles: list[float], labels: list[bool]) -> tuple[WicItems, tuple[torch.Tensor, torch.Tensor]]:
        u = torch.tensor([[1.0, 0.0, 0.0]] * len(angles))
        v = torch.stack([torch.tensor([math.cos(a), math.sin(a), 0.0]) for a in angles])
        return WicItems([(["w"], ["w"])] * len(angles), [(0, 0)] * len(angles), labels), (u, v)

    fit = split([0.1, 0.2, 1.2, 1.4], [True, True, False, False])  # fitted threshold: cos halfway, ≈ 0.58
    scored_items, scored_vectors = split([0.3, 0.5, 1.0, 1.3], [True, False, False, False])
    result = wic_scores(scored_items, scored_vectors, fit=fit)
    raw = result["raw"]
    assert raw["threshold"] == pytest.approx((math.cos(0.2) + math.cos(1.2)) / 2)
    assert raw["accuracy"] == pytest.approx(0.75)  # t ≈ 0.67: cos 0.5 ≈ 0.88 is called T, wrongly
    assert raw["accuracy_threshold_fitted_on_scored_items"] == 1.0  # the optimistic number, named as such
    assert result["fitted_on"]["n"] == 4


def test_raw_and_centred_spectra_and_sentence_pair_geometry() -> None:
    from degen_train.metrics.isotropy import singular_spectrum
    from degen_train.metrics.probes import pair_cosines, sentence_geometry

    # A cone: every row = m + small noise. The raw spectrum is one big value (the mean direction).
    torch.manual_seed(0)
    cone = torch.tensor([5.0, 0.0, 0.0]) + 0.1 * torch.randn(500, 3)
    raw, centred = singular_spectrum(cone, centred=False), singular_spectrum(cone)
    assert torch.allclose(raw.double(), torch.linalg.svdvals(cone.double()), rtol=1e-4)
    assert torch.allclose(centred.double(), torch.linalg.svdvals((cone - cone.mean(0)).double()), rtol=1e-4)
    assert raw[0] / raw[1] > 20 and centred[0] / centred[1] < 2
    # Pairs by hand: (e1, e1) scored 5, (e1, e2) scored 0, (e2, -e2) scored 4.
    e1, e2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    vectors = torch.stack([e1, e1, e2, e1, e2, -e2])
    cosines = pair_cosines(vectors, [5.0, 0.0, 4.0])
    assert cosines["similar"].tolist() == [1.0, -1.0]  # the pairs scored >= 4, as given
    assert len(cosines["random"]) == 3  # first of one pair with the second of another, never its own
    geometry = sentence_geometry(vectors, cosines)
    assert geometry["similar_pairs_mean_cosine"] == 0.0 and geometry["similar_pairs"] == 2
    # ℓ_align over SimCSE's positives, scored above 4 (issue 54.5): (e2, -e2) scored exactly 4 is not one of them
    assert cosines["aligned"].tolist() == [1.0] and geometry["aligned_pairs"] == 1 and geometry["alignment"] == 0.0


def test_alignment_and_uniformity_on_a_hand_computed_case() -> None:
    """Wang & Isola 2020 (ICML), their released align_loss (α = 2) and uniform_loss (t = 2) on unit vectors.
    Pairs (e1, e1) and (e1, e2): ‖u − v‖² = 0 and 2, ℓ_align = 1. Three vectors at 0°, 90°, 180°: squared
    distances 2, 4, 2, ℓ_uniform = log((2·e⁻⁴ + e⁻⁸) / 3). Lengths do not count (the vectors are normalised)."""
    import math

    from degen_train.metrics.probes import (
        alignment,
        alignment_from_cosines,
        pair_cosines,
        sentence_geometry,
        uniformity,
    )

    e1, e2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert alignment(torch.stack([e1, 3 * e1]), torch.stack([e1, 2 * e2])) == pytest.approx(1.0)
    three = torch.stack([e1, 5 * e2, -e1])
    assert uniformity(three) == pytest.approx(math.log((2 * math.exp(-4) + math.exp(-8)) / 3))
    assert alignment_from_cosines(torch.tensor([1.0, 0.0])) == pytest.approx(1.0)  # the same pairs' cosines
    vectors = torch.stack([e1, e1, e2, e1, e2, -e2])  # pairs (e1, e1) scored 5, (e1, e2) 0, (e2, -e2) 4
    geometry = sentence_geometry(vectors, pair_cosines(vectors, [5.0, 0.0, 4.2]))  # 4.2: above 4, a positive
    assert geometry["alignment"] == pytest.approx((0 + 4) / 2) and geometry["uniformity"] == pytest.approx(
        uniformity(vectors))  # fmt: skip


def test_ethayarajhs_self_similarity_by_hand() -> None:
    """Ethayarajh 2019 §3.3: the mean cosine between one word's vectors in different contexts. Token 7 occurs in
    three sentences as (1, 0), (0, 1), (1, 0) (its second occurrence in the first sentence, (5, 5), is not another
    context): cosines 0, 1, 0 → 1/3. Token 8 occurs in one sentence only and is left out; TaCL's measure of the same
    vectors is within each sentence, another number."""
    sentences = [torch.tensor([[1.0, 0.0], [0.3, 0.1], [5.0, 5.0]]), torch.tensor([[0.0, 1.0]]),
                 torch.tensor([[1.0, 0.0]])]  # fmt: skip
    ids = [torch.tensor([7, 8, 7]), torch.tensor([7]), torch.tensor([7])]
    assert word_self_similarity(sentences, ids, fewest=2) == pytest.approx(1 / 3)
    assert math.isnan(word_self_similarity(sentences, ids, fewest=4))
