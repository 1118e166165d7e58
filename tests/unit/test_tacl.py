"""TaCL's token-level InfoNCE: hand cases, the padding and same-token switches, a frozen teacher."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel

from degen_train.losses.contract import TermContext
from degen_train.losses.tacl import TokenContrastiveTerm, tacl_loss


def test_hand_case_one_anchor() -> None:
    student = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    teacher = torch.tensor([[[2.0, 0.0], [1.0, 1.0]]])
    anchors = torch.tensor([[True, False]])
    candidates = torch.ones(1, 2, 2, dtype=torch.bool)
    total, count = tacl_loss(student, teacher, anchors, candidates, temperature=1.0)
    # cos(h̃0, h0) = 1, cos(h̃0, h1) = 1/√2: −log(e¹ / (e¹ + e^{1/√2})).
    assert total.item() == pytest.approx(math.log(1 + math.exp(1 / math.sqrt(2) - 1)), rel=1e-6)
    assert count.item() == 1
    total, _ = tacl_loss(student, teacher, anchors, candidates, temperature=0.5)
    assert total.item() == pytest.approx(math.log(1 + math.exp((1 / math.sqrt(2) - 1) / 0.5)), rel=1e-6)


def term(tmp_path: Path, **options) -> TokenContrastiveTerm:
    config = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    BertModel(config).save_pretrained(tmp_path / "teacher")
    tacl = TokenContrastiveTerm(teacher=str(tmp_path / "teacher"), **options)
    tacl.setup(TermContext(hidden_size=8, vocab_size=20, batch_size=2))
    return tacl


def test_padding_and_same_token_switches(tmp_path: Path) -> None:
    ids = torch.tensor([[2, 5, 5, 0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    keep_pad = term(tmp_path).candidates(ids, mask)[0]
    assert keep_pad.all()
    no_pad = term(tmp_path, pad_in_denominator=False).candidates(ids, mask)[0]
    assert no_pad[:, 3].tolist() == [False, False, False, True]  # pad only in its own row (never an anchor)
    distinct = term(tmp_path, exclude_same_token=True).candidates(ids, mask)[0]
    assert distinct[1].tolist() == [True, True, False, True]  # 5 at position 2 is not a negative for position 1


def test_teacher_is_frozen_outside_the_module_tree_and_mode_follows_the_switch(tmp_path: Path) -> None:
    tacl = term(tmp_path, teacher_dropout=False)
    assert list(tacl.parameters()) == [] and tacl.state_dict() == {}
    assert not any(p.requires_grad for p in tacl.teacher.parameters())
    tacl.train()
    assert not tacl.teacher.training
    assert term(tmp_path, teacher_dropout=True).train().teacher.training
    # Under FSDP2 the teacher is offered for sharding unless it is to stay whole on every process.
    assert tacl.frozen_modules() == [tacl.teacher]
    assert term(tmp_path, teacher_sharding="replicate").frozen_modules() == []


def test_bad_teacher_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"regularizer.tacl.teacher is not set"):
        TokenContrastiveTerm(teacher=None)
    with pytest.raises(ValueError, match=r"regularizer.tacl.temperature must be > 0, got -0.1"):
        TokenContrastiveTerm(teacher="x", temperature=-0.1)
    with pytest.raises(ValueError, match=r"teacher_sharding='gather' is not one of shard, replicate"):
        TokenContrastiveTerm(teacher="x", teacher_sharding="gather")
    tacl = term(tmp_path)
    with pytest.raises(ValueError, match=r"TaCL teacher .* has hidden size 8, the student has 16"):
        tacl.setup(TermContext(hidden_size=16, vocab_size=20, batch_size=2))
    with pytest.raises(ValueError, match=r"TaCL teacher .* has vocabulary 20, the student has 30"):
        tacl.setup(TermContext(hidden_size=8, vocab_size=30, batch_size=2))


def test_gradients_reach_the_student_and_never_the_teacher(tmp_path: Path) -> None:
    from transformers import BertForMaskedLM

    from degen_train.models.backbone import Backbone

    tacl = term(tmp_path)
    student = Backbone(BertForMaskedLM.from_pretrained(tmp_path / "teacher"))
    ids = torch.tensor([[2, 5, 6, 7, 3]])
    labels = torch.tensor([[-100, 5, -100, 7, -100]])
    batch = {
        "input_ids": torch.where(labels != -100, 4, ids),
        "original_ids": ids,
        "labels": labels,
        "attention_mask": torch.ones_like(ids),
    }
    result = tacl(student(batch))
    result.loss.backward()
    assert result.metrics["anchors"].item() == 2
    assert student.model.bert.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in tacl.teacher.parameters())


def released_tacl(
    student: torch.Tensor,
    teacher_model: BertModel,
    ids: torch.Tensor,
    mask: torch.Tensor,
    anchors: torch.Tensor,
    max_len: int,
    temperature: float,
) -> torch.Tensor:
    """yxuansu/TaCL pretraining/bert_contrastive.py, transcribed: the teacher reads the sequence padded to
    max_len, cosine scores against every one of those max_len positions, log-softmax, mean over anchors."""
    pad = max_len - ids.shape[1]
    truth = torch.nn.functional.pad(ids, (0, pad))
    attn = torch.nn.functional.pad(mask, (0, pad))
    truth_rep = teacher_model(input_ids=truth, attention_mask=attn).last_hidden_state
    student = torch.nn.functional.pad(student, (0, 0, 0, pad))  # the student saw max_len positions too
    masked_rep = student / student.norm(dim=2, keepdim=True).clamp_min(1e-12)
    truth_rep = truth_rep / truth_rep.norm(dim=2, keepdim=True)
    scores = masked_rep @ truth_rep.transpose(1, 2) / temperature  # bsz x max_len x max_len
    logprobs = torch.log_softmax(scores, dim=-1)
    gold = logprobs.diagonal(dim1=1, dim2=2)
    labels = torch.nn.functional.pad(anchors, (0, pad)).float()
    return -(gold * labels).sum() / labels.sum()


def test_pad_in_denominator_counts_pads_to_block_size_as_released(tmp_path: Path) -> None:
    """The number of pad negatives is block_size - length, whatever the batch's own padding."""
    from degen_train.models.output import ForwardOutput

    tacl = term(tmp_path, teacher_dropout=False)
    tacl.block_size = 24
    torch.manual_seed(0)
    ids = torch.tensor([[2, 5, 6, 7, 3, 0, 0, 0], [2, 8, 9, 3, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    anchors = torch.zeros_like(ids, dtype=torch.bool)
    anchors[0, 2], anchors[1, 1] = True, True
    student = torch.randn(2, 8, 8)

    def loss_with(extra: int) -> float:
        pad = (0, extra)
        out = ForwardOutput(
            input_ids=torch.nn.functional.pad(ids, pad),
            attention_mask=torch.nn.functional.pad(mask, pad),
            hidden_states=torch.nn.functional.pad(student, (0, 0, 0, extra)),
            labels=torch.where(torch.nn.functional.pad(anchors, pad), torch.nn.functional.pad(ids, pad), -100),
            logits=None,
            target_ids=ids[anchors],
            embedding_weight=torch.zeros(1),
            output_embedding_weight=torch.zeros(1),
            original_ids=torch.nn.functional.pad(ids, pad),
        )
        return tacl(out).loss.item()

    assert loss_with(0) == pytest.approx(loss_with(16), rel=1e-6)  # 16 more pad columns change nothing
    with torch.no_grad():
        expected = released_tacl(student, tacl.teacher, ids, mask, anchors, 24, tacl.temperature)
    assert loss_with(0) == pytest.approx(expected.item(), rel=1e-5)
