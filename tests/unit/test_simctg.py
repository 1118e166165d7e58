"""SimCTG's contrastive loss against a hand-computed case and a loop transcription of its released formula."""

from __future__ import annotations

import pytest
import torch

from degen_train.regularizers.simctg import TokenContrastiveDecoderTerm, simctg_loss_sum
from degen_train.types import ForwardOutput


def output(*, hidden_states: torch.Tensor, attention_mask: torch.Tensor, input_ids: torch.Tensor) -> ForwardOutput:
    labels = torch.full_like(input_ids, -100)
    return ForwardOutput(
        input_ids=input_ids,
        attention_mask=attention_mask,
        hidden_states=hidden_states,
        labels=labels,
        target_ids=labels[labels != -100],
        embedding_weight=torch.eye(3, 2),
        output_embedding_weight=torch.eye(3, 2),
    )


def test_hand_case_two_orthogonal_and_one_opposite_state() -> None:
    """States e1, e2, −e1: cosines s12 = 0, s13 = −1, s23 = 0; ρ = 0.5 gives max(0, 0.5 − 1 + s_ij):
    0 for every pair (all s_ij ≤ 0 < 0.5), and with ρ = 1.5 the pairs cost 0.5, 0.5, 0, 0.5, 0.5, 0."""
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]])
    valid = torch.ones(1, 3, dtype=torch.bool)
    total, count = simctg_loss_sum(hidden, valid, margin=0.5)
    assert total.item() == pytest.approx(0.0) and count.item() == 6
    total, count = simctg_loss_sum(hidden, valid, margin=1.5)
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
    out = output(hidden_states=hidden, attention_mask=mask, input_ids=torch.ones(3, 7, dtype=torch.long))
    expected = released_form(hidden, lengths, 0.5)
    result = term(out)
    torch.testing.assert_close(result.loss, expected, rtol=1e-5, atol=1e-6)
    assert result.metrics["pairs"].item() == 7 * 6 + 4 * 3 + 2 * 1


def test_pad_token_masking_is_the_released_switch() -> None:
    """mask_from=pad_token leaves out every position holding the pad id, also inside the attention mask."""
    torch.manual_seed(1)
    hidden = torch.randn(1, 5, 8)
    ids = torch.tensor([[5, 6, 0, 7, 8]])  # 0 = pad id, here a document separator inside the sequence
    mask = torch.ones(1, 5, dtype=torch.long)
    term = TokenContrastiveDecoderTerm(mask_from="pad_token")
    term.pad_id = 0
    result = term(output(hidden_states=hidden, attention_mask=mask, input_ids=ids))
    expected = released_form(hidden[:, [0, 1, 3, 4]], [4], 0.5)
    torch.testing.assert_close(result.loss, expected, rtol=1e-5, atol=1e-6)


def test_bad_options_name_the_choices() -> None:
    with pytest.raises(ValueError, match=r"regularizer.simctg.mask_from='pads' is not one of attention, pad_token"):
        TokenContrastiveDecoderTerm(mask_from="pads")
    with pytest.raises(ValueError, match=r"regularizer.simctg.margin=3: a cosine margin lies in \[0, 2\]"):
        TokenContrastiveDecoderTerm(margin=3)
