"""Token-level unlikelihood against a hand-computed case and a loop transcription of the paper's definition."""

from __future__ import annotations

import math

import pytest
import torch

from degen_train.losses.unlikelihood import context_candidates, unlikelihood_sum


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


def released_criterion(lprobs: torch.Tensor, target: torch.Tensor, padding_idx: int = 1) -> torch.Tensor:
    """unlikelihood_training's custom/candidate_penalty_ce_loss.py (candidate_type prev_context), transcribed for
    one sequence: lprobs (T, V), target (T,). Row t's candidates are the targets at j < t and padding_idx (the
    triangle trick below relies on fairseq's padding_idx = 1: 1·1 = 1), with the row's own target replaced."""
    length = target.shape[0]
    grid = target.unsqueeze(0).expand(length, length)
    upper = (grid.tril(-1) + padding_idx) * (grid.tril(-1) + padding_idx).triu()
    grid = grid.tril(-1) + upper
    grid = grid.masked_fill(grid == target.unsqueeze(1), padding_idx)
    negatives = torch.zeros_like(lprobs).scatter_(1, grid, 1)
    return (-torch.log(torch.clamp(1.0 - lprobs.exp(), min=1e-5)) * negatives).sum()


def test_released_candidates_equal_the_released_criterion_sequence_by_sequence() -> None:
    """Two sequences (one padded), pad id 1 as fairseq's dictionary, no target equal to it: our released mode is
    the released criterion applied to each sequence's targets (its flattened batch would mix sequences)."""
    torch.manual_seed(1)
    ids = torch.tensor([[3, 4, 3, 3, 5, 4, 2], [2, 2, 6, 7, 0, 0, 0]])
    lengths = [7, 4]
    mask = torch.tensor([[1] * n + [0] * (7 - n) for n in lengths]).bool()
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = torch.where(mask[:, 1:], ids[:, 1:], labels[:, 1:])
    logits = torch.randn(int((labels != -100).sum()), 9) * 3
    total, count = unlikelihood_sum(logits, ids, mask, labels, candidates="released", always=1)
    lprobs, expected, row = logits.log_softmax(-1), torch.zeros(()), 0
    for b, n in enumerate(lengths):
        expected = expected + released_criterion(lprobs[row : row + n - 1], labels[b, : n - 1])
        row += n - 1
    torch.testing.assert_close(total, expected, rtol=1e-5, atol=1e-5)
    assert count.item() == 6 + 3


def test_released_and_paper_candidates_differ_where_the_paper_counts_the_first_input() -> None:
    """ids a b c, targets b c: at t=0 the paper's C = {a}, the released one {} (no earlier target); at t=1 the
    paper's {a, b}, the released {b}. Uniform logits over V = 4, no padding id: paper 3·−log(3/4), released 1·."""
    ids, labels = torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3, -100]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    paper, _ = unlikelihood_sum(torch.zeros(2, 4), ids, mask, labels, candidates="paper")
    released, _ = unlikelihood_sum(torch.zeros(2, 4), ids, mask, labels, candidates="released")
    assert paper.item() == pytest.approx(-3 * math.log(0.75))
    assert released.item() == pytest.approx(-math.log(0.75))
    with_pad, _ = unlikelihood_sum(torch.zeros(2, 4), ids, mask, labels, candidates="released", always=0)
    assert with_pad.item() == pytest.approx(-3 * math.log(0.75))  # the padding id at both predictions
    never_its_target, _ = unlikelihood_sum(torch.zeros(2, 4), ids, mask, labels, candidates="released", always=2)
    # t=0: 2 is the target, so not added; t=1: 2 is already an earlier target, so counted once, not twice.
    assert never_its_target.item() == pytest.approx(-math.log(0.75))


def test_an_unknown_candidate_set_names_the_choices() -> None:
    from degen_train.losses.unlikelihood import TokenUnlikelihoodTerm

    with pytest.raises(ValueError, match=r"regularizer.unlikelihood.candidates='prev' is not one of released, paper"):
        TokenUnlikelihoodTerm(candidates="prev")
