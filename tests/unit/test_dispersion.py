"""The dispersion loss (degen_train/losses/dispersion.py) against a hand-computed case and a transcription of the
released ``DispersionLoss(variant="angular_spread")`` (KrishnaswamyLab/LM-Dispersion, lm_dispersion/dispersion.py),
and issue 70.4's contract: its file and yaml are all it took (found, listed, checked, trained and logged)."""

from __future__ import annotations

import math

import pytest
import torch

from degen_train.losses.dispersion import DispersionTerm, angular_spread
from tests.helpers import forward_output, logged, run


def released_angular_spread(z: torch.Tensor, *, tau: float = 1.0, t: float = 0.1, eps: float = 1e-2) -> torch.Tensor:
    """The release's angular_spread branch, step by step, on a (B, L, F) batch without padding: z/(‖z‖+ε), cosines,
    the straight-through clamp to [−1+t, 1−t], D = arccos/π, logits −D/τ with the diagonal at −inf, and
    mean_b[logsumexp_{(i,j)}(logit + ε) − log(L(L−1))]."""
    batch, length, _ = z.shape
    unit = z / (torch.linalg.norm(z, dim=2, keepdim=True) + eps)
    cossim = unit @ unit.transpose(1, 2)
    clamped = cossim + (torch.clamp(cossim, -1 + t, 1 - t) - cossim).detach()
    logit = -(torch.arccos(clamped) / torch.pi) / tau
    logit = logit.masked_fill(torch.eye(length, dtype=torch.bool)[None], float("-inf")).reshape(batch, -1)
    return (torch.logsumexp(logit + eps, dim=1) - math.log(length * (length - 1))).mean()


def test_two_orthogonal_states_by_hand() -> None:
    """cos = 0 → D = arccos(0)/π = 1/2, both off-diagonal pairs exp(−1/2 / τ): log of their mean is −1/2, + ε."""
    states = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    spread = angular_spread(states, torch.ones(1, 2, dtype=torch.bool), temperature=1.0, clamp=0.1)
    assert spread.item() == pytest.approx(-0.5 + 1e-2, abs=1e-6)
    # τ = 0.5 doubles the logits; aligned states sit at the clamp: D = arccos(0.9)/π
    aligned = angular_spread(torch.tensor([[[1.0, 0.0], [2.0, 0.0]]]), torch.ones(1, 2, dtype=torch.bool),
                             temperature=0.5, clamp=0.1)  # fmt: skip
    assert aligned.item() == pytest.approx(-math.acos(0.9) / math.pi / 0.5 + 1e-2, abs=1e-5)


def test_the_loss_and_its_gradient_are_the_releases() -> None:
    torch.manual_seed(0)
    z = torch.randn(3, 7, 5, requires_grad=True)
    ours = angular_spread(z, torch.ones(3, 7, dtype=torch.bool), temperature=0.7, clamp=0.1).mean()
    (ours_grad,) = torch.autograd.grad(ours, z)
    theirs = released_angular_spread(z, tau=0.7)
    (theirs_grad,) = torch.autograd.grad(theirs, z)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-6)
    assert torch.allclose(ours_grad, theirs_grad, atol=1e-6)


def test_padding_leaves_a_sequence_as_its_unpadded_self() -> None:
    torch.manual_seed(1)
    z = torch.randn(1, 4, 3)
    padded = torch.cat([z, torch.randn(1, 2, 3)], dim=1)
    valid = torch.tensor([[True] * 4 + [False] * 2])
    assert angular_spread(padded, valid, temperature=1.0, clamp=0.1).item() == pytest.approx(
        released_angular_spread(z).item(), abs=1e-6)  # fmt: skip


def test_every_layer_by_default_the_embeddings_left_out() -> None:
    """layers=all (the release's --dispersion_loc all): the mean over the transformer layers' outputs."""
    torch.manual_seed(2)
    layers = tuple(torch.randn(2, 5, 4) for _ in range(3))  # embeddings, layer 1, layer 2
    mask = torch.ones(2, 5, dtype=torch.long)
    ids = torch.zeros(2, 5, dtype=torch.long)
    output = forward_output(hidden_states=layers[-1], attention_mask=mask, input_ids=ids, all_hidden_states=layers)
    term = DispersionTerm()
    assert term.requires == frozenset({"all_hidden_states"})
    expected = (released_angular_spread(layers[1]) + released_angular_spread(layers[2])) / 2
    assert term(output).loss.item() == pytest.approx(expected.item(), abs=1e-6)
    last = DispersionTerm(layers="last")(output).loss
    assert last.item() == pytest.approx(released_angular_spread(layers[2]).item(), abs=1e-6)


def test_its_file_and_yaml_are_all_it_took(tmp_path, capsys) -> None:  # noqa: ANN001
    """Issue 70.4: no list was edited for it. The declarations find it, --list shows it, a typo in its options is
    refused before any framework loads, and it trains and logs on a tiny decoder."""
    from degen_train.cli.listing import listing
    from degen_train.losses.declarations import check_term_sections, declared_terms

    assert declared_terms()["dispersion"].averages_over == ("sequences",)  # so its two-process case is derived
    assert "dispersion" in listing() and "temperature=1.0 (> 0)" in " ".join(listing().split())
    with pytest.raises(ValueError, match="regularizer.dispersion.temprature is not an option of loss term "
                                         "dispersion; did you mean temperature"):  # fmt: skip
        check_term_sections({"regularizer": {"dispersion": {"temprature": 1.0}}, "objective": {"mle": {}}})
    summary = run(tmp_path / "run", "recipe=gpt2_mle", "model=gpt2_tiny", "regularizer=dispersion",
                  "trainer.max_steps=3", "data.tokenizer.vocab_size=1000", "export_hf=false")  # fmt: skip
    assert summary["val_terms"]["dispersion"] is not None
    assert logged(tmp_path / "run", "train/dispersion/loss")
