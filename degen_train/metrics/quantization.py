"""W8A8 simulated quantization of a model, the setting Bondarenko, Nagel, Blankevoort (NeurIPS 2023) report their
W8A8 numbers with (released `transformers_language/quant_configs.py`): 8-bit uniform, per tensor; weights symmetric
with the current min-max range; activations asymmetric with a running min-max range (momentum 0.9) estimated on 16
calibration batches, then fixed.

The rounding and clamping are torch's own fake-quantization op (``torch.fake_quantize_per_tensor_affine``); what is
written here is the range estimation (a min, a max and an average) and where the quantizers sit. Quantized: the
weights of every linear, 1-D convolution (GPT-2's ``Conv1D``) and embedding table; the outputs of those, of every
LayerNorm/RMSNorm and every activation function; inside attention, the scores, the probabilities and the context
(a registered attention function, so this works for any HF model that dispatches through transformers' attention
registry). Left in float, unlike the released code: the residual sums (inside each layer's own forward, not modules)
and LayerNorm's γ and β.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

BITS = 8
MOMENTUM = 0.9  # released RunningMinMaxEstimator
CALIBRATION_BATCHES = 16  # released act_quant.num_batches
ATTENTION_NAME = "degen_w8a8"
_EPS = 1e-8  # released quantizers' eps: the smallest range end and scale


def quantize_weight(weight: Tensor, bits: int = BITS) -> Tensor:
    """Symmetric uniform per-tensor fake quantization with the current min-max range: Δ = max(|min(w, 0)|,
    max(w, ε)) / (2^(b−s) − 1), s = 1 when w has a negative value, grid [−2^(b−1), 2^(b−1) − 1] (s = 0: [0, 2^b −
    1]); Bondarenko et al. 2023 (SymmetricUniformQuantizer with CurrentMinMaxEstimator)."""
    low, high = min(float(weight.min()), 0.0), max(float(weight.max()), _EPS)
    signed = low < 0
    grid_max = 2 ** (bits - int(signed)) - 1
    grid_min = -(2 ** (bits - 1)) if signed else 0
    scale = max(max(abs(low), high) / grid_max, _EPS)
    return torch.fake_quantize_per_tensor_affine(weight.float(), scale, 0, grid_min, grid_max).to(weight.dtype)


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
    RunningMinMaxEstimator)."""

    def __init__(self, momentum: float = MOMENTUM) -> None:
        self.momentum = momentum
        self.low: float | None = None
        self.high: float | None = None

    def update(self, x: Tensor) -> None:
        low, high = float(x.min()), float(x.max())
        if self.low is None or self.high is None:
            self.low, self.high = low, high
        else:
            self.low = self.momentum * self.low + (1 - self.momentum) * low
            self.high = self.momentum * self.high + (1 - self.momentum) * high


class _Quantizers:
    """The activation quantizers of one model: a range per site; calibrating updates it (and quantizes with it, as
    the released range estimation does); after calibration the ranges stay fixed."""

    def __init__(self) -> None:
        self.ranges: dict[Any, RunningRange] = {}
        self.calibrating = True

    def __call__(self, site: Any, x: Tensor) -> Tensor:
        if not torch.is_floating_point(x):
            return x
        estimate = self.ranges.setdefault(site, RunningRange())
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
    """Eager attention with its scores, probabilities and context quantized (query, key, value: (B, H, T, D))."""
    quantize = _active[-1]
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
    probabilities = quantize((module, "probabilities"), scores.softmax(dim=-1))
    probabilities = nn.functional.dropout(probabilities, p=dropout, training=module.training)
    context = quantize((module, "context"), torch.matmul(probabilities, value))
    return context.transpose(1, 2).contiguous(), probabilities


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION_NAME, _quantized_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)


def _weighted(module: nn.Module) -> bool:
    kind = type(module).__name__
    return isinstance(module, (nn.Linear, nn.Embedding)) or kind == "Conv1D"


def _quantized_output(module: nn.Module) -> bool:
    kind = type(module).__name__
    return _weighted(module) or isinstance(module, nn.LayerNorm) or kind.endswith(("RMSNorm", "Activation", "GELU"))


@contextmanager
def simulated_w8a8(model: nn.Module) -> Iterator[Callable[[], None]]:
    """Inside: ``model`` computes with W8A8 fake quantization. Yields ``finish_calibration``: until it is called the
    forward passes estimate the activation ranges (give it 16 batches, as released), after it the ranges are fixed.
    On exit the weights, the attention implementation and the hooks are as before."""
    quantizers = _Quantizers()
    originals: dict[nn.Parameter, Tensor] = {}
    hooks = []
    before = getattr(model.config, "_attn_implementation", None)
    try:
        with torch.no_grad():
            for module in model.modules():
                if _weighted(module) and isinstance(getattr(module, "weight", None), nn.Parameter):
                    weight = module.weight
                    if weight not in originals:  # a tied matrix is quantized once
                        originals[weight] = weight.detach().clone()
                        weight.copy_(quantize_weight(weight))
                if _quantized_output(module):
                    hooks.append(module.register_forward_hook(_output_hook(quantizers)))
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


def _output_hook(quantizers: _Quantizers) -> Callable[..., Any]:
    def hook(module: nn.Module, _inputs: Any, output: Any) -> Any:
        if isinstance(output, Tensor):
            return quantizers(module, output)
        return output

    return hook
