"""The repetition probe: n-gram statistics by hand, greedy continuations equal to transformers' own greedy search."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from degen_train.metrics.generation import (
    distinct_n,
    greedy_continuations,
    repeated_token_share,
    repetition_probe,
    seq_rep_n,
)


def test_n_gram_statistics_by_hand() -> None:
    # 1 2 3 1 2 3 1: 4-grams (1231) (2312) (3123) (1231) -> 3 unique of 4 -> seq-rep-4 = 1/4.
    assert seq_rep_n([1, 2, 3, 1, 2, 3, 1], 4) == pytest.approx(0.25)
    assert seq_rep_n([1, 2, 3], 4) == 0.0  # no 4-gram at all
    # bigrams of [1 2 1] and [1 2]: (12) (21) (12) -> 2 unique of 3.
    assert distinct_n([[1, 2, 1], [1, 2]], 2) == pytest.approx(2 / 3)
    # prefix 5 6; continuation 6 7 5: 6 (seen), 7 (new), 5 (seen) -> 2/3; a window of 1 sees only the last token.
    assert repeated_token_share([5, 6], [6, 7, 5]) == pytest.approx(2 / 3)
    assert repeated_token_share([5, 6], [6, 7, 5], window=1) == pytest.approx(1 / 3)


def test_greedy_continuations_equal_transformers_greedy_search() -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=2, n_positions=64)).eval()
    prefixes = torch.randint(0, 50, (3, 6))
    ours = greedy_continuations(model, prefixes, 10)
    theirs = model.generate(
        prefixes, attention_mask=torch.ones_like(prefixes), do_sample=False, max_new_tokens=10, min_new_tokens=10,
        pad_token_id=0,
    )  # fmt: skip
    assert torch.equal(ours, theirs[:, 6:])
    probe = repetition_probe(model, [list(range(i, i + 8)) for i in range(5)], prefix=6, length=10)
    assert probe["prefixes"] == 5 and 0 <= probe["seq_rep_4"] <= 1 and 0 < probe["distinct_1"] <= 1
    with pytest.raises(ValueError, match="no held-out document has 50 tokens"):
        repetition_probe(model, [[1, 2, 3]])
