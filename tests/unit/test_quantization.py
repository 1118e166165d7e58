"""W8A8 simulated quantization (metrics/quantization.py) against a transcription of Bondarenko et al. 2023's released
quantizers (Qualcomm-AI-research/outlier-free-transformers, quantization/quantizers/uniform_quantizers.py and
quantization/range_estimators.py), on identical tensors."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from degen_train.metrics import quantization
from degen_train.metrics.quantization import RunningRange, quantize_activation, quantize_weight, simulated_w8a8


def released_symmetric(x: torch.Tensor, bits: int = 8, eps: float = 1e-8) -> torch.Tensor:
    """SymmetricUniformQuantizer.set_quant_range(CurrentMinMaxEstimator(x)) then forward, transcribed."""
    x_min, x_max = torch.min(x.min(), torch.zeros(())), torch.max(x.max(), torch.tensor(eps))
    signed = bool(x_min < 0)
    delta = torch.max(x_min.abs(), x_max) / (2.0 ** (bits - int(signed)) - 1)
    int_min, int_max = (-(2.0 ** (bits - 1)) if signed else 0.0), 2.0 ** (bits - int(signed)) - 1
    scale = torch.clamp(delta, min=eps)
    return scale * torch.clamp(torch.round(x / scale), int_min, int_max)


def released_asymmetric(x: torch.Tensor, x_min: float, x_max: float, bits: int = 8, eps: float = 1e-8) -> torch.Tensor:
    """AsymmetricUniformQuantizer.set_quant_range(x_min, x_max) then forward, transcribed."""
    low, high = torch.min(torch.tensor(x_min), torch.zeros(())), torch.max(torch.tensor(x_max), torch.tensor(eps))
    int_max = 2.0**bits - 1
    delta = (high - low) / int_max
    scale = torch.clamp(delta, min=eps)
    zero_point = torch.clamp(torch.round(-low / delta), 0.0, int_max)
    return scale * (torch.clamp(torch.round(x / scale) + zero_point, 0.0, int_max) - zero_point)


def released_running_minmax(batches: list[torch.Tensor], momentum: float = 0.9) -> tuple[float, float]:
    low = high = None
    for x in batches:
        if low is None:
            low, high = x.min(), x.max()
        else:
            low = (1 - momentum) * x.min() + momentum * low
            high = (1 - momentum) * x.max() + momentum * high
    return float(low), float(high)


@pytest.mark.parametrize("shift", [0.0, 3.0])  # a signed weight, and one with no negative value (unsigned grid)
def test_weight_quantization_equals_the_released_symmetric_quantizer(shift: float) -> None:
    weight = torch.randn(64, 32, generator=torch.Generator().manual_seed(0)) + shift
    weight[3, 4] = 9.0  # an outlier sets the range: every other weight loses resolution
    ours = quantize_weight(weight)
    assert torch.allclose(ours, released_symmetric(weight), atol=1e-6)
    assert len(ours.unique()) <= 256 and not torch.equal(ours, weight)


def test_activation_quantization_and_running_range_equal_the_released_code() -> None:
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randn(4, 16, 8, generator=generator) * (1 + i) + 0.5 for i in range(5)]
    estimate = RunningRange()
    for x in batches:
        estimate.update(x)
    assert (estimate.low, estimate.high) == pytest.approx(released_running_minmax(batches), rel=1e-6)
    x = batches[-1] * 1.5  # some values beyond the estimated range: clamped to it
    ours = quantize_activation(x, estimate.low, estimate.high)
    assert torch.allclose(ours, released_asymmetric(x, estimate.low, estimate.high), atol=1e-5)
    positive = torch.rand(100, generator=generator) + 1  # the range is widened to include 0, as released
    assert torch.allclose(quantize_activation(positive, 1.0, 2.0), released_asymmetric(positive, 1.0, 2.0), atol=1e-6)


def tiny_bert(seed: int = 0) -> BertForMaskedLM:
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return BertForMaskedLM(config).eval()


def quantized_logits(model: BertForMaskedLM, ids: torch.Tensor) -> torch.Tensor:
    with simulated_w8a8(model) as finish_calibration, torch.no_grad():
        for batch in ids.split(4):
            model(input_ids=batch)
        finish_calibration()
        return model(input_ids=ids).logits


def test_the_model_is_given_back_unchanged_and_quantized_inside() -> None:
    model = tiny_bert()
    ids = torch.randint(5, 120, (16, 20), generator=torch.Generator().manual_seed(2))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    before = model.config._attn_implementation
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    quantized = quantized_logits(model, ids)
    assert not torch.equal(quantized, reference)
    assert (quantized - reference).abs().max() < 0.1 * reference.abs().max()  # 8 bits: close, not equal
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())  # weights restored
    assert model.config._attn_implementation == before and not quantization._active
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, reference)  # no hook left behind


def test_the_quantized_attention_without_quantizers_is_eager_attention() -> None:
    """The registered attention function, its quantizers made the identity, equals transformers' eager attention."""
    from transformers.models.bert.modeling_bert import eager_attention_forward

    generator = torch.Generator().manual_seed(3)
    query, key, value = (torch.randn(2, 4, 6, 8, generator=generator) for _ in range(3))
    mask = torch.zeros(2, 1, 6, 6)
    mask[1, ..., 4:] = torch.finfo(torch.float32).min  # the second sequence has two padded keys
    module = torch.nn.Module().eval()
    quantization._active.append(lambda _site, x: x)
    try:
        ours = quantization._quantized_attention(module, query, key, value, mask, scaling=0.3)
    finally:
        quantization._active.pop()
    reference = eager_attention_forward(module, query, key, value, mask, scaling=0.3)
    assert torch.allclose(ours[0], reference[0], atol=1e-6) and torch.allclose(ours[1], reference[1], atol=1e-6)


def test_an_outlier_dimension_makes_the_quantization_error_grow() -> None:
    """Bondarenko et al.'s finding on a controlled case: the same model with one outlier dimension in its residual
    stream (a LayerNorm γ entry × 100, as in BERT's outlier dimensions) loses far more under W8A8."""
    ids = torch.randint(5, 120, (32, 24), generator=torch.Generator().manual_seed(4))

    def relative_error(model: BertForMaskedLM) -> float:
        with torch.no_grad():
            reference = model(input_ids=ids).logits
        return float((quantized_logits(model, ids) - reference).norm() / reference.norm())

    plain = tiny_bert()
    with_outlier = tiny_bert()
    with torch.no_grad():
        for layer in with_outlier.bert.encoder.layer:
            layer.output.LayerNorm.weight[7] *= 100
        with_outlier.bert.embeddings.LayerNorm.weight[7] *= 100
    assert relative_error(with_outlier) > 2.5 * relative_error(plain)  # measured: 0.107 vs 0.028


@pytest.mark.parametrize("family", ["gpt2", "llama"])  # a causal mask; grouped-query attention (2 key heads for 4)
def test_a_decoder_through_the_quantized_path_with_identity_quantizers_is_the_eager_model(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With rounding made the identity, simulated_w8a8 changes nothing: its registered attention (masks, key/value
    heads) computes what transformers' eager attention does; with rounding, the logits move but stay close."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if family == "gpt2":
        config = GPT2Config(vocab_size=90, n_embd=32, n_layer=2, n_head=4, n_positions=32, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
        model = GPT2LMHeadModel(config).eval()
    else:
        config = LlamaConfig(vocab_size=90, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
        model = LlamaForCausalLM(config).eval()
    model.set_attn_implementation("eager")
    ids = torch.randint(0, 90, (3, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    quantized = quantized_logits(model, ids)
    assert not torch.equal(quantized, reference) and (quantized - reference).norm() < 0.2 * reference.norm()
    monkeypatch.setattr(quantization, "quantize_weight", lambda w, bits=8: w)
    monkeypatch.setattr(quantization, "quantize_activation", lambda x, low, high, bits=8: x)
    assert torch.allclose(quantized_logits(model, ids), reference, atol=1e-5)
    assert model.config._attn_implementation == "eager"
