"""Perplexity of an export (issue 24.10): the windowed causal NLL and the pseudo-log-likelihood against direct
computations on the same tiny models (the definitions: Jelinek et al.'s perplexity; Salazar et al. 2020's PLL)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

from degen_train.metrics.perplexity import causal_perplexity, pseudo_log_likelihood, read_documents


@pytest.fixture(scope="module")
def decoder() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=64, n_embd=32, n_layer=2, n_head=2)).eval()


@pytest.fixture(scope="module")
def encoder() -> BertForMaskedLM:
    torch.manual_seed(0)
    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}
    return BertForMaskedLM(BertConfig(vocab_size=50, max_position_embeddings=64, **shape)).eval()


def test_one_window_is_the_models_own_mean_loss(decoder: GPT2LMHeadModel) -> None:
    stream = torch.randint(0, 50, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    total, count = causal_perplexity(decoder, stream, window=64, stride=64)
    with torch.no_grad():
        reference = decoder(torch.tensor([stream]), labels=torch.tensor([stream])).loss  # HF: mean over t ≥ 1
    assert count == 29
    assert total / count == pytest.approx(float(reference), rel=1e-5)


@pytest.mark.parametrize(("window", "stride"), [(8, 8), (8, 3), (10, 7)])
def test_sliding_windows_score_each_token_once_with_its_windows_context(
    decoder: GPT2LMHeadModel, window: int, stride: int
) -> None:
    stream = torch.randint(0, 50, (41,), generator=torch.Generator().manual_seed(2)).tolist()
    total, count = causal_perplexity(decoder, stream, window=window, stride=stride, batch_size=2)
    expected, scored = 0.0, set()
    for start in range(0, len(stream), stride):  # one window at a time, each token scored by the first window
        end = min(start + window, len(stream))  # that reaches it
        with torch.no_grad():
            log_probs = decoder(torch.tensor([stream[start:end]])).logits[0].log_softmax(-1)
        for t in range(start + 1, end):
            if t not in scored:
                scored.add(t)
                expected -= float(log_probs[t - start - 1, stream[t]])
        if end == len(stream):
            break
    assert count == len(scored)
    # Overlapping windows score every token but the first; disjoint blocks (stride = window) cannot score a block's
    # first token (no context inside its window): the usual non-overlapping approximation.
    assert count == (len(stream) - 1 if stride < window else len(stream) - 1 - (len(stream) - 1) // window)
    assert total == pytest.approx(expected, rel=1e-5)


def test_pseudo_log_likelihood_masks_each_token_in_turn(encoder: BertForMaskedLM) -> None:
    ids = [2, 11, 17, 5, 40, 9, 3]  # 2 and 3 stand for [CLS] and [SEP]: never scored
    total, count = pseudo_log_likelihood(encoder, ids, mask_id=4, special={2, 3}, batch_size=2)
    expected = 0.0
    for position in range(1, len(ids) - 1):
        masked = list(ids)
        masked[position] = 4
        with torch.no_grad():
            logits = encoder(torch.tensor([masked])).logits[0, position]
        expected += float(F.cross_entropy(logits[None], torch.tensor([ids[position]])))
    assert count == 5
    assert total == pytest.approx(expected, rel=1e-5)


def test_bad_perplexity_input_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="perplexity file .*missing.txt does not exist"):
        read_documents(tmp_path / "missing.txt")
    (tmp_path / "blank.txt").write_text("\n  \n")
    with pytest.raises(ValueError, match="blank.txt has no text"):
        read_documents(tmp_path / "blank.txt")
    with pytest.raises(ValueError, match="stride=9 must be in 1..window=8"):
        causal_perplexity(None, [1, 2, 3], window=8, stride=9)
    (tmp_path / "two.txt").write_text("one  two\n\nthree\nfour\n")
    assert read_documents(tmp_path / "two.txt") == ["one two", "three", "four"]
    assert read_documents(tmp_path / "two.txt", "paragraph") == ["one two", "three four"]


def test_words_are_counted_as_wikitexts_word_level_benchmarks_count_them() -> None:
    """Merity et al. 2017 / AWD-LSTM's data.py: each line's space-separated tokens plus one end of line (issue 54.6:
    Gao et al.'s 52.0 → 50.0 is per word, ours was per BPE token)."""
    from degen_train.metrics.perplexity import word_count

    assert word_count(["the cat sat", " = Valkyria Chronicles = ", "a @-@ b"]) == (3 + 1) + (4 + 1) + (3 + 1)
