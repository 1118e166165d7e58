"""Spectrum control: penalties against hand-computed cases, the reparameterisation leaves the model's function
unchanged, ties the input and output matrices, trains its factors, and folds back for export."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from degen_train.losses.contract import TermContext
from degen_train.losses.spectrum import (
    SpectralFactors,
    SpectrumControlTerm,
    fold_spectral_state,
    spectrum_penalties,
)
from degen_train.models.backbone import Backbone


def factors_of(left: torch.Tensor, singular: torch.Tensor, right: torch.Tensor) -> SpectralFactors:
    factors = SpectralFactors(torch.randn(left.shape[0], left.shape[1]))
    with torch.no_grad():
        factors.left.copy_(left), factors.singular.copy_(singular), factors.right.copy_(right)
    return factors


def test_hand_cases() -> None:
    """U, V orthonormal -> orthogonality 0. σ = (2, 1), polynomial decay 1: σ/σ_1 = (1, 1/2) = p -> 0.
    σ = (2, 2): σ/σ_1 = (1, 1) vs p = (1, 1/2): mean(0², 0.5²) = 0.125; exponential decay ln 2 gives the same p.
    U = 2·I: UᵀU − I = 3·I: mean over the 2×2 entries (9 + 9) / 4 = 4.5."""
    eye = torch.eye(2)
    orth, spec = spectrum_penalties(factors_of(eye, torch.tensor([2.0, 1.0]), eye), profile="polynomial", decay=1.0)
    assert orth.item() == pytest.approx(0.0) and spec.item() == pytest.approx(0.0)
    for profile, decay in (("polynomial", 1.0), ("exponential", float(torch.log(torch.tensor(2.0))))):
        _, spec = spectrum_penalties(factors_of(eye, torch.tensor([2.0, 2.0]), eye), profile=profile, decay=decay)
        assert spec.item() == pytest.approx(0.125, rel=1e-6)
    orth, _ = spectrum_penalties(factors_of(2 * eye, torch.ones(2), eye), profile="polynomial", decay=1.0)
    assert orth.item() == pytest.approx(4.5)


def tiny_gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=8, n_layer=1, n_head=2, n_positions=16))


def test_the_reparameterised_model_computes_the_same_function_and_trains_its_factors() -> None:
    model = tiny_gpt2().eval()
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    before = model(ids).logits
    backbone = Backbone(model)
    term = SpectrumControlTerm()
    term.setup(TermContext(hidden_size=8, vocab_size=50, batch_size=2, backbone=backbone))
    after = model(ids).logits
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)
    assert model.transformer.wte.weight is model.lm_head.weight  # still tied: one computed matrix
    assert "transformer.wte.weight" not in dict(model.named_parameters())
    after.sum().backward()
    term(None).loss.backward()
    factors = model.spectral_factors
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in factors.parameters())


def test_fold_writes_the_plain_matrix_under_both_tied_names() -> None:
    model = tiny_gpt2()
    plain = tiny_gpt2()
    SpectrumControlTerm().setup(TermContext(hidden_size=8, vocab_size=50, batch_size=2, backbone=Backbone(model)))
    folded = fold_spectral_state(model.state_dict(), plain)
    assert not any(k.startswith("spectral_factors") for k in folded)
    torch.testing.assert_close(folded["transformer.wte.weight"], model.spectral_factors().detach())
    assert folded["lm_head.weight"] is folded["transformer.wte.weight"]
    plain.load_state_dict(folded)
    torch.testing.assert_close(plain.transformer.wte.weight, model.transformer.wte.weight.detach())


def test_bad_options_name_the_choices() -> None:
    with pytest.raises(ValueError, match=r"profile='linear' is not one of polynomial, exponential"):
        SpectrumControlTerm(profile="linear")
    with pytest.raises(ValueError, match=r"decay must be >= 0, got -1"):
        SpectrumControlTerm(decay=-1)


def test_degen_convert_folds_a_checkpoint_written_with_factors() -> None:
    """A checkpoint holds U, σ, V and no embedding matrix: the converted model carries their product."""
    from degen_train.cli.conversion import MODEL_PREFIX, hf_model_of

    model = tiny_gpt2()
    SpectrumControlTerm().setup(TermContext(hidden_size=8, vocab_size=50, batch_size=2, backbone=Backbone(model)))
    checkpoint = {
        "state_dict": {MODEL_PREFIX + k: v for k, v in model.state_dict().items()},
        "degen_train": {
            "hf_class": "GPT2LMHeadModel",
            "hf_config": model.config.to_diff_dict() | {"model_type": "gpt2"},
        },
    }
    converted = hf_model_of(checkpoint)
    torch.testing.assert_close(converted.transformer.wte.weight, model.spectral_factors().detach())
    assert converted.lm_head.weight is converted.transformer.wte.weight
