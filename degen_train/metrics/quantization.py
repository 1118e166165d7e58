"""W8A8 simulated quantization of a model, placed and estimated as Bondarenko, Nagel, Blankevoort (NeurIPS 2023)
report their W8A8 numbers (Qualcomm-AI-research/outlier-free-transformers): 8-bit uniform, per tensor; weights
symmetric, activations asymmetric with a running min-max range (momentum 0.9) estimated on calibration batches,
then fixed.

Where the quantizers sit (``placement``):
- ``released`` (the default): as ``quantized_bert.py`` / ``quantized_opt.py`` place them, with the library versions
  the release pins (transformers 4.31). Quantized:
  - the weights of every linear and 1-D convolution (GPT-2's ``Conv1D``) of the body, every embedding table, and
    every LayerNorm/RMSNorm γ (``QuantLayerNorm`` is a ``QuantizationHijacker``: its weight goes through the weight
    quantizer, β stays float; ``autoquant_utils.py`` line 65, ``hijacker.py`` line 94);
  - the outputs of those linears and norms; an embedding lookup is the quantized table's rows, not quantized again
    (``QuantEmbedding``'s ``FP32Acts``, ``autoquant_utils.py`` line 81);
  - the MLP's up-projection and activation fused, one quantizer after the activation, in both releases: OPT's
    ``fc1`` and its ``nn.ReLU`` (``quantized_opt.py`` line 293); BERT's ``dense`` and GELU, because
    ``validate_mlm.py`` (lines 158-160) replaces every ``intermediate_act_fn`` by ``nn.GELU()`` before building
    ``QuantizedBertForMaskedLM`` (line 451), and ``nn.GELU`` is in the hijacker's ``activations_set``
    (``hijacker.py`` line 15), so ``quantize_intermediate`` fuses them. The up-projection's own output, the
    pre-activation, stays float. Families without a release follow the same rule: ModernBERT's GeGLU quantizes its
    ``Wi`` output (not a named up-projection: the product's two halves are read apart) and its activation's;
    Llama/Qwen2's SwiGLU quantizes after the activation of ``gate_proj`` and the output of ``up_proj``;
  - GPT-2's fused q, k, v projection (``c_attn``; ModernBERT's ``Wqkv``) as three projections, each with its own
    weight range and output range, as OPT's ``q_proj``, ``k_proj``, ``v_proj`` are (``quantized_opt.py`` line 68);
  - the embedding sums: word + token type (``sum_input_token_type_embd_act_quantizer``, ``quantized_bert.py``
    line 211), then + position, which is the first norm's input (below);
  - inside attention, the scores, the probabilities and the context, the variant's softmax and gate kept; where the
    gate sits as released (``QuantSettings.gate_after_context_quantizer``): an encoder gates before the context
    quantizer (``quantized_bert.py`` lines 249, 423, 435), a decoder quantizes the context and then gates it
    (``quantized_opt.py`` line 211, then 225-258; the gated context is not quantized again, the output projection's
    output is). The gate itself stays float (``self.alpha = org_model.alpha  # do not quantize for now``,
    ``quantized_bert.py`` line 258, ``quantized_opt.py`` line 87). The output gate (no release) follows its family's
    attention gate; ModernBERT follows BERT's rule, Llama/Qwen2 OPT's;
  - the residual sums (every norm's input, quantized in place, so the residual stream itself carries the quantized
    sum, as the released ``res_act_quantizer`` does).
  In float: the vocabulary head (BERT's ``cls``, OPT's ``fp32_head``: its transform and output layer, weights and
  outputs) and so the logits.
- ``all``: this project's first placement, kept for comparison: the head's weights and the logits quantized too,
  the residual and embedding sums in float. Its gap mixes the rounding every model pays at the vocabulary with the
  outlier damage the experiment is about.

Range estimation (``QuantSettings``): BERT's (``validate_mlm.py``: current min-max weight ranges, running min-max
activation ranges, 16 calibration batches) or OPT's (``validate_clm.py`` and the README's INT8 command: weight ranges
by MSE over a grid of 100 candidates, activation ranges from the 99.999th percentile of each batch, running, 4
calibration batches of 512-token blocks).

The rounding and clamping are torch's own fake-quantization op (``torch.fake_quantize_per_tensor_affine``); what is
written here is the range estimation and where the quantizers sit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from degen_train.models.attention_variants import gated, variant_probabilities

BITS = 8
MOMENTUM = 0.9  # released RunningMinMaxEstimator
CALIBRATION_BATCHES = 16  # released act_quant.num_batches (BERT's --est_num_batches)
ATTENTION_NAME = "degen_w8a8"
_EPS = 1e-8  # released quantizers' eps: the smallest range end and scale
MSE_CANDIDATES, MSE_MARGIN = 100, 0.5  # released MSE_Estimator: num_candidates, range_margin
PLACEMENTS = ("released", "all")


@dataclass(frozen=True)
class QuantSettings:
    """How ranges are estimated and how much text calibrates and is scored (the released validation scripts)."""

    name: str
    weight_range: Literal["minmax", "mse"]
    percentile: float | None  # activation ranges from the (100 − p, p) percentiles of each batch; None: min and max
    calibration_batches: int
    block: int  # tokens per sequence
    batch_size: int  # sequences per calibration batch
    # the MLP activation's output quantized, fused with its up-projection (both releases: OPT's fc1 + ReLU; BERT's
    # dense + nn.GELU, which validate_mlm.py puts in place of GELUActivation), or left float with the up-projection's
    # output quantized (kept for comparison: what quantize_intermediate does with HF's GELUActivation)
    activation_quantized: bool
    # a gated attention's context quantized before the gate (OPT, quantized_opt.py) or after it (BERT)
    gate_after_context_quantizer: bool = False


SETTINGS = {
    # validate_mlm.py --quantize --est_num_batches 16 --max_seq_length 128 --per_device_eval_batch_size 32
    "encoder": QuantSettings("bert", "minmax", None, 16, 128, 32, activation_quantized=True),
    # validate_clm.py --quantize --quant_setup fp32_head --percentile 99.999 --est_num_batches 4 --block_size 512,
    # MSE weight ranges (grid), calibration on the training loader's batches of 8
    "decoder": QuantSettings("opt", "mse", 99.999, 4, 512, 8, activation_quantized=True,
                             gate_after_context_quantizer=True),
}


def quantize_weight(weight: Tensor, bits: int = BITS, *, low: float | None = None, high: float | None = None) -> Tensor:
    """Symmetric uniform per-tensor fake quantization: Δ = max(|min(low, 0)|, max(high, ε)) / (2^(b−s) − 1), s = 1
    when min(low, 0) < 0, grid [−2^(b−1), 2^(b−1) − 1] (s = 0: [0, 2^b − 1]); the range is the tensor's current
    min and max unless given; Bondarenko et al. 2023 (SymmetricUniformQuantizer.set_quant_range, CurrentMinMax)."""
    low = float(weight.min()) if low is None else low
    high = float(weight.max()) if high is None else high
    low, high = min(low, 0.0), max(high, _EPS)
    signed = low < 0
    grid_max = 2 ** (bits - int(signed)) - 1
    grid_min = -(2 ** (bits - 1)) if signed else 0
    scale = max(max(abs(low), high) / grid_max, _EPS)
    return torch.fake_quantize_per_tensor_affine(weight.float(), scale, 0, grid_min, grid_max).to(weight.dtype)


def mse_weight_range(weight: Tensor, bits: int = BITS) -> tuple[float, float]:
    """(low, high) of the symmetric range with the least squared error over a grid of 100 candidates: threshold
    c·(max(|min w|, max w) + 0.5)/100, c = 1..100 ([0, t] when no weight is negative); the first minimum wins;
    Bondarenko et al. 2023 (MSE_Estimator, OptMethod.grid, _perform_1D_search)."""
    data = weight.detach().float()
    one_sided = bool(data.min() >= 0)
    step = (max(abs(float(data.min())), float(data.max())) + MSE_MARGIN) / MSE_CANDIDATES
    losses = []
    for candidate in range(1, MSE_CANDIDATES + 1):
        high = step * candidate
        low = 0.0 if one_sided else -high
        losses.append(float(((data - quantize_weight(data, bits, low=low, high=high)) ** 2).sum()))
    best = 1 + min(range(MSE_CANDIDATES), key=losses.__getitem__)
    return (0.0 if one_sided else -step * best), step * best


def quantize_activation(x: Tensor, low: float, high: float, bits: int = BITS) -> Tensor:
    """Asymmetric uniform per-tensor fake quantization of ``x`` to the range [min(low, 0), max(high, ε)]:
    Δ = range / (2^b − 1), z = clamp(round(−low / Δ), 0, 2^b − 1), x̂ = Δ·(clamp(round(x/Δ) + z, 0, 2^b − 1) − z);
    Bondarenko et al. 2023 (AsymmetricUniformQuantizer)."""
    low, high = min(low, 0.0), max(high, _EPS)
    grid_max = 2**bits - 1
    scale = max((high - low) / grid_max, _EPS)
    zero_point = int(min(max(round(-low / scale), 0), grid_max))
    return torch.fake_quantize_per_tensor_affine(x.float(), scale, zero_point, 0, grid_max).to(x.dtype)


class RunningRange:
    """min and max of the tensors seen: the first batch's, then m·previous + (1 − m)·current, m = 0.9 (released
    RunningMinMaxEstimator); with ``percentile`` p, each batch's (100 − p)th and pth percentiles (numpy's, linear
    interpolation, as released) instead of its min and max."""

    def __init__(self, momentum: float = MOMENTUM, percentile: float | None = None) -> None:
        self.momentum, self.percentile = momentum, percentile
        self.low: float | None = None
        self.high: float | None = None

    def update(self, x: Tensor) -> None:
        if self.percentile is not None:
            low, high = (float(v) for v in np.percentile(x.detach().float().cpu().numpy(),
                                                         (100 - self.percentile, self.percentile)))  # fmt: skip
        else:
            low, high = float(x.min()), float(x.max())
        if self.low is None or self.high is None:
            self.low, self.high = low, high
        else:
            self.low = self.momentum * self.low + (1 - self.momentum) * low
            self.high = self.momentum * self.high + (1 - self.momentum) * high


class _Quantizers:
    """The activation quantizers of one model: a range per site; calibrating updates it (and quantizes with it, as
    the released range estimation does); after calibration the ranges stay fixed."""

    def __init__(self, percentile: float | None = None, *, gate_after_context: bool = False) -> None:
        self.ranges: dict[Any, RunningRange] = {}
        self.calibrating = True
        self.percentile = percentile
        self.gate_after_context = gate_after_context

    def __call__(self, site: Any, x: Tensor) -> Tensor:
        if not torch.is_floating_point(x):
            return x
        estimate = self.ranges.setdefault(site, RunningRange(percentile=self.percentile))
        if self.calibrating:
            estimate.update(x.detach())
        if estimate.low is None or estimate.high is None:  # a site first reached after calibration: left as is
            return x
        return quantize_activation(x, estimate.low, estimate.high)


_active: list[_Quantizers] = []  # the quantizers the registered attention function reports to (innermost last)


def _quantized_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """Eager attention as the model computes it, its variant included (a key/value bias slot, clipped softmax, a
    gate: models/attention_variants.py), with the scores, probabilities and context quantized; the gate acts before
    the context quantizer (``quantized_bert.py``) or after it (``quantized_opt.py``) as the settings say (query, key,
    value: (B, H, T, D))."""
    quantize = _active[-1]
    bias = getattr(module, "attention_kv_bias", None)
    if bias is not None:  # Sun et al.'s slot, open to every query (eager masks are explicit)
        key, value, attention_mask = bias.prepend(key, value, attention_mask, causal=False)
    if key.size(1) != query.size(1):  # grouped-query attention: each key/value head serves several query heads
        repeat = query.size(1) // key.size(1)
        key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * (scaling if scaling is not None else query.size(-1) ** -0.5)
    scores = quantize((module, "scores"), scores)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask[..., : key.size(-2)]
    probabilities = variant_probabilities(module, scores).to(query.dtype)  # plain or clipped softmax
    probabilities = quantize((module, "probabilities"), probabilities)
    probabilities = nn.functional.dropout(probabilities, p=dropout, training=module.training)
    context = torch.matmul(probabilities, value).transpose(1, 2).contiguous()  # (B, T, H, D)
    if quantize.gate_after_context:  # OPT: context_act_quantizer, then the gate (quantized_opt.py 211, 225-258)
        context = gated(module, quantize((module, "context"), context))
    else:  # BERT: the gate, then the context quantizer (quantized_bert.py 423, 435)
        context = quantize((module, "context"), gated(module, context))
    return context, (probabilities[..., 1:] if bias is not None else probabilities)


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION_NAME, _quantized_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)


def _weighted(module: nn.Module) -> bool:
    kind = type(module).__name__
    return isinstance(module, (nn.Linear, nn.Embedding)) or kind == "Conv1D"


def _norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(("RMSNorm", "LayerNorm"))


def _activation(module: nn.Module) -> bool:
    return type(module).__name__.endswith(("Activation", "GELU", "ReLU", "SiLU"))


# the linear an MLP activation reads, as BERT, GPT-2, OPT and Llama/Qwen2 name it
_UP_PROJECTIONS = ("dense", "c_fc", "fc1", "gate_proj")
_FUSED_QKV = {"c_attn": 1, "Wqkv": 0}  # GPT-2's Conv1D (weight (d, 3d)), ModernBERT's Linear (weight (3d, d))


def _up_projections(model: nn.Module) -> set[nn.Module]:
    """The linears whose output is an MLP activation's input (a sibling of the activation, named as the families
    name it)."""
    found: set[nn.Module] = set()
    for parent in model.modules():
        children = dict(parent.named_children())
        if any(_activation(child) for child in children.values()):
            found.update(children[name] for name in _UP_PROJECTIONS if name in children)
    return found


def _gates(model: nn.Module) -> set[nn.Module]:
    """An attention variant's gate modules: float, as the released ``alpha`` is."""
    return {m for module in model.modules() if isinstance(g := getattr(module, "attention_gate", None), nn.Module)
            for m in g.modules()}  # fmt: skip


def vocabulary_head(model: nn.Module) -> set[nn.Module]:
    """The modules that turn the last hidden states into logits (the output layer and an MLM head's transform: BERT's
    ``cls``, RoBERTa's ``lm_head``, ModernBERT's ``head`` and ``decoder``, a decoder's ``lm_head``): kept in float
    by the released placement."""
    head: set[nn.Module] = set()
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is not None:
        head.add(output)
    base = getattr(model, "base_model", model)
    for name, child in model.named_children():
        if child is not base and name in ("cls", "lm_head", "head", "decoder"):
            head.update(child.modules())
    return head


@contextmanager
def simulated_w8a8(
    model: nn.Module, *, placement: str = "released", settings: QuantSettings | None = None
) -> Iterator[Callable[[], None]]:
    """Inside: ``model`` computes with W8A8 fake quantization (``placement``: see the module docstring; ``settings``:
    the weight range and the activation percentile, default BERT's). Yields ``finish_calibration``: until it is
    called the forward passes estimate the activation ranges, after it the ranges are fixed. On exit the weights, the
    attention implementation and the hooks are as before."""
    if placement not in PLACEMENTS:
        raise ValueError(f"W8A8 placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
    settings = settings or SETTINGS["encoder"]
    released = placement == "released"
    quantizers = _Quantizers(percentile=settings.percentile,
                             gate_after_context=released and settings.gate_after_context_quantizer)  # fmt: skip
    head = vocabulary_head(model) if released else set()
    floats = head | _gates(model) if released else set()
    up_projections = _up_projections(model) if released and settings.activation_quantized else set()
    originals: dict[nn.Parameter, Tensor] = {}
    hooks = []
    summed: list[nn.Module] = []  # BERT-style embeddings whose word + token-type sum is quantized
    before = getattr(model.config, "_attn_implementation", None)
    try:
        with torch.no_grad():
            for name, module in model.named_modules():
                if module in floats:
                    continue
                weight = getattr(module, "weight", None)
                fused = _FUSED_QKV.get(name.rsplit(".", 1)[-1]) if released else None
                if isinstance(module, nn.Embedding) and isinstance(weight, nn.Parameter):
                    # a lookup of the quantized table (the head's tied table intact), not quantized again
                    hooks.append(module.register_forward_hook(_embedding_hook(weight, settings)))
                    if not released:  # the first placement re-quantized the rows with a running range
                        hooks.append(module.register_forward_hook(_output_hook(quantizers)))
                    continue
                if (_weighted(module) or (released and _norm(module))) and isinstance(weight, nn.Parameter):
                    if weight not in originals:  # a tied matrix is quantized once; a norm's β stays float
                        originals[weight] = weight.detach().clone()
                        weight.copy_(quantized_weight(weight, settings, blocks_along=fused))
                if _weighted(module) or _norm(module):
                    if module not in up_projections:  # OPT: the up-projection's quantizer sits after its activation
                        hooks.append(module.register_forward_hook(_output_hook(quantizers, blocks=fused is not None)))
                elif _activation(module) and (settings.activation_quantized or not released):
                    hooks.append(module.register_forward_hook(_output_hook(quantizers)))
                if released and _norm(module):  # its input is a residual sum: the stream's own value
                    hooks.append(module.register_forward_pre_hook(_residual_hook(quantizers, module)))
                if released and isinstance(getattr(module, "token_type_embeddings", None), nn.Embedding):
                    summed.append(module)
            for module in summed:  # after the lookups' hooks, so the sum adds the quantized rows
                hooks.extend(_token_type_sum_hooks(module, quantizers))
        if hasattr(model, "set_attn_implementation"):
            _register_attention()
            model.set_attn_implementation(ATTENTION_NAME)
        _active.append(quantizers)

        def finish_calibration() -> None:
            quantizers.calibrating = False

        yield finish_calibration
    finally:
        if quantizers in _active:
            _active.remove(quantizers)
        for hook in hooks:
            hook.remove()
        if before and hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(before)
        with torch.no_grad():
            for weight, saved in originals.items():
                weight.copy_(saved)


def quantized_weight(weight: Tensor, settings: QuantSettings, *, blocks_along: int | None = None) -> Tensor:
    """The weight on its 8-bit grid: current min-max range (BERT's setting) or the MSE range (OPT's); a fused q, k, v
    weight (``blocks_along``: the axis of its three outputs) as three weights, each on its own grid."""
    if blocks_along is not None:
        parts = weight.chunk(3, dim=blocks_along)
        return torch.cat([quantized_weight(part, settings) for part in parts], dim=blocks_along)
    if settings.weight_range == "mse":
        low, high = mse_weight_range(weight)
        return quantize_weight(weight, low=low, high=high)
    return quantize_weight(weight)


def _embedding_hook(weight: Tensor, settings: QuantSettings) -> Callable[..., Any]:
    """Rows looked up in the table quantized per tensor: the rows of the quantized table, computed from the rows (the
    table's range read once), so a table tied to the head stays float for the head."""
    if settings.weight_range == "mse":
        low, high = mse_weight_range(weight)
    else:
        low, high = float(weight.min()), float(weight.max())

    def hook(module: nn.Module, _inputs: Any, output: Tensor) -> Tensor:
        return quantize_weight(output, low=low, high=high)

    return hook


def _token_type_sum_hooks(embeddings: nn.Module, quantizers: _Quantizers) -> list[Any]:
    """BERT's embedding sum quantized as released (``sum_input_token_type_embd_act_quantizer``): the word rows and the
    token-type rows add to a sum that is quantized before the position rows join it. The sum happens inside the
    embeddings' forward, so the word lookup hands the forward zeros (its rows kept aside) and the token-type lookup
    returns q(word + token type): the forward's own addition then gives that value exactly (0 + x = x)."""
    kept: list[Tensor] = []
    inside: list[bool] = []

    def enter(_module: nn.Module, _args: Any) -> None:
        inside.append(True)

    def leave(_module: nn.Module, _args: Any, _output: Any) -> None:
        inside.clear()
        if kept:  # the word rows were handed over as zeros and never added back: the output would be wrong
            kept.clear()
            raise RuntimeError(f"W8A8: {type(embeddings).__name__} looked up its word rows without its token types; "
                               "its word + token-type sum cannot be quantized as released")  # fmt: skip

    def word(_module: nn.Module, _inputs: Any, output: Tensor) -> Tensor:
        if not inside:  # the table read outside the embeddings' forward: its rows as they are
            return output
        kept.append(output)
        return torch.zeros_like(output)

    def token_type(_module: nn.Module, _inputs: Any, output: Tensor) -> Tensor:
        if not kept:  # inputs_embeds given: no word lookup to add to
            return output
        return quantizers((embeddings, "word + token type sum"), kept.pop() + output)

    return [
        embeddings.register_forward_pre_hook(enter),
        embeddings.register_forward_hook(leave),
        embeddings.word_embeddings.register_forward_hook(word),  # after the lookup hook: the quantized rows
        embeddings.token_type_embeddings.register_forward_hook(token_type),
    ]


def _residual_hook(quantizers: _Quantizers, norm: nn.Module) -> Callable[..., Any]:
    def hook(module: nn.Module, inputs: tuple) -> None:
        if inputs and isinstance(inputs[0], Tensor) and torch.is_floating_point(inputs[0]):
            inputs[0].copy_(quantizers((norm, "residual sum"), inputs[0]))  # in place: the sum the stream carries

    return hook


def _output_hook(quantizers: _Quantizers, *, blocks: bool = False) -> Callable[..., Any]:
    """The module's output quantized; with ``blocks``, a fused q, k, v output as three tensors with a range each."""

    def hook(module: nn.Module, _inputs: Any, output: Any) -> Any:
        if not isinstance(output, Tensor):
            return output
        if blocks:
            parts = output.chunk(3, dim=-1)
            return torch.cat([quantizers((module, part), x) for part, x in zip("qkv", parts, strict=True)], dim=-1)
        return quantizers(module, output)

    return hook
