"""Luo et al. 2021's positional-artefact check (degen_train/metrics/positional.py) on hand-computed cases."""

from __future__ import annotations

import pytest
import torch

from degen_train.metrics.positional import absolute_position_embeddings, position_variance_share, positional_artefacts


def test_the_variance_share_of_position_on_a_hand_computed_case() -> None:
    """Two sequences of 2 tokens. Dimension 0 is its position (0, 1, 0, 1): position explains all of its variance.
    Dimension 1 is (1, 1, 3, 3), the sequence's, not the position's: none. Dimension 2 is (0, 2, 2, 2): position
    means 1 and 2 about the overall 1.5, between = 2·0.25 + 2·0.25 = 1, total = 2.25 + 3·0.25 = 3, η² = 1/3."""
    states = [torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 2.0]]), torch.tensor([[0.0, 3.0, 2.0], [1.0, 3.0, 2.0]])]
    share = position_variance_share(states)
    assert share.tolist() == pytest.approx([1.0, 0.0, 1 / 3])


def test_an_outlier_dimension_carried_by_the_position_embeddings_is_found() -> None:
    """Hidden states = position embedding + noise, the position embeddings holding a large, position-dependent
    value in dimension 5: the last layer's dimension 5 is explained by position, and the position embeddings'
    own outlier dimension is 5, shared."""
    generator = torch.Generator().manual_seed(0)
    positions = torch.randn(16, 32, generator=generator) * 0.1
    positions[:, 5] = 10 + torch.arange(16.0)  # an outlier mean that moves with position
    states = [positions[:length] + 0.3 * torch.randn(length, 32, generator=generator) for length in (16, 12, 9, 14)]
    found = positional_artefacts(states, [5], positions)
    assert found["position_share_of_outlier_dims"]["5"] > 0.99 and found["position_share_median_over_dims"] < 0.5
    assert found["position_embedding_outlier_dims"] == [5]
    assert found["outlier_dims_shared_with_position_embeddings"] == [5]
    assert positional_artefacts(states, [5], None)["position_embedding_outlier_dims"] is None


def test_the_position_embeddings_of_bert_and_gpt2_are_found_and_a_rotary_model_has_none() -> None:
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, LlamaConfig, LlamaModel

    bert = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=24))  # fmt: skip
    gpt2 = GPT2Model(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=20))
    llama = LlamaModel(LlamaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32))  # fmt: skip
    assert torch.equal(absolute_position_embeddings(bert), bert.embeddings.position_embeddings.weight)
    assert torch.equal(absolute_position_embeddings(gpt2), gpt2.wpe.weight)
    assert absolute_position_embeddings(llama) is None
