"""SimCTG's contrastive loss against a hand-computed case and a loop transcription of its released formula."""

from __future__ import annotations

import pytest
import torch

from degen_train.losses.simctg import TokenContrastiveDecoderTerm, off_diagonal_pairs, simctg_loss_sum
from tests.helpers import forward_output


def test_hand_case_two_orthogonal_and_one_opposite_state() -> None:
    """States e1, e2, −e1: cosines s12 = 0, s13 = −1, s23 = 0; ρ = 0.5 gives max(0, 0.5 − 1 + s_ij):
    0 for every pair (all s_ij ≤ 0 < 0.5), and with ρ = 1.5 the pairs cost 0.5, 0.5, 0, 0.5, 0.5, 0."""
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]])
    pairs = off_diagonal_pairs(torch.ones(1, 3, dtype=torch.bool))
    total, count = simctg_loss_sum(hidden, pairs, margin=0.5)
    assert total.item() == pytest.approx(0.0) and count.item() == 6
    total, count = simctg_loss_sum(hidden, pairs, margin=1.5)
    assert total.item() == pytest.approx(2.0, abs=1e-6) and count.item() == 6


def released_form(hidden: torch.Tensor, valid_len: list[int], margin: float) -> torch.Tensor:
    """Su et al.'s lossfunction.py as loops: score matrix of normalised states, margin − (s_ii − s_ij),
    relu, mask of the valid i≠j pairs, sum over the batch / number of such pairs."""
    total, pairs = torch.zeros(()), 0
    for b, length in enumerate(valid_len):
        rep = hidden[b] / hidden[b].norm(dim=-1, keepdim=True)
        score = rep @ rep.T
        for i in range(length):
            for j in range(length):
                if i != j:
                    total = total + torch.relu(margin - (score[i, i] - score[i, j]))
                    pairs += 1
    return total / pairs


def test_matches_the_released_formula_with_padding() -> None:
    torch.manual_seed(0)
    hidden = torch.randn(3, 7, 16)
    lengths = [7, 4, 2]
    mask = torch.tensor([[1] * n + [0] * (7 - n) for n in lengths])
    term = TokenContrastiveDecoderTerm(margin=0.5)
    out = forward_output(hidden_states=hidden, attention_mask=mask, input_ids=torch.ones(3, 7, dtype=torch.long))
    expected = released_form(hidden, lengths, 0.5)
    result = term(out)
    torch.testing.assert_close(result.loss, expected, rtol=1e-5, atol=1e-6)
    assert result.metrics["pairs"].item() == 7 * 6 + 4 * 3 + 2 * 1


def released_contrastive_loss(hidden: torch.Tensor, ids: torch.Tensor, pad: int, margin: float) -> torch.Tensor:
    """yxuansu/SimCTG simctg/lossfunction.py, SimCTGLoss.contrastive_loss with build_mask_matrix, transcribed as
    loops: n = the positions not holding the pad id; the pairs i ≠ j among the first n positions; a row's sum
    counts only if its own id is not the pad id; the batch's sum over the number of such pairs."""
    total, pairs = torch.zeros(()), 0
    for b in range(ids.shape[0]):
        rep = hidden[b] / hidden[b].norm(dim=-1, keepdim=True)
        score = rep @ rep.T
        valid_len = int((ids[b] != pad).sum())
        for i in range(valid_len):
            for j in range(valid_len):
                if i != j:
                    pairs += 1
                    if ids[b, i] != pad:
                        total = total + torch.relu(margin - (score[i, i] - score[i, j]))
    return total / pairs


def test_pad_token_masking_equals_the_released_code_with_a_pad_id_inside() -> None:
    """mask_from=pad_token with the pad id inside a sequence (GPT-2's <|endoftext|> separating documents): the
    released mask is built by length, so row 2 leaves the numerator, the last position leaves the pairs, and the
    denominator keeps n(n − 1) = 12. Masking by id instead (the earlier reading) gave another value."""
    torch.manual_seed(1)
    hidden = torch.randn(2, 5, 8)
    ids = torch.tensor([[5, 6, 0, 7, 8], [5, 6, 7, 0, 0]])  # 0 = pad id: inside row 0, trailing in row 1
    mask = torch.ones(2, 5, dtype=torch.long)
    term = TokenContrastiveDecoderTerm(mask_from="pad_token", margin=1.5)  # every pair costs something
    term.pad_id = 0
    result = term(forward_output(hidden_states=hidden, attention_mask=mask, input_ids=ids))
    expected = released_contrastive_loss(hidden, ids, 0, 1.5)
    torch.testing.assert_close(result.loss, expected, rtol=1e-5, atol=1e-6)
    assert result.metrics["pairs"].item() == 4 * 3 + 3 * 2
    # Every pad-id position left out of rows and pairs (the earlier reading): another value.
    by_id = released_form(torch.stack([hidden[0, [0, 1, 3, 4, 2]], hidden[1]]), [4, 3], 1.5)
    assert abs(result.loss.item() - by_id.item()) > 1e-3
    batch = {"input_ids": ids, "attention_mask": mask}
    assert term.count("simctg_pairs", batch).item() == 4 * 3 + 3 * 2  # what accumulation divides by


def test_bad_options_name_the_choices() -> None:
    with pytest.raises(ValueError, match=r"regularizer.simctg.mask_from='pads' is not one of attention, pad_token"):
        TokenContrastiveDecoderTerm(mask_from="pads")
    with pytest.raises(ValueError, match=r"regularizer.simctg.margin must be in \[0, 2\], got 3"):
        TokenContrastiveDecoderTerm(margin=3)


def test_float32_and_an_exact_pair_count_under_bf16_autocast() -> None:
    """Under bf16 autocast the cosines and the pair count stay float32. 1·19·18 = 342 pairs is not a bf16 number
    (it rounds to 344): the count the accumulation check compares with count() must be exact. On an H200 the
    GPT-2 16×1024 bench read 16·1024·1023 pairs as 2^24 and the check stopped the run."""
    torch.manual_seed(0)
    hidden = torch.randn(1, 19, 16)
    pairs = off_diagonal_pairs(torch.ones(1, 19, dtype=torch.bool))
    plain_total, plain_count = simctg_loss_sum(hidden, pairs, margin=0.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        total, count = simctg_loss_sum(hidden, pairs, margin=0.5)
    assert count.dtype == torch.float32 and count.item() == 342 == plain_count.item()
    assert total.dtype == torch.float32
    torch.testing.assert_close(total, plain_total)
