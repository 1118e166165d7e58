"""The chunked output layer + cross-entropy equals the plain form F.cross_entropy(F.linear(h, W, b), y) in loss and
gradient (the definition itself is the reference), and never keeps (N, V) logits for the backward pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from degen_train.losses.catalog import build_terms
from degen_train.losses.chunked_ce import chunked_linear_cross_entropy
from degen_train.losses.contract import WeightedSum
from degen_train.models.backbone import Backbone


def plain(hidden, weight, bias, targets):  # noqa: ANN001, ANN201
    logits = F.linear(hidden, weight, bias)
    return F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), targets, reduction="sum")


@pytest.mark.parametrize("chunk_size", [1, 7, 37, 1000])
@pytest.mark.parametrize("with_bias", [True, False])
def test_equal_to_the_plain_form_in_loss_and_gradient(chunk_size: int, with_bias: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, generator=generator, requires_grad=True)
    weight = torch.randn(101, 16, dtype=torch.float64, generator=generator, requires_grad=True)
    bias = torch.randn(101, dtype=torch.float64, generator=generator, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 101, (37,), generator=generator)
    inputs = [t for t in (hidden, weight, bias) if t is not None]
    expected = plain(hidden, weight, bias, targets)
    expected_grads = torch.autograd.grad(0.37 * expected, inputs)  # a scale, as distributed_mean's 1/N
    total, correct = chunked_linear_cross_entropy(hidden, weight, bias, targets, chunk_size=chunk_size)
    grads = torch.autograd.grad(0.37 * total, inputs)
    assert total.item() == pytest.approx(expected.item(), rel=1e-12)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert correct.item() == (F.linear(hidden, weight, bias).argmax(-1) == targets).sum().item()


def test_no_logits_are_kept_for_the_backward_pass() -> None:
    """What autograd saves: the plain form keeps the (N, V) logits; the chunked one only (N, H) and (V, H)."""
    hidden = torch.randn(64, 8, requires_grad=True)
    weight = torch.randn(500, 8, requires_grad=True)
    targets = torch.randint(0, 500, (64,))

    def largest_saved(function) -> int:  # noqa: ANN001
        sizes: list[int] = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
            function()
        return max(sizes)

    assert largest_saved(lambda: plain(hidden, weight, None, targets)) >= 64 * 500
    assert largest_saved(lambda: chunked_linear_cross_entropy(hidden, weight, None, targets, chunk_size=16)) <= 500 * 8


def gpt2_backbone() -> Backbone:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=97, n_embd=16, n_layer=2, n_head=2, n_positions=32, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    return Backbone(GPT2LMHeadModel(config))


def test_the_mle_term_chunked_equals_the_mle_term_plain_on_a_tied_gpt2() -> None:
    ids = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, 0] = -100  # shifted targets: the first position predicts nothing here
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    results = {}
    for chunk_size in (None, 8):
        backbone = gpt2_backbone()
        terms, weights = build_terms({"objective": {"mle": {"chunk_size": chunk_size}}})
        loss = WeightedSum(terms, weights)
        total, logged = loss(backbone(batch, requires=loss.requires))
        total.backward()
        results[chunk_size] = (total.item(), logged["mle/accuracy"].item(), backbone)
    (plain_loss, plain_accuracy, plain_model), (chunked_loss, chunked_accuracy, chunked_model) = results.values()
    assert chunked_loss == pytest.approx(plain_loss, rel=1e-6) and chunked_accuracy == plain_accuracy
    for (name, a), (_, b) in zip(plain_model.named_parameters(), chunked_model.named_parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)  # the tied wte gets both paths


def test_a_bad_chunk_size_is_named() -> None:
    with pytest.raises(ValueError, match=r"mle.chunk_size must be >= 1 or null, got 0"):
        build_terms({"objective": {"mle": {"chunk_size": 0}}})
