"""objective.{mlm,mle}.compiled (issue 45.2's lever): the head and its cross-entropy as one compiled graph at a padded
row count give the eager head's loss and gradients, and a run's changing number of labelled rows compiles at most
twice. The reference is the eager form, F.cross_entropy(F.linear(h, W, b)) over the labelled rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from degen_train.losses import compiled_head
from degen_train.losses.compiled_head import compiled_head_cross_entropy
from degen_train.losses.mlm import MaskedLMTerm
from tests.helpers import masked_batch, tiny_backbone


@pytest.fixture
def fresh_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled function of this test's own, and dynamo's caches and counters from nothing (reset() leaves the
    counters: an earlier test's whole compiled runs counted 28 graphs here)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(compiled_head, "_compiled", None)


@pytest.mark.usefixtures("fresh_compile")
def test_equal_to_the_eager_head_and_compiled_at_most_twice_over_changing_row_counts() -> None:
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    weight = torch.randn(70, 8, requires_grad=True)  # 70 rows, 50 of them the vocabulary: a padded one
    bias = torch.randn(70, requires_grad=True)
    for rows in (37, 300, 301, 5, 700):  # within one bucket, the next, a small batch, a larger one
        hidden = torch.randn(rows, 8, requires_grad=True)
        targets = torch.randint(0, 50, (rows,))
        total, correct = compiled_head_cross_entropy(hidden, weight, bias, targets, vocabulary=50)
        grads = torch.autograd.grad(total, (hidden, weight, bias))
        logits = F.linear(hidden, weight[:50], bias[:50])
        expected = F.cross_entropy(logits, targets, reduction="sum")
        expected_grads = torch.autograd.grad(expected, (hidden, weight, bias))
        torch.testing.assert_close(total, expected, rtol=1e-5, atol=1e-4)
        assert int(correct) == int((logits.argmax(-1) == targets).sum())
        for got, want in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert not grads[1][50:].any()  # the padded rows get no gradient
    assert counters["stats"]["unique_graphs"] <= 2 * 2  # forward and backward, each compiled at most twice


def test_the_compiled_term_equals_the_plain_term_on_a_bert_head(
    fresh_compile: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MaskedLMTerm(compiled=True) through the backbone: the loss, its accuracy and the gradient of every weight are
    the whole-logits term's (the term's path under dynamo; inductor's numbers are the test above's)."""
    monkeypatch.setattr(compiled_head, "BACKEND", "aot_eager")
    results = []
    for compiled in (False, True):
        backbone = tiny_backbone()
        term = MaskedLMTerm(compiled=compiled)
        out = term(backbone(masked_batch(), requires=term.requires))
        out.loss.backward()
        results.append((out, {n: p.grad.clone() for n, p in backbone.named_parameters() if p.grad is not None}))
    (plain, plain_grads), (compiled_out, compiled_grads) = results
    torch.testing.assert_close(compiled_out.loss, plain.loss)
    torch.testing.assert_close(compiled_out.metrics["accuracy"], plain.metrics["accuracy"])
    assert plain_grads.keys() == compiled_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_compiled_with_a_chunk_size_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"set chunk_size=null with compiled=true"):
        MaskedLMTerm(chunk_size=1024, compiled=True)


@pytest.mark.parametrize(
    ("recipe", "speed", "compiled_terms"),
    [("gpt2_mle", "gpt2_small", {"mle"}), ("bert_mlm", "bert_base", {"mlm"}), ("coco_lm", "bert_base", set())],
)
def test_model_compile_head_compiles_every_objective_head_and_adds_no_term(
    recipe: str, speed: str, compiled_terms: set[str]
) -> None:
    """model.compile_head=true (on in both speed presets, issue 55.6): each objective term with a ``compiled`` option
    gets compiled=true with whole logits; COCO-LM's terms have no such option and its objective is left as it was
    (a preset that set objective.mlm.compiled would have added an MLM term to it)."""
    from degen_train.config import load_config
    from degen_train.losses.catalog import build_terms, with_compiled_heads

    cfg = load_config([f"recipe={recipe}", f"speed={speed}"])
    assert cfg.model.compile_head is True
    objective = with_compiled_heads(cfg.objective)
    assert objective.keys() == cfg.objective.keys()
    terms, _ = build_terms({"objective": objective})
    assert {name for name, term in terms.items() if getattr(term, "compiled", False)} == compiled_terms
    for name in compiled_terms:
        assert terms[name].chunk_size is None
