"""Outlier measures against transcriptions of the released code on identical tensors:
Bondarenko et al. 2023 (Qualcomm-AI-research/outlier-free-transformers: utils.kurtosis, validate_mlm.py's ∞-norm),
Gu et al. 2024 (sail-sg/Attention-Sink: eval_sink_open_source.compute_attention_sink), Sun et al. 2024 (§2's rule)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from degen_train.metrics.outliers import (
    attention_entropy,
    attention_sink_rate,
    massive_activations,
    outlier_summary,
    sequence_inf_norm,
    sequence_kurtosis,
)


def released_kurtosis(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """outlier-free-transformers, transformers_language/utils.py, on x viewed as (B, T·d) as validate_mlm.py does."""
    x = x.view(x.size(0), -1)
    mu = x.mean(dim=1, keepdims=True)
    s = x.std(dim=1)
    mu4 = ((x - mu) ** 4.0).mean(dim=1)
    return mu4 / (s**4.0 + eps)


def released_sink_metric(attention_scores: torch.Tensor, epsilon: float) -> torch.Tensor:
    """sail-sg/Attention-Sink compute_attention_sink on (samples, layers, heads, T, T): the rate per key position."""
    n, layers, heads, t1, t2 = attention_scores.shape
    ratios = torch.arange(t1, 0, -1)[None, None, None, :].expand(n, layers, heads, t1, t2).to(attention_scores)
    importance = (attention_scores / ratios).sum(dim=-2)
    return (importance > epsilon).to(torch.float).mean(dim=(0, 1, 2)) * 100


def test_kurtosis_and_inf_norm_equal_the_released_code() -> None:
    hidden = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    hidden[1, 2, 5] = 40.0  # one outlier: a heavy tail in sequence 1 only
    torch.testing.assert_close(sequence_kurtosis(hidden), released_kurtosis(hidden))
    expected = hidden.view(3, -1).norm(dim=1, p=np.inf)
    torch.testing.assert_close(sequence_inf_norm(hidden), expected)
    assert sequence_kurtosis(hidden)[1] > 50 > sequence_kurtosis(hidden)[0]  # a Gaussian's kurtosis is 3


def test_the_sink_rate_equals_the_released_metric_at_the_first_token() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 4, 32, 32, generator=generator, dtype=torch.float64)
    logits[:, :, :2, :, 0] += 5.0  # heads 0 and 1 of every layer dump their attention on the first token
    causal = torch.full((32, 32), float("-inf"), dtype=torch.float64).triu(1)
    scores = (logits + causal).softmax(dim=-1)
    released = released_sink_metric(scores, epsilon=0.3)[0]
    ours = attention_sink_rate([scores[:, layer] for layer in range(3)], epsilon=0.3)
    assert ours == pytest.approx(float(released))
    assert ours == 50.0  # the two sinking heads of four (at 32 tokens a causal head's own share is ~0.13)


def test_massive_activations_follow_sun_et_al_rule() -> None:
    hidden = torch.full((1, 5, 8), 0.05)
    hidden[0, 0, 3] = 120.0  # > 100 and > 1000 × median 0.05: massive
    hidden[0, 1, 2] = 99.0  # under 100: not massive
    result = massive_activations(hidden)
    assert result == {"count": 1, "dims": [3], "token_positions": [0]}
    assert massive_activations(torch.full((1, 4, 4), 150.0))["count"] == 0  # large but not 1000 × the median


def test_attention_entropy_is_zero_for_a_one_key_head_and_log_t_for_a_uniform_one() -> None:
    one_key = torch.zeros(1, 1, 4, 4)
    one_key[..., 0] = 1.0
    uniform = torch.full((1, 1, 4, 4), 0.25)
    assert float(attention_entropy(one_key)[0]) == pytest.approx(0.0, abs=1e-12)
    assert float(attention_entropy(uniform)[0]) == pytest.approx(np.log(4))


def test_the_summary_reports_layers_maxima_and_the_sink_rate() -> None:
    generator = torch.Generator().manual_seed(2)
    sequences = []
    for length in (5, 9):  # unpadded sequences of different lengths
        hidden = [torch.randn(1, length, 8, generator=generator) for _ in range(3)]
        attention = [torch.randn(1, 2, length, length, generator=generator).softmax(-1) for _ in range(2)]
        sequences.append((hidden, attention))
    summary = outlier_summary(sequences)
    assert len(summary["layers"]) == 3 and "attention_entropy_per_head" in summary["layers"][1]
    kurtoses = [float(sequence_kurtosis(seq[0][2])[0]) for seq in sequences]
    assert summary["layers"][2]["kurtosis"] == pytest.approx(sum(kurtoses) / 2)
    assert summary["max_kurtosis"] == max(layer["kurtosis"] for layer in summary["layers"][1:])
    assert 0 <= summary["attention_sink_rate"] <= 100
