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

    class Identity:
        gate_after_context = False

        def __call__(self, _site: object, x: torch.Tensor) -> torch.Tensor:
            return x

    quantization._active.append(Identity())
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
    monkeypatch.setattr(quantization, "quantize_weight", lambda w, bits=8, **_: w)
    monkeypatch.setattr(quantization, "quantize_activation", lambda x, low, high, bits=8: x)
    assert torch.allclose(quantized_logits(model, ids), reference, atol=1e-5)
    assert model.config._attn_implementation == "eager"


def released_mse_range(x: torch.Tensor, bits: int = 8, candidates: int = 100, margin: float = 0.5) -> tuple:
    """MSE_Estimator with OptMethod.grid (range_estimators.py), symmetric, transcribed: candidate thresholds
    linspace over (0, max|x| + margin], the squared error of each, the first minimum."""
    one_sided = bool(x.min() >= 0)
    top = torch.max(x.min().abs(), x.max()) + margin
    best_loss, best = None, None
    for i in range(1, candidates + 1):
        high = top * i / candidates
        low = torch.zeros(()) if one_sided else -high
        signed = bool(low < 0)
        scale = torch.clamp(torch.max(low.abs(), high) / (2.0 ** (bits - int(signed)) - 1), min=1e-8)
        grid_min, grid_max = (-(2.0 ** (bits - 1)) if signed else 0.0), 2.0 ** (bits - int(signed)) - 1
        loss = ((x - scale * torch.clamp(torch.round(x / scale), grid_min, grid_max)) ** 2).sum()
        if best_loss is None or loss < best_loss:
            best_loss, best = loss, (float(low), float(high))
    return best


@pytest.mark.parametrize("shift", [0.0, 3.0])
def test_mse_weight_range_equals_the_released_grid_search(shift: float) -> None:
    """OPT's setting (validate_clm.py --weight_quant_method MSE): the clipping threshold of least squared error."""
    weight = torch.randn(48, 24, generator=torch.Generator().manual_seed(6)) + shift
    weight[0, 0] = 12.0  # an outlier: the MSE range clips it, the min-max range would not
    low, high = quantization.mse_weight_range(weight)
    assert (low, high) == pytest.approx(released_mse_range(weight), rel=1e-6)
    assert high < 12.0
    clipped = quantize_weight(weight, low=low, high=high)
    assert ((clipped - weight) ** 2).sum() < ((quantize_weight(weight) - weight) ** 2).sum()


def test_percentile_running_range_equals_numpy_percentiles_with_momentum() -> None:
    """OPT's setting (--percentile 99.999): each batch's (0.001, 99.999) percentiles, then the running average."""
    import numpy as np

    generator = torch.Generator().manual_seed(7)
    batches = [torch.randn(8, 64, 16, generator=generator) * (1 + i) for i in range(3)]
    estimate = RunningRange(percentile=99.999)
    for x in batches:
        estimate.update(x)
    low, high = None, None
    for x in batches:
        b_low, b_high = np.percentile(x.numpy(), [0.001, 99.999])
        low = b_low if low is None else 0.9 * low + 0.1 * b_low
        high = b_high if high is None else 0.9 * high + 0.1 * b_high
    assert (estimate.low, estimate.high) == pytest.approx((low, high), rel=1e-6)


def calibrated_once(model: torch.nn.Module, ids: torch.Tensor, module: torch.nn.Module, **kwargs: object) -> dict:
    """The inputs and the output of ``module`` in a quantized forward, the ranges calibrated on the same batch (so
    every activation range is the min and max of the tensor it quantizes)."""
    seen: dict[str, object] = {}

    def inputs(_module: torch.nn.Module, args: tuple) -> None:
        seen["args"] = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]

    def output(_module: torch.nn.Module, _args: tuple, out: torch.Tensor) -> None:
        seen["out"] = out.clone()

    with simulated_w8a8(model, **kwargs) as finish_calibration, torch.no_grad():
        model(input_ids=ids)
        finish_calibration()
        handles = [module.register_forward_pre_hook(inputs), module.register_forward_hook(output)]
        model(input_ids=ids)
        for handle in handles:
            handle.remove()
    return seen


def minmax(x: torch.Tensor) -> torch.Tensor:
    return released_asymmetric(x, float(x.min()), float(x.max()))


def layer_norm_released(norm: torch.nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """QuantLayerNorm (autoquant_utils.py line 65) is a QuantizationHijacker: get_params quantizes its weight, γ
    (hijacker.py line 94), β stays float; then its output is quantized."""
    return minmax(torch.nn.functional.layer_norm(x, norm.normalized_shape, released_symmetric(norm.weight), norm.bias,
                                                 norm.eps))  # fmt: skip


def with_trained_norms(model: BertForMaskedLM) -> BertForMaskedLM:
    """γ and β away from their initial 1 and 0 (γ = 1 sits on any grid), as in a trained model."""
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.3 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))
    return model


def test_the_released_placement_quantizes_a_bert_output_block_as_the_released_code() -> None:
    """One BertSelfOutput under the released placement, against a transcription of quantized_bert.py's
    QuantizedBertSelfOutput.forward: the dense weight on its grid, its output quantized, the residual sum quantized
    (res_act_quantizer), then the LayerNorm with γ on its 8-bit grid (issue 44.3: γ was kept float) and its output
    quantized."""
    model = with_trained_norms(tiny_bert())
    block = model.bert.encoder.layer[0].attention.output
    ids = torch.randint(5, 120, (4, 16), generator=torch.Generator().manual_seed(8))
    seen = calibrated_once(model, ids, block)
    hidden, residual = seen["args"]
    with torch.no_grad():
        dense = minmax(hidden @ released_symmetric(block.dense.weight).T + block.dense.bias)
        expected = layer_norm_released(block.LayerNorm, minmax(dense + residual))
    assert torch.allclose(seen["out"], expected, atol=1e-5)


def test_bert_embeddings_are_quantized_as_the_released_embeddings() -> None:
    """Issue 44.3, against a transcription of quantized_bert.py's QuantizedBertEmbeddings.forward (lines 195-220):
    each lookup is a row of its quantized table and is not quantized again (QuantEmbedding's FP32Acts,
    autoquant_utils.py line 81); word + token type is quantized (line 211), then + position (line 216), then the
    LayerNorm with γ on its grid. Today's code re-quantized each lookup and skipped the word + token-type sum."""
    model = with_trained_norms(tiny_bert())
    embeddings = model.bert.embeddings
    with torch.no_grad():  # a token-type table that is not all but constant, as a trained one
        embeddings.token_type_embeddings.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(12))
    ids = torch.randint(5, 120, (4, 16), generator=torch.Generator().manual_seed(13))
    seen = calibrated_once(model, ids, embeddings)
    with torch.no_grad():
        word = torch.nn.functional.embedding(ids, released_symmetric(embeddings.word_embeddings.weight))
        token_type = released_symmetric(embeddings.token_type_embeddings.weight)[torch.zeros_like(ids)]
        position = released_symmetric(embeddings.position_embeddings.weight)[: ids.size(1)]
        summed = minmax(minmax(word + token_type) + position)
        expected = layer_norm_released(embeddings.LayerNorm, summed)
    assert torch.allclose(seen["out"], expected, atol=1e-5)


def test_the_mlp_is_quantized_where_each_released_model_quantizes_it() -> None:
    """Issue 54.3a. BERT: validate_mlm.py lines 158-160 replace every intermediate_act_fn by nn.GELU() before
    QuantizedBertForMaskedLM is built (line 451); nn.GELU is in hijacker.py's activations_set (line 15), so
    quantize_intermediate fuses dense and GELU: one quantizer after the GELU, the dense output (the pre-activation)
    in float. (Before: the dense output quantized and GELU's left float, argued from hijacker.py alone.) OPT
    (quantized_opt.py line 293): fc1 and its ReLU fused the same way."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = with_trained_norms(tiny_bert())
    intermediate = model.bert.encoder.layer[1].intermediate
    ids = torch.randint(5, 120, (4, 16), generator=torch.Generator().manual_seed(14))
    seen = calibrated_once(model, ids, intermediate)
    (hidden,) = seen["args"]
    with torch.no_grad():  # the transcription: QuantizedBertIntermediate over Sequential(dense, nn.GELU())
        dense = hidden @ released_symmetric(intermediate.dense.weight).T + intermediate.dense.bias
        expected = minmax(torch.nn.GELU()(dense))
        before = intermediate.intermediate_act_fn(minmax(dense))  # the placement of c266ffa
    assert torch.allclose(seen["out"], expected, atol=1e-5)
    assert not torch.allclose(seen["out"], before, atol=1e-3)

    torch.manual_seed(0)
    decoder = GPT2LMHeadModel(GPT2Config(vocab_size=90, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()  # fmt: skip
    mlp = decoder.transformer.h[1].mlp
    ids = torch.randint(0, 90, (3, 12), generator=torch.Generator().manual_seed(15))
    settings = quantization.QuantSettings("opt, min-max", "minmax", None, 4, 12, 3, activation_quantized=True,
                                          gate_after_context_quantizer=True)  # fmt: skip
    seen = calibrated_once(decoder, ids, mlp.act, settings=settings)
    (up,) = seen["args"]
    hidden = calibrated_once(decoder, ids, mlp.c_fc, settings=settings)["args"][0]
    with torch.no_grad():
        expected_up = hidden @ released_symmetric(mlp.c_fc.weight) + mlp.c_fc.bias
    assert torch.allclose(up, expected_up, atol=1e-5)  # the pre-activation in float
    assert torch.allclose(seen["out"], minmax(mlp.act(expected_up)), atol=1e-5)


def test_gpt2s_fused_qkv_is_quantized_as_three_projections() -> None:
    """Issue 44.3: OPT's q_proj, k_proj and v_proj are quantized each on its own (quantized_opt.py lines 68-70:
    a weight range and an output range per projection); GPT-2's c_attn computes the three in one Conv1D, which
    today's code gave one range. Now: the three weight blocks and the three output blocks each on their own grid."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=90, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()  # fmt: skip
    c_attn = model.transformer.h[0].attn.c_attn
    with torch.no_grad():
        c_attn.weight[:, 64:] *= 5  # v's weights far wider than q's and k's: one range would coarsen q and k
    ids = torch.randint(0, 90, (3, 12), generator=torch.Generator().manual_seed(16))
    seen = calibrated_once(model, ids, c_attn)
    (hidden,) = seen["args"]
    with torch.no_grad():
        weights, biases = c_attn.weight.chunk(3, dim=1), c_attn.bias.chunk(3)
        blocks = [hidden @ released_symmetric(w) + b for w, b in zip(weights, biases, strict=True)]
        expected = torch.cat([minmax(block) for block in blocks], dim=-1)
    assert torch.allclose(seen["out"], expected, atol=1e-5)


@pytest.mark.parametrize("placement", ["released", "all"])
def test_the_vocabulary_head_stays_float_only_in_the_released_placement(placement: str) -> None:
    """Released (quantized_bert.py's cls, OPT's fp32_head): the head maps the quantized last hidden state to logits
    in float; 'all' puts the head's weights and the logits on the 8-bit grid too."""
    model = tiny_bert()
    ids = torch.randint(5, 120, (4, 16), generator=torch.Generator().manual_seed(9))
    seen: dict[str, torch.Tensor] = {}
    model.cls.register_forward_pre_hook(lambda _m, args: seen.__setitem__("last", args[0].clone()))
    with simulated_w8a8(model, placement=placement) as finish_calibration, torch.no_grad():
        model(input_ids=ids)
        finish_calibration()
        logits = model(input_ids=ids).logits
    with torch.no_grad():
        float_head = model.cls(seen["last"])  # outside the context: the head in float on the same input
    if placement == "released":
        assert torch.allclose(logits, float_head, atol=1e-5)
        assert len(seen["last"].unique()) <= 256  # the body's last output is quantized
    else:
        assert not torch.allclose(logits, float_head, atol=1e-3) and len(logits.unique()) <= 256


def test_the_released_placement_quantizes_the_residual_stream_of_a_decoder() -> None:
    """Pre-norm decoders (OPT, GPT-2): the residual sum that enters each norm is quantized where it lives, so the
    next block adds to the quantized sum, as the released res_act_quantizer does."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=90, n_embd=32, n_layer=2, n_head=4, n_positions=32, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 90, (3, 12), generator=torch.Generator().manual_seed(10))
    sums: list[torch.Tensor] = []
    with simulated_w8a8(model, settings=quantization.SETTINGS["decoder"]) as finish_calibration, torch.no_grad():
        model(input_ids=ids)
        finish_calibration()
        handle = model.transformer.h[1].ln_1.register_forward_pre_hook(lambda _m, args: sums.append(args[0].clone()))
        model(input_ids=ids)
        handle.remove()
    assert len(sums) == 1 and len(sums[0].unique()) <= 256


@pytest.mark.parametrize(
    ("arch", "variant"),
    [("bert", ["model.attention_variant.name=clipped_softmax", "model.attention=eager"]),
     ("bert", ["model.attention_variant.name=gated"]), ("bert", ["model.attention_variant.name=output_gate"]),
     ("gpt2", ["model.attention_variant.name=gated"]), ("gpt2", ["model.attention_variant.name=kv_bias"]),
     ("gpt2", ["model.attention_variant.name=clipped_softmax", "model.attention=eager"])],
)  # fmt: skip
def test_the_w8a8_probe_runs_the_variant_the_model_was_trained_with(
    arch: str, variant: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44.1: the probe swapped in a plain-softmax attention, so clipped softmax became plain softmax and the
    gates and the key/value slot did not run while the float baseline kept them (a gated encoder's gap 0.19 as
    probed, 0.003 with its gate). With the rounding made the identity, the probe computes the model exactly."""
    from degen_train.models.backbone import build_hf_model
    from tests.unit.test_architecture_builds import tiny

    cfg, tokenizer = tiny(arch, *variant)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False, sequence_length=16).eval()
    for module in model.modules():  # gates away from their initial ½ and ¼, so a probe without them shows
        for name in ("attention_gate", "attention_kv_bias"):
            if hasattr(module, name):
                for parameter in getattr(module, name).parameters():
                    torch.nn.init.normal_(parameter, std=1.0)
    ids = torch.randint(5, len(tokenizer), (4, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    monkeypatch.setattr(quantization, "quantize_weight", lambda w, bits=8, **_: w)
    monkeypatch.setattr(quantization, "quantize_activation", lambda x, low, high, bits=8: x)
    assert (quantized_logits(model, ids) - reference).abs().max() <= 1e-5


def test_the_sink_probe_reads_the_variants_own_attention_maps() -> None:
    """Issue 44.1: the sink rate read attention through HF's eager attention, without the variant's gates, so every
    layer after the first saw other inputs than the trained model's. The probe's entropies per head are now those of
    the model's own maps (degen_eager: clipped softmax, gates, the key/value slot)."""
    from degen_train.metrics.outlier_sites import sinks_on_windows
    from degen_train.metrics.outliers import attention_entropy
    from degen_train.models.backbone import build_hf_model
    from tests.unit.test_architecture_builds import CORPUS, tiny

    cfg, tokenizer = tiny("gpt2", "model.attention_variant.name=output_gate")
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False, sequence_length=64).eval()
    for module in model.modules():
        if hasattr(module, "attention_gate"):
            torch.nn.init.normal_(module.attention_gate.proj.weight, std=10.0)
    probe = sinks_on_windows(model, tokenizer, [" ".join(CORPUS)] * 8, limit=2)
    from degen_train.metrics.w8a8_probe import token_blocks

    ids = torch.tensor([[tokenizer.bos_token_id, *window] for window in  # a decoder's window opens with its BOS
                        token_blocks(tokenizer, [" ".join(CORPUS)] * 8, 63)[:2]])  # fmt: skip
    model.set_attn_implementation("degen_eager")
    with torch.no_grad():
        maps = model(input_ids=ids, output_attentions=True).attentions
    expected = torch.stack([attention_entropy(m.float()) for m in maps]).tolist()
    assert probe["attention_sink_windows"] == 2
    assert torch.allclose(torch.tensor(probe["attention_entropy_per_head"]), torch.tensor(expected), rtol=0, atol=1e-7)


def test_an_attention_gate_stays_float_as_the_released_alpha() -> None:
    """quantized_bert.py line 258 / quantized_opt.py line 88: ``self.alpha = org_model.alpha  # do not quantize for
    now``: the gate's weights and outputs are not quantized (today's code put the output gate's projection on the
    grid)."""
    from degen_train.models.backbone import build_hf_model
    from tests.unit.test_architecture_builds import tiny

    cfg, tokenizer = tiny("bert", "model.attention_variant.name=output_gate")
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False, sequence_length=16).eval()
    gates = [m.attention_gate for m in model.modules() if hasattr(m, "attention_gate")]
    before = [gate.proj.weight.clone() for gate in gates]
    outputs: list[torch.Tensor] = []
    handles = [gate.proj.register_forward_hook(lambda _m, _a, out: outputs.append(out.clone())) for gate in gates]
    ids = torch.randint(5, len(tokenizer), (4, 16), generator=torch.Generator().manual_seed(1))
    with simulated_w8a8(model) as finish_calibration, torch.no_grad():
        model(input_ids=ids)
        finish_calibration()
        assert all(torch.equal(gate.proj.weight, w) for gate, w in zip(gates, before, strict=True))
        model(input_ids=ids)
    for handle in handles:
        handle.remove()
    assert outputs and all(len(out.unique()) > 256 for out in outputs)  # off any 8-bit grid


def test_embeddings_that_skip_their_token_types_are_named_not_mismeasured() -> None:
    """The word + token-type sum is quantized by handing the forward zeros for the word rows and the sum with the
    token-type rows; an embeddings forward that never looks up its token types would lose the word rows: refused."""
    model = tiny_bert()
    embeddings = model.bert.embeddings

    def forward(input_ids: torch.Tensor | None = None, **_: object) -> torch.Tensor:
        return embeddings.LayerNorm(embeddings.word_embeddings(input_ids))

    embeddings.forward = forward
    ids = torch.randint(5, 120, (2, 8), generator=torch.Generator().manual_seed(17))
    with pytest.raises(RuntimeError, match="without its token types"), simulated_w8a8(model), torch.no_grad():
        model(input_ids=ids)


class _Stub(torch.nn.Module):
    """An attention module as the quantized attention reads it: a head gate, no config, no key/value slot."""

    def __init__(self, heads: int, head_dim: int) -> None:
        super().__init__()
        from degen_train.models.attention_variants import HeadGate

        self.attention_gate = HeadGate(heads, head_dim, form="linear", init=None)
        torch.nn.init.normal_(self.attention_gate.weight, std=1.0)


def quantized_attention_output(module: _Stub, x: torch.Tensor, qkv: tuple, *, gate_after: bool) -> torch.Tensor:
    """The quantized attention's output (B, T, H, d) with its ranges calibrated on the same tensors."""
    quantizers = quantization._Quantizers(gate_after_context=gate_after)
    quantization._active.append(quantizers)
    try:
        with torch.no_grad():
            for _ in range(2):  # calibrate, then fix the ranges and run again
                module.__dict__["attention_gate_input"] = x
                out, _ = quantization._quantized_attention(module, *qkv, None)
                quantizers.calibrating = False
    finally:
        quantization._active.remove(quantizers)
    return out


def test_a_gated_decoder_quantizes_its_context_before_the_gate_as_released() -> None:
    """Issue 54.3b, against a transcription of quantized_opt.py's QuantizedOPTAttentionWithExtras.forward: scores
    quantized (attn_scores_act_quantizer), softmax, probabilities quantized, P @ V quantized (context_act_quantizer,
    line 211), then the gate (lines 225-258), the gated context not quantized again. An encoder keeps BERT's order
    (quantized_bert.py lines 423, 435: the gate, then the context quantizer). Before: the gate came first for every
    family."""
    batch, heads, length, head_dim = 2, 4, 6, 8
    generator = torch.Generator().manual_seed(21)
    module = _Stub(heads, head_dim).eval()
    x = torch.randn(batch, length, heads * head_dim, generator=generator)
    qkv = tuple(torch.randn(batch, heads, length, head_dim, generator=generator) for _ in range(3))
    query, key, value = qkv
    with torch.no_grad():
        gate = module.attention_gate(x).transpose(1, 2)  # (B, H, T, 1)
        scores = minmax(query @ key.transpose(2, 3) * head_dim**-0.5)
        probabilities = minmax(torch.softmax(scores, dim=-1))
        context = probabilities @ value  # (B, H, T, d)
        opt = (minmax(context) * gate).transpose(1, 2)  # quantized_opt.py: quantize, then gate
        bert = minmax(context * gate).transpose(1, 2)  # quantized_bert.py: gate, then quantize
    decoder = quantized_attention_output(module, x, qkv, gate_after=True)
    encoder = quantized_attention_output(module, x, qkv, gate_after=False)
    assert (decoder - opt).abs().max() <= 1e-6 and (encoder - bert).abs().max() <= 1e-6
    assert (opt - bert).abs().max() > 1e-3  # the two orders differ: the test can tell them apart
    assert quantization.SETTINGS["decoder"].gate_after_context_quantizer
    assert not quantization.SETTINGS["encoder"].gate_after_context_quantizer
