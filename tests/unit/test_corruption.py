"""ELECTRA, COCO-LM corrective LM and sequence contrastive learning: hand cases and gradient paths."""

from __future__ import annotations

import math

import pytest
import torch

from degen_train.core.rng import mix_seed
from degen_train.losses.coco_clm import CorrectiveLMTerm, corrective_lm_paper, corrective_lm_released
from degen_train.losses.coco_scl import SequenceContrastiveTerm, crop_views, sequence_contrastive_loss
from degen_train.losses.contract import TermContext, WeightedSum
from degen_train.losses.electra import replaced_token_detection
from degen_train.models.generator import sample_replacements
from tests.helpers import masked_batch, tiny_backbone


def test_corrective_lm_hand_cases() -> None:
    lm = torch.zeros(2, 2)  # p_LM(x) = 1/2 at both positions
    targets = torch.tensor([0, 1])
    copy = torch.zeros(2)  # p_copy(1|h) = 1/2
    copied = torch.tensor([True, False])
    # Copied: −log(1/2 + 1/2·1/2) = −log(3/4); replaced: −log(1/2·1/2) = log 4.
    paper = corrective_lm_paper(lm, targets, copy, copied)
    assert paper.item() == pytest.approx(-math.log(0.75) + math.log(4), rel=1e-6)
    # Released: (1 − 1/2) · log 2 at each position.
    assert corrective_lm_released(lm, targets, copy).item() == pytest.approx(math.log(2), rel=1e-6)


def test_replaced_token_detection_hand_case() -> None:
    logits = torch.tensor([[0.0, math.log(3.0), 5.0]])
    replaced = torch.tensor([[True, False, True]])
    mask = torch.tensor([[True, True, False]])  # the last token is padding
    total, count = replaced_token_detection(logits, replaced, mask)
    # −log σ(0) = log 2; −log(1 − σ(log 3)) = log 4.
    assert total.item() == pytest.approx(math.log(8), rel=1e-6) and count.item() == 2


def test_sequence_contrastive_hand_case() -> None:
    first = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    second = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    # Each of the 4 views: positive cos 1, two negatives cos 0 -> −log(e / (e + 2)).
    loss = sequence_contrastive_loss(first, second, temperature=1.0)
    assert loss.item() == pytest.approx(math.log(1 + 2 / math.e), rel=1e-6)
    gathered = sequence_contrastive_loss(
        first[:1], second[:1], temperature=1.0, first_offset=0, all_first=first, all_second=second
    )
    assert gathered.item() == pytest.approx(math.log(1 + 2 / math.e), rel=1e-6)


def test_crops_are_contiguous_and_keep_cls() -> None:
    ids = torch.tensor([[101, 5, 6, 7, 8, 9, 10, 11, 12, 13, 102], [101, 20, 21, 102, 0, 0, 0, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    view = crop_views(ids, mask, torch.tensor([1, 2]), fraction=0.9)
    assert view["input_ids"].shape == ids.shape  # padded after the crop: no host read of the longest crop
    first = view["input_ids"][0][view["attention_mask"][0].bool()].tolist()
    assert first[0] == 101 and len(first) == 1 + 9  # round(0.9 · 10) tokens after [CLS]
    body = ids[0, 1:11].tolist()
    assert any(body[s : s + 9] == first[1:] for s in range(2))
    assert (view["input_ids"][0][10:] == 0).all()
    assert view["attention_mask"][1].sum() == 1 + 3 and (view["labels"] == -100).all()
    assert view["labelled_index"].numel() == 0


def test_scl_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match=r"crop_fraction must be in \(0, 1\], got 1.5"):
        SequenceContrastiveTerm(crop_fraction=1.5)
    with pytest.raises(ValueError, match=r"needs data.batch_size >= 2 \(in-batch negatives\), got 1"):
        SequenceContrastiveTerm().setup(TermContext(hidden_size=4, vocab_size=9, batch_size=1))


def test_sampling_is_seeded_per_example() -> None:
    logits = torch.randn(5, 50)
    selected = torch.tensor([[True, True, False], [True, True, True]])
    seeds = torch.tensor([mix_seed(1), mix_seed(2)])
    both = sample_replacements(logits, labelled_index(selected), seeds, length=3)
    alone = sample_replacements(logits[2:], labelled_index(selected[1:]), seeds[1:], length=3)
    assert torch.equal(both[2:], alone)
    padded = torch.cat([selected, torch.zeros(2, 4, dtype=torch.bool)], 1)  # a longer batch: the same draws
    assert torch.equal(sample_replacements(logits, labelled_index(padded), seeds, length=7), both)


def labelled_index(selected: torch.Tensor) -> torch.Tensor:
    return selected.reshape(-1).nonzero().squeeze(1)


def test_main_loss_does_not_reach_the_generator_through_the_samples() -> None:
    backbone = tiny_backbone()
    term = CorrectiveLMTerm(generator_layers=1, generator_weight=0.0)
    term.setup(TermContext(hidden_size=16, vocab_size=30, batch_size=2, backbone=backbone))
    loss = WeightedSum({"coco_clm": term}, {"coco_clm": 1.0})
    total, logged = loss(backbone(loss.prepare_batch(masked_batch()), requires=loss.requires))
    total.backward()
    generator_layers = list(term.generator.encoder.encoder.parameters()) + list(term.generator.transform.parameters())
    assert all(p.grad is None or not p.grad.any() for p in generator_layers)
    assert backbone.model.bert.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert term.copy_head.weight.grad.abs().sum() > 0
    assert logged["coco_clm/replaced_rate"] > 0
    # With its own loss on, the generator does train.
    term.generator_weight = 1.0
    backbone.zero_grad()
    loss(backbone(loss.prepare_batch(masked_batch()), requires=loss.requires))[0].backward()
    assert term.generator.encoder.encoder.layer[0].output.dense.weight.grad.abs().sum() > 0


def test_generator_shares_the_main_embeddings() -> None:
    backbone = tiny_backbone()
    term = CorrectiveLMTerm(generator_layers="auto")
    term.setup(TermContext(hidden_size=16, vocab_size=30, batch_size=2, backbone=backbone))
    generator = term.generator
    assert generator.encoder.embeddings.shared is backbone.model.bert.embeddings
    assert generator.decoder_weight is backbone.model.get_input_embeddings().weight
    assert len(generator.encoder.encoder.layer) == 1  # auto: at most half of the main 3 layers


@pytest.mark.parametrize("regularizer", ["cosreg", "coco_scl"])
def test_weight_zero_leaves_the_objective_and_its_gradients_unchanged(regularizer: str) -> None:
    from degen_train.losses.catalog import build_terms

    def gradients(sections: dict) -> tuple[float, dict]:
        backbone = tiny_backbone().eval()
        terms, weights = build_terms(sections)
        for t in terms.values():
            t.setup(TermContext(hidden_size=16, vocab_size=30, batch_size=2, backbone=backbone))
        loss = WeightedSum(terms, weights)
        total, _ = loss(backbone(loss.prepare_batch(masked_batch()), requires=loss.requires))
        total.backward()
        return total.item(), {n: p.grad.clone() for n, p in backbone.named_parameters() if p.grad is not None}

    base_loss, base_grads = gradients({"objective": {"mlm": {}}})
    zero_loss, zero_grads = gradients({"objective": {"mlm": {}}, "regularizer": {regularizer: {"weight": 0.0}}})
    assert zero_loss == base_loss
    assert base_grads.keys() == zero_grads.keys()
    assert all(torch.equal(base_grads[n], zero_grads[n]) for n in base_grads)
    _, on_grads = gradients({"objective": {"mlm": {}}, "regularizer": {regularizer: {"weight": 1.0}}})
    assert any(not torch.equal(base_grads[n], on_grads[n]) for n in base_grads)
