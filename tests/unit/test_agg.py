"""AGG against a hand-computed case of its gates and a transcription of the released criterion's gradients
(ysw1021/AGG, fairseq/criterions/cross_entropy_agg.py, language-modelling branch)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from degen_train.losses.agg import GatedLikelihoodTerm, agg_gates, gated_logits
from degen_train.losses.contract import TermContext


def test_hand_case_gates() -> None:
    """V = 6, id 0 special, counts over K = 10 steps (0, 10, 1, 0, 2, 5), α = 0.15:
    a = (special, 1.0, 0.1, 0.0, 0.2, 0.5) -> rare {2, 3}; g1 = a on them: (1, 1, 0.1, 0, 1, 1);
    the rare tokens' mean count (1 + 0) / 2 = 0.5 -> g2 = min(1, c / 0.5) on them: (1, 1, 1, 0, 1, 1)."""
    counts = torch.tensor([0, 10, 1, 0, 2, 5])
    rare, g1, g2 = agg_gates(counts, 10, alpha=0.15, special_ids=[0])
    assert rare.tolist() == [False, False, True, True, False, False]
    torch.testing.assert_close(g1, torch.tensor([1, 1, 0.1, 0, 1, 1]))
    torch.testing.assert_close(g2, torch.tensor([1, 1, 1, 0, 1, 1.0]))


def released_gradients(features, weight, target, word_count, itr, count_memory, alpha, nspecial):  # noqa: ANN001, ANN201
    """The released compute_loss (language modelling, no padding), step by step on (T, H) features: three logits,
    the features' from W.detach(), the frequent and rare targets' from features.detach() with the gates mixed in
    as g·z + (1−g)·z.detach(); the loss is the sum of the three NLL sums."""
    features = features.clone().requires_grad_(True)
    weight = weight.clone().requires_grad_(True)
    f1 = word_count / min(itr, count_memory)
    f1[:nspecial] = 1.0
    rare_group_mask = f1 < alpha
    rare_idx = rare_group_mask.float().nonzero().squeeze(-1)
    non_rare_idx = (1 - rare_group_mask.float()).nonzero().squeeze(-1)
    f1[non_rare_idx] = 1.0
    c_r_mean = word_count[rare_idx].mean()
    f2 = word_count / (c_r_mean + 1e-7)
    f2[:nspecial] = 1.0
    f2[non_rare_idx] = 1.0
    f2 = f2.clip(max=1.0)
    target_mask = (target.unsqueeze(1) == rare_idx).float().sum(1)
    rare_tgt = target_mask.nonzero().squeeze(-1)
    non_rare_tgt = (1.0 - target_mask).nonzero().squeeze(-1)
    gate1 = f1.expand(non_rare_tgt.size(0), weight.size(0)).clone()
    gate1[torch.arange(non_rare_tgt.size(0)), target[non_rare_tgt]] = 1.0
    gate2 = f2.expand(rare_tgt.size(0), weight.size(0)).clone()
    gate2[torch.arange(rare_tgt.size(0)), target[rare_tgt]] = 1.0
    logits_nr = F.linear(features.detach()[non_rare_tgt], weight)
    logits_nr = gate1 * logits_nr + (1 - gate1) * logits_nr.detach()
    logits_r = F.linear(features.detach()[rare_tgt], weight)
    logits_r = gate2 * logits_r + (1 - gate2) * logits_r.detach()
    logits_feature = F.linear(features, weight.detach())
    loss = (
        -F.log_softmax(logits_feature, -1).gather(1, target.unsqueeze(1)).sum()
        - F.log_softmax(logits_nr, -1).gather(1, target[non_rare_tgt].unsqueeze(1)).sum()
        - F.log_softmax(logits_r, -1).gather(1, target[rare_tgt].unsqueeze(1)).sum()
    )
    loss.backward()
    return features.grad, weight.grad


def test_gradients_match_the_released_criterion() -> None:
    torch.manual_seed(0)
    vocab, width, tokens, window = 40, 8, 30, 50
    word_count = torch.randint(0, 4, (vocab,)).float()
    word_count[torch.randperm(vocab)[:15]] = 0  # some never seen
    target = torch.randint(0, vocab, (tokens,))
    features, weight = torch.randn(tokens, width), torch.randn(vocab, width)
    expected_h, expected_w = released_gradients(features, weight, target, word_count.clone(), 20, window, 0.1, 4)

    hidden = features.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    rare, g1, g2 = agg_gates(word_count.long(), 20, alpha=0.1, special_ids=[0, 1, 2, 3])
    assert 0 < rare.sum() < vocab - 4 and rare[target].any() and not rare[target].all()
    F.cross_entropy(gated_logits(hidden, w, target, rare, g1, g2), target, reduction="sum").backward()
    torch.testing.assert_close(hidden.grad, expected_h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad, expected_w, rtol=1e-5, atol=1e-6)
    plain = weight.clone().requires_grad_(True)
    F.cross_entropy(features @ plain.T, target, reduction="sum").backward()
    assert not torch.allclose(w.grad, plain.grad)  # the gates did change the embedding's gradient


def make_term(window: int) -> GatedLikelihoodTerm:
    term = GatedLikelihoodTerm(alpha=0.5, window_steps=window)
    term.setup(TermContext(hidden_size=4, vocab_size=5, batch_size=1))
    return term


def test_the_window_holds_the_last_k_steps_and_resumes_exactly() -> None:
    term = make_term(window=2)
    for targets in ([1, 1, 2], [2, 3], [4, 4, 4]):
        term._count(torch.tensor(targets))
    assert term.counts.tolist() == [0, 0, 1, 1, 3]  # steps 2 and 3 only
    restored = make_term(window=2)
    restored.load_state_dict(term.state_dict())
    for t in (term, restored):
        t._count(torch.tensor([0]))
    assert restored.counts.tolist() == term.counts.tolist() == [1, 0, 0, 0, 3] and restored.steps == 4


def test_bad_options_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"objective.agg.alpha must be in \(0, 1\), got 1.5"):
        GatedLikelihoodTerm(alpha=1.5)
    with pytest.raises(ValueError, match=r"objective.agg.window_steps must be >= 1, got 0"):
        GatedLikelihoodTerm(window_steps=0)


def test_alpha_per_targets_means_the_same_at_any_batch() -> None:
    """Counts of a window of 4 steps of 100 targets each: per step (released literal) and per 100 targets agree;
    the same frequencies at 8× the batch keep the per-target rare set, while the per-step one shrinks."""
    counts = torch.tensor([0, 200, 2, 6, 40, 152])  # Σ = 400 targets in 4 steps
    per_step = agg_gates(counts, 4, alpha=1.0, special_ids=[0])
    per_target = agg_gates(counts, 4, alpha=1.0, special_ids=[0], per_targets=100)
    for a, b in zip(per_step, per_target, strict=True):
        torch.testing.assert_close(a, b)
    assert per_step[0].tolist() == [False, False, True, False, False, False]  # 2 / 4 steps = 0.5 < 1
    bigger = counts * 8  # 800 targets a step, the same frequencies
    assert agg_gates(bigger, 4, alpha=1.0, special_ids=[0], per_targets=100)[0].tolist() == per_step[0].tolist()
    assert not agg_gates(bigger, 4, alpha=1.0, special_ids=[0])[0].any()  # per step: 16 / 4 = 4, no rare token
