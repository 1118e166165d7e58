"""I-STAR: IsoScore* against hand cases, the package-checked IsoScore, and the released shrinkage form."""

from __future__ import annotations

import pytest
import torch

from degen_train.metrics.isotropy import isoscore
from degen_train.regularizers.istar import IsoScoreStarTerm, global_covariance, isoscore_of_covariance
from degen_train.terms import TermContext
from degen_train.types import ForwardOutput
from tests.unit.test_simctg import output


def test_hand_cases_isotropic_is_one_and_one_direction_is_zero() -> None:
    assert isoscore_of_covariance(torch.eye(4)).item() == pytest.approx(1.0, abs=1e-6)
    assert isoscore_of_covariance(torch.diag(torch.tensor([1.0, 0, 0, 0]))).item() == pytest.approx(0.0, abs=1e-6)


def test_equals_isoscore_of_the_points_and_is_differentiable() -> None:
    """On a point cloud, IsoScore* with ζ = 0 is the IsoScore that metrics.isotropy computes (checked there
    against the isoscore package); torch.cov is the covariance the released istar.py takes."""
    torch.manual_seed(0)
    points = (torch.randn(300, 6) * torch.tensor([3.0, 2, 1, 1, 0.5, 0.1])).requires_grad_()
    covariance = global_covariance(points)
    torch.testing.assert_close(covariance, torch.cov(points.T), rtol=1e-5, atol=1e-5)
    score = isoscore_of_covariance(covariance)
    assert score.item() == pytest.approx(isoscore(points.detach()), abs=1e-5)
    score.backward()
    assert points.grad is not None and points.grad.isfinite().all() and points.grad.abs().sum() > 0


def states(hidden: torch.Tensor) -> ForwardOutput:
    batch, length = hidden.shape[:2]
    ids = torch.zeros(batch, length, dtype=torch.long)
    return output(hidden_states=hidden, attention_mask=torch.ones_like(ids), input_ids=ids)


def test_warm_up_prior_is_the_first_batch_and_shrinks_later_batches() -> None:
    """C0 = the first training batch's covariance (kept as a buffer); later: IsoScore*((1−ζ)C + ζC0), the
    released isoscore_star form; the loss is +IsoScore* (decrease) or −IsoScore* (increase)."""
    torch.manual_seed(1)
    term = IsoScoreStarTerm(zeta=0.2)
    term.setup(TermContext(hidden_size=4, vocab_size=10, batch_size=2))
    first, second = torch.randn(2, 8, 4), torch.randn(2, 8, 4) * torch.tensor([4.0, 1, 1, 0.2])
    term.train()
    assert term(states(first)).loss.item() == pytest.approx(
        isoscore_of_covariance(torch.cov(first.reshape(-1, 4).T)).item()
    )
    assert bool(term.prior_ready)
    torch.testing.assert_close(term.prior_covariance, torch.cov(first.reshape(-1, 4).T), rtol=1e-5, atol=1e-6)
    shrunk = 0.8 * torch.cov(second.reshape(-1, 4).T) + 0.2 * torch.cov(first.reshape(-1, 4).T)
    assert term(states(second)).loss.item() == pytest.approx(isoscore_of_covariance(shrunk).item(), rel=1e-5)
    assert "prior_covariance" in term.state_dict() and term.state_dict()["prior_covariance"].shape == (4, 4)
    increase = IsoScoreStarTerm(direction="increase", prior="identity")
    increase.setup(TermContext(hidden_size=4, vocab_size=10, batch_size=2))
    expected = isoscore_of_covariance(0.8 * torch.cov(second.reshape(-1, 4).T) + 0.2 * torch.eye(4))
    assert increase(states(second)).loss.item() == pytest.approx(-expected.item(), rel=1e-5)


def test_bad_options_name_the_choices() -> None:
    with pytest.raises(ValueError, match=r"regularizer.istar.direction='up' is not one of increase, decrease"):
        IsoScoreStarTerm(direction="up")
    with pytest.raises(ValueError, match=r"regularizer.istar.zeta=1.5: the shrinkage weight lies in \[0, 1\]"):
        IsoScoreStarTerm(zeta=1.5)
