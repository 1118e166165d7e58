"""Token-level unlikelihood against a hand-computed case and a loop transcription of the paper's definition."""

from __future__ import annotations

import math

import pytest
import torch

from degen_train.regularizers.unlikelihood import context_candidates, unlikelihood_sum


def test_candidates_are_the_distinct_earlier_context_tokens_but_the_target() -> None:
    """ids a b a c (labels: the next ids, the last none). At t=2 (input a, target c) the context is a, b, a:
    candidates {a, b} once each (a at its first position 0); at t=1 (target a) only b."""
    ids = torch.tensor([[1, 2, 1, 3]])
    labels = torch.tensor([[2, 1, 3, -100]])
    candidates = context_candidates(ids, torch.ones_like(ids, dtype=torch.bool), labels)[0]
    assert candidates.tolist() == [
        [True, False, False, False],  # t=0: context {a}, target b -> a
        [False, True, False, False],  # t=1: context {a, b}, target a -> b
        [True, True, False, False],  # t=2: context {a, b, a}, target c -> a (first position), b
        [False, False, False, False],  # t=3: no target
    ]


def test_hand_case_value() -> None:
    """One prediction, uniform over V = 4 with one candidate: −log(1 − 1/4) per prediction."""
    ids = torch.tensor([[1, 2]])
    labels = torch.tensor([[2, -100]])
    total, count = unlikelihood_sum(torch.zeros(1, 4), ids, torch.ones(1, 2, dtype=torch.bool), labels)
    assert total.item() == pytest.approx(-math.log(0.75)) and count.item() == 1


def paper_form(logits: torch.Tensor, ids: list[list[int]], lengths: list[int]) -> torch.Tensor:
    """Welleck et al. 2020, eq. 4 as loops: for every predicted position, the set of earlier context tokens
    without the target, each −log(max(1 − p, 1e-5))."""
    total, row = torch.zeros(()), 0
    for sequence, length in zip(ids, lengths, strict=True):
        for t in range(length - 1):
            probs = logits[row].softmax(-1)
            for token in set(sequence[: t + 1]) - {sequence[t + 1]}:
                total = total - torch.log(torch.clamp(1 - probs[token], min=1e-5))
            row += 1
    return total


def test_matches_the_paper_with_padding_and_repeats() -> None:
    torch.manual_seed(0)
    ids = [[3, 4, 3, 3, 5, 4, 0], [2, 2, 6, 0, 0, 0, 0]]
    lengths = [7, 3]
    tensor = torch.tensor(ids)
    mask = torch.tensor([[1] * n + [0] * (7 - n) for n in lengths]).bool()
    labels = torch.full_like(tensor, -100)
    labels[:, :-1] = torch.where(mask[:, 1:], tensor[:, 1:], labels[:, 1:])
    logits = torch.randn(int((labels != -100).sum()), 8) * 3
    total, count = unlikelihood_sum(logits, tensor, mask, labels)
    torch.testing.assert_close(total, paper_form(logits, ids, lengths), rtol=1e-5, atol=1e-5)
    assert count.item() == 6 + 2
