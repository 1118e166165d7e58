"""Unsupervised SimCSE against a hand-computed case and a loop transcription of the released cl_forward loss."""

from __future__ import annotations

import math

import pytest
import torch

from degen_train.losses.contract import TermContext
from degen_train.losses.simcse import DropoutContrastTerm, simcse_loss_sum


def test_hand_case_two_sequences() -> None:
    """z1 = (e1, e2), z2 = (e1, e2), τ = 1: each anchor's logits (1, 0) -> −log(e / (e + 1)) each."""
    first = torch.eye(2)
    total = simcse_loss_sum(first, first.clone(), temperature=1.0)
    assert total.item() == pytest.approx(2 * -math.log(math.e / (math.e + 1)), rel=1e-6)


def released_form(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCSE's cl_forward: cos_sim(z1_i, z2_j) / temp over the batch, cross-entropy with labels = arange,
    a mean over the batch (here as loops)."""
    total = torch.zeros(())
    for i in range(len(z1)):
        sims = torch.stack([torch.cosine_similarity(z1[i], z2[j], dim=0) / temperature for j in range(len(z2))])
        total = total - torch.log_softmax(sims, dim=0)[i]
    return total / len(z1)


def test_matches_the_released_form() -> None:
    torch.manual_seed(0)
    z1, z2 = torch.randn(5, 8), torch.randn(5, 8)
    ours = simcse_loss_sum(z1, z2, temperature=0.05) / 5
    torch.testing.assert_close(ours, released_form(z1, z2, 0.05), rtol=1e-5, atol=1e-5)


def test_two_unmasked_views_and_the_mlp_pooler() -> None:
    term = DropoutContrastTerm()
    term.setup(TermContext(hidden_size=4, vocab_size=10, batch_size=2))
    batch = {
        "input_ids": torch.tensor([[1, 4, 2]]),
        "original_ids": torch.tensor([[1, 7, 2]]),
        "attention_mask": torch.ones(1, 3, dtype=torch.long),
        "labels": torch.tensor([[-100, 7, -100]]),
    }
    prepared = term.prepare_batch(batch)
    (view,) = prepared["views"]  # both views in one pass: the unmasked rows twice
    assert view["input_ids"].tolist() == [[1, 7, 2], [1, 7, 2]] and (view["labels"] == -100).all()
    assert view["attention_mask"].shape == (2, 3)
    assert isinstance(term.mlp[1], torch.nn.Tanh)


def test_bad_options_name_the_choices() -> None:
    with pytest.raises(ValueError, match=r"regularizer.simcse.pooler='avg' is not one of cls_mlp, cls, mean"):
        DropoutContrastTerm(pooler="avg")
    with pytest.raises(ValueError, match=r"SimCSE needs data.batch_size >= 2"):
        DropoutContrastTerm().setup(TermContext(hidden_size=4, vocab_size=10, batch_size=1))


def test_the_mlp_is_initialised_as_bert_initialises() -> None:
    """The released cl_init calls cls.init_weights(): BERT's normal(0, initializer_range = 0.02), zero bias."""
    torch.manual_seed(0)
    term = DropoutContrastTerm()
    term.setup(TermContext(hidden_size=512, vocab_size=10, batch_size=2))
    weight, bias = term.mlp[0].weight, term.mlp[0].bias
    assert weight.std().item() == pytest.approx(0.02, rel=0.02) and abs(weight.mean().item()) < 1e-3
    assert bias.abs().max().item() == 0.0


def test_validation_keeps_the_views_dropout(tmp_path) -> None:  # noqa: ANN001
    """In eval mode (validation) the two views still differ by their dropout masks, so the validation loss is the
    contrastive loss and not a copy-the-view score; the rest of the model stays in eval mode."""
    from transformers import BertConfig, BertForMaskedLM

    from degen_train.models.backbone import Backbone

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.1)  # fmt: skip
    backbone = Backbone(BertForMaskedLM(config)).eval()
    term = DropoutContrastTerm(pooler="cls")
    term.setup(TermContext(hidden_size=32, vocab_size=50, batch_size=4, backbone=backbone))
    ids = torch.randint(5, 50, (4, 8))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.full_like(ids, -100)}
    output = backbone(term.prepare_batch(batch))
    first, second = output.views[term.view_index].hidden_states.chunk(2)
    assert not torch.allclose(first, second)  # two dropout masks, also in eval mode
    assert not backbone.model.training and not any(m.training for m in backbone.model.modules())
    assert term(output).metrics["positive_cosine"].item() < 0.9999
