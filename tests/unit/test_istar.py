"""I-STAR: IsoScore* against hand cases, the package-checked IsoScore, and the released shrinkage form."""

from __future__ import annotations

import pytest
import torch

from degen_train.losses.contract import TermContext
from degen_train.losses.istar import IsoScoreStarTerm, global_covariance, isoscore_of_covariance
from degen_train.metrics.isotropy import isoscore
from degen_train.models.output import ForwardOutput
from tests.helpers import forward_output


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
    return forward_output(hidden_states=hidden, attention_mask=torch.ones_like(ids), input_ids=ids)


def test_warm_up_prior_is_the_first_batch_and_shrinks_later_batches() -> None:
    """C0 = the first training batch's covariance (kept as a buffer); later: IsoScore*((1−ζ)C + ζC0), the
    released isoscore_star form; the loss is +IsoScore* (decrease) or −IsoScore* (increase)."""
    torch.manual_seed(1)
    term = IsoScoreStarTerm(zeta=0.2, prior="warmup")
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
    with pytest.raises(ValueError, match=r"regularizer.istar.zeta must be in \[0, 1\], got 1.5"):
        IsoScoreStarTerm(zeta=1.5)


def test_the_covariance_is_centred_before_it_is_summed() -> None:
    """States far from the origin (‖μ‖ ≈ 800, as a trained model's can be): float32 Σxxᵀ − N·μμᵀ loses the
    covariance to cancellation; the centred two-pass form keeps it (reference: torch.cov in float64)."""
    torch.manual_seed(2)
    points = torch.randn(4000, 16) * torch.linspace(0.5, 2.0, 16) + 200.0  # ‖μ‖ = 800
    exact = torch.cov(points.double().T)
    one_pass = (points.T @ points - 4000 * torch.outer(points.mean(0), points.mean(0))) / 3999
    assert (one_pass.double() - exact).abs().max() > 1e-2  # the cancellation this guards against
    torch.testing.assert_close(global_covariance(points).double(), exact, rtol=1e-4, atol=1e-4)
    assert isoscore_of_covariance(global_covariance(points)).item() == pytest.approx(
        isoscore_of_covariance(exact).item(), abs=1e-4
    )


def released_c0(batches: list[torch.Tensor], max_points: int) -> torch.Tensor:
    """bcbi-edu/p_eickhoff_isoscore I-STAR/training_utils.py get_ci, transcribed: the (B·T, H) states of batch
    after batch, stopping once more than max_points are collected, then np.cov of the stacked sample (float64)."""
    taken, count = [], 0
    for states_of_batch in batches:
        points = states_of_batch.reshape(-1, states_of_batch.shape[-1])
        taken.append(points.double().numpy())
        count += points.shape[0]
        if count > max_points:
            break
    import numpy as np

    return torch.from_numpy(np.cov(np.vstack(taken).T))


def test_refreshed_prior_is_the_released_sample_covariance() -> None:
    """prior=refresh: C0 from the upcoming batches, padded positions included and the embedding output left out
    of layers=all (released: hidden_states[1:]), until more than refresh_points states (here 3 of 5 batches)."""
    torch.manual_seed(3)
    layers = [[torch.randn(2, 6, 4) * (k + 1) for k in range(3)] for _ in range(5)]  # embeddings + 2 layers each
    outputs = []
    for hidden in layers:
        out = states(hidden[-1])
        mask = torch.ones(2, 6, dtype=torch.long)
        mask[1, 4:] = 0  # padding: counted, as released
        outputs.append(ForwardOutput(**{**out.__dict__, "attention_mask": mask, "all_hidden_states": tuple(hidden)}))
    term = IsoScoreStarTerm(layers="all", refresh_points=50)
    term.setup(TermContext(hidden_size=4, vocab_size=10, batch_size=2))
    assert term.states_wanted(0, steps_per_epoch=7) == 50 and term.states_wanted(3, 7) == 0
    assert term.states_wanted(7, 7) == 50  # every epoch, as released
    term.refresh(iter(outputs), 50)
    expected = released_c0([torch.cat(hidden[1:]) for hidden in layers], 50)  # 24 states a batch: 3 batches
    torch.testing.assert_close(term.prior_covariance.double(), expected, rtol=1e-5, atol=1e-6)
    assert bool(term.prior_ready)
    every = IsoScoreStarTerm(refresh_every_steps=5)
    assert [every.states_wanted(s, 7) > 0 for s in (0, 5, 7, 10)] == [True, True, False, True]
    assert IsoScoreStarTerm(prior="warmup").states_wanted(0, 7) == 0


def test_padding_exclude_leaves_padded_states_out() -> None:
    hidden = torch.randn(2, 3, 4)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    out = ForwardOutput(**{**states(hidden).__dict__, "attention_mask": mask})
    assert IsoScoreStarTerm(padding="exclude").states(out).shape == (4, 4)
    assert IsoScoreStarTerm().states(out).shape == (6, 4)
