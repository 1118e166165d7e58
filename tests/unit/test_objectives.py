"""Objective terms against hand-computed values, and the WeightedSum contract."""

from __future__ import annotations

import math

import pytest
import torch

from degen_train.losses.catalog import build_terms
from degen_train.losses.contract import WeightedSum
from tests.helpers import forward_output


def test_mlm_is_the_mean_negative_log_likelihood() -> None:
    terms, weights = build_terms({"objective": {"mlm": {"weight": 1.0}}})
    logits = torch.tensor([[0.0, 0.0, 0.0], [math.log(3.0), 0.0, 0.0]])
    # Row 1: uniform over 3 -> -log(1/3). Row 2: softmax = (3, 1, 1)/5 -> target 0 gives -log(3/5).
    expected = (math.log(3) + math.log(5 / 3)) / 2
    result = terms["mlm"](forward_output(logits=logits, targets=torch.tensor([1, 0])))
    assert result.loss.item() == pytest.approx(expected, rel=1e-6)
    assert result.metrics["accuracy"].item() == pytest.approx(0.5)  # row 1 ties -> argmax 0 != 1; row 2 right


def test_nsp_is_the_mean_binary_negative_log_likelihood() -> None:
    terms, _ = build_terms({"objective": {"nsp": {}}})
    logits = torch.tensor([[0.0, 0.0], [math.log(4.0), 0.0]])
    out = forward_output(
        logits=torch.zeros(1, 3),
        targets=torch.tensor([0]),
        sequence_logits=logits,
        sequence_labels=torch.tensor([1, 0]),
    )
    # -log(1/2) and -log(4/5)
    assert terms["nsp"](out).loss.item() == pytest.approx((math.log(2) + math.log(5 / 4)) / 2, rel=1e-6)


def test_weighted_sum_adds_weights_and_weight_zero_only_logs() -> None:
    terms, weights = build_terms({"objective": {"mlm": {"weight": 2.0}}, "regularizer": {}})
    weights["mlm_copy"] = 0.0
    terms["mlm_copy"] = type(terms["mlm"])()
    logits = torch.tensor([[0.0, 0.0, 0.0]], requires_grad=True)
    total, logged = WeightedSum(terms, weights)(forward_output(logits=logits, targets=torch.tensor([2])))
    assert total.item() == pytest.approx(2 * math.log(3), rel=1e-6)
    assert logged["mlm_copy/loss"].item() == pytest.approx(math.log(3), rel=1e-6)
    assert set(logged) == {"loss", "mlm/loss", "mlm/accuracy", "mlm_copy/loss", "mlm_copy/accuracy"}


def test_unknown_term_lists_the_registered_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown loss term 'cosreg2' in regularizer; registered terms: .*mlm"):
        build_terms({"objective": {"mlm": {}}, "regularizer": {"cosreg2": {"weight": 1}}})


def test_negative_weight_is_refused() -> None:
    with pytest.raises(ValueError, match=r"objective.mlm.weight must be >= 0, got -1.0"):
        build_terms({"objective": {"mlm": {"weight": -1}}})
