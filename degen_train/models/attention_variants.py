"""Attention that can do nothing: clipped softmax, gated attention, the output gate (model.attention_variant).

A head with nothing to add learns to do nothing by pushing its softmax to extremes, and the large activations that
takes are the outliers that break 8-bit quantization (Bondarenko et al. 2023); the variants here give it a cheap way
to do nothing instead. Each is installed into the stock transformers model, never a copied modeling file:

- ``clipped_softmax``: clip((ζ − γ)·softmax(x) + γ, 0, 1) with γ = −α/T, T the training sequence length (the released
  ``BertSelfAttentionWithExtras``). It needs the score matrix, so it runs on our eager attention function.
- ``gated``: per token and head, π = σ(G_h(x_h)) scales the head's output, x_h the head's slice of the attention
  input (released ``conditional_per_token``: a linear map, or the d→d/4→1 ReLU MLP of the BERT script).
- ``kv_bias``: a learned key k' and value v' per head, one more slot every query may attend to: softmax(q·[k'; K]ᵀ)
  [v'; V] (Sun et al. 2024, the released ``gpt-2/model_attn_bias.py``: N(0, 0.02), no position; the attention maps
  returned leave the slot out, so a sink measured on them is the first real token's).
- ``output_gate``: Y ⊙ σ(X·W_θ) on the attention output before its output projection, one gate per head
  (headwise) or per element (elementwise); Qiu et al. 2025, whose released Qwen3 code reads the gate from an
  extended q_proj (the same map: here a separate linear, biased when q_proj is).

How it is installed: a gate is a child module of each attention module (so it is in the state dict, sharded with
its block by FSDP2, synchronised by DDP); a forward pre-hook hands it the attention input; the attention function
registered with transformers' ``AttentionInterface`` (``degen_eager``, ``degen_sdpa``) computes attention and then
applies the gate. The variant's settings travel in ``config.degen_attention``, so an export records what it computes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

from degen_train.models.section import AttentionVariantConfig

# The module each architecture calls its attention function from (it receives the attention input as hidden_states).
ATTENTION_MODULES = {
    "bert": "BertSelfAttention",
    "roberta": "RobertaSelfAttention",
    "modernbert": "ModernBertAttention",
    "gpt2": "GPT2Attention",
    "llama": "LlamaAttention",
    "qwen2": "Qwen2Attention",
}
# The released settings, per family: the BERT scripts for encoders, the OPT scripts (and Qiu et al.) for decoders.
RELEASED = {
    "encoder": {"alpha": 3.2, "gate": "mlp", "gate_init": None},  # γ = −0.025 at T = 128 (bert_base_clipped_softmax)
    "decoder": {"alpha": 12.0, "gate": "linear", "gate_init": 0.25},  # opt_125m_{clipped_softmax,gated_attention}
}
SETTINGS_KEY = "degen_attention"  # the config attribute (and config.json key) holding a variant's settings


def clipped_softmax(scores: Tensor, *, gamma: float, eta: float) -> Tensor:
    """clip((η − γ)·softmax(x) + γ, 0, 1) over the last dimension; Bondarenko et al. 2023, γ = −α/T."""
    return torch.clip(F.softmax(scores, dim=-1) * (eta - gamma) + gamma, 0, 1)


def _uniform_like_linear(tensor: Tensor, fan_in: int) -> None:
    # nn.Linear's own initialisation, U(−1/√fan_in, 1/√fan_in): the released gates are built after the model's init.
    bound = 1 / math.sqrt(fan_in)
    nn.init.uniform_(tensor, -bound, bound)


class HeadGate(nn.Module):
    """π_{t,h} = σ(G_h(x_{t,h})), x_{t,h} the h-th head's slice of token t's attention input; Bondarenko et al. 2023.

    G_h is linear (d_head → 1) or the ReLU MLP d_head → d_head/4 → 1; all heads' maps are held as one batched weight
    (the released code keeps a ModuleList of nn.Linear per head: the same function and initialisation).
    """

    def __init__(self, heads: int, head_dim: int, *, form: str, init: float | None) -> None:
        super().__init__()
        self.heads, self.head_dim, self.form = heads, head_dim, form
        inner = head_dim // 4 if form == "mlp" else 1
        self.weight = nn.Parameter(torch.empty(heads, head_dim, inner))  # (H, d, d/4 or 1)
        self.bias = nn.Parameter(torch.empty(heads, inner))
        _uniform_like_linear(self.weight, head_dim)
        _uniform_like_linear(self.bias, head_dim)
        if form == "mlp":
            self.weight_out = nn.Parameter(torch.empty(heads, inner, 1))  # (H, d/4, 1)
            self.bias_out = nn.Parameter(torch.empty(heads, 1))
            _uniform_like_linear(self.weight_out, inner)
            _uniform_like_linear(self.bias_out, inner)
        if init is not None:  # π_init: the bias at logit(π_init), as released (only for the linear gate)
            nn.init.constant_(self.bias_out if form == "mlp" else self.bias, math.log(init / (1 - init)))

    def forward(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        heads = x.view(batch, length, self.heads, self.head_dim)  # (B, T, H, d)
        logits = torch.einsum("bthd,hde->bthe", heads, self.weight) + self.bias  # (B, T, H, d/4 or 1)
        if self.form == "mlp":
            logits = torch.einsum("bthe,heo->btho", torch.relu(logits), self.weight_out) + self.bias_out
        return torch.sigmoid(logits)  # (B, T, H, 1)


class OutputGate(nn.Module):
    """σ(X·W_θ + b) per head (headwise, W_θ: D × H) or per element (elementwise, D × H·d); Qiu et al. 2025."""

    def __init__(self, hidden: int, heads: int, head_dim: int, *, granularity: str, bias: bool, std: float) -> None:
        super().__init__()
        self.heads, self.width = heads, (head_dim if granularity == "elementwise" else 1)
        self.proj = nn.Linear(hidden, heads * self.width, bias=bias)
        nn.init.normal_(self.proj.weight, std=std)  # as q_proj, whose extension it is in the released code
        if bias:
            nn.init.zeros_(self.proj.bias)

    def forward(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return torch.sigmoid(self.proj(x)).view(batch, length, self.heads, self.width)  # (B, T, H, 1 or d)


class KeyValueBias(nn.Module):
    """k', v' ∈ R^{H_kv × 1 × d}: the explicit attention bias of Sun et al. 2024, prepended to every key and value."""

    def __init__(self, kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.key = nn.Parameter(torch.empty(kv_heads, 1, head_dim))
        self.value = nn.Parameter(torch.empty(kv_heads, 1, head_dim))
        nn.init.normal_(self.key, std=0.02)  # as released
        nn.init.normal_(self.value, std=0.02)

    def prepend(
        self, key: Tensor, value: Tensor, mask: Tensor | None, causal: bool
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """[k'; K], [v'; V] and the mask with the slot open to every query (additive 0 or True)."""
        batch, length = key.shape[0], key.shape[2]
        key = torch.cat([self.key.to(key.dtype).expand(batch, -1, -1, -1), key], dim=2)
        value = torch.cat([self.value.to(value.dtype).expand(batch, -1, -1, -1), value], dim=2)
        if mask is None and causal:  # SDPA's causal flag cannot shift by one slot: the mask is made explicit
            mask = torch.ones(length, length, dtype=torch.bool, device=key.device).tril()[None, None]
        if mask is not None:
            mask = F.pad(mask, (1, 0), value=True if mask.dtype == torch.bool else 0.0)
        return key, value, mask


def _remember_gate_input(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """Hands the attention input to the gate (a forward pre-hook): attention functions see q, k and v only."""
    module.attention_gate_input = args[0] if args else kwargs["hidden_states"]


def gated(module: nn.Module, output: Tensor) -> Tensor:
    """The attention output (B, T, H, d) times the module's gate, when it has one."""
    gate = getattr(module, "attention_gate", None)
    if gate is None:
        return output
    x = module.__dict__.pop("attention_gate_input")  # taken, so a stale input is never reused
    return output * gate(x).to(output.dtype)


def degen_eager_attention(
    module: nn.Module,
    query: Tensor,  # (B, H, T, d)
    key: Tensor,  # (B, H_kv, S, d)
    value: Tensor,
    attention_mask: Tensor | None,  # additive, (B, 1, T, S)
    scaling: float | None = None,
    dropout: float = 0.0,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """Eager attention with the configured softmax (plain or clipped), then the gate: out (B, T, H, d)."""
    bias = getattr(module, "attention_kv_bias", None)
    if bias is not None:
        key, value, attention_mask = bias.prepend(key, value, attention_mask, causal=False)  # eager masks are explicit
    groups = query.shape[1] // key.shape[1]  # grouped-query attention: each key/value head serves `groups` heads
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = variant_probabilities(module, scores).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return gated(module, output), (weights[..., 1:] if bias is not None else weights)


def degen_sdpa_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, *args: Any, **kwargs: Any):
    """torch's SDPA (as transformers calls it), then the gate: the gates keep the fused kernel."""
    bias = getattr(module, "attention_kv_bias", None)
    if bias is not None:
        mask = args[0] if args else kwargs.pop("attention_mask", None)
        causal = query.shape[2] > 1 and bool(kwargs.get("is_causal", getattr(module, "is_causal", False)))
        key, value, mask = bias.prepend(key, value, mask, causal=causal)
        args, kwargs = (mask, *args[1:]), {**kwargs, "is_causal": False}
    output, weights = sdpa_attention_forward(module, query, key, value, *args, **kwargs)
    return gated(module, output), weights


def variant_of(model: nn.Module) -> str:
    """The attention variant a model was built with (softmax when none): what a probe must compute too."""
    settings = getattr(getattr(model, "config", None), SETTINGS_KEY, None) or {}
    return str(settings.get("variant", "softmax"))


def variant_probabilities(module: nn.Module, scores: Tensor) -> Tensor:
    """The attention probabilities ``module`` computes from its (masked) scores: its variant's softmax, plain or
    clipped (float32, as degen_eager_attention does)."""
    settings = getattr(getattr(module, "config", None), SETTINGS_KEY, None) or {}
    if settings.get("variant") == "clipped_softmax":
        return clipped_softmax(scores.float(), gamma=settings["gamma"], eta=settings["eta"])
    return F.softmax(scores, dim=-1, dtype=torch.float32)


AttentionInterface.register("degen_eager", degen_eager_attention)
AttentionInterface.register("degen_sdpa", degen_sdpa_attention)
AttentionMaskInterface.register("degen_eager", eager_mask)
AttentionMaskInterface.register("degen_sdpa", sdpa_mask)


def variant_settings(
    variant: AttentionVariantConfig | Mapping[str, Any], *, family: str, arch: str, length: int | None
) -> dict:
    """The settings a variant runs with, the family's released defaults where the config leaves null (the options
    themselves are checked by AttentionVariantConfig in models/section.py)."""
    if not isinstance(variant, AttentionVariantConfig):  # a plain mapping from Python callers: checked here
        variant = AttentionVariantConfig.model_validate(dict(variant))
    name = variant.name
    if name != "softmax" and arch not in ATTENTION_MODULES:
        defined = ", ".join(ATTENTION_MODULES)
        raise ValueError(f"model.attention_variant.name={name} is defined for {defined}, not model.arch={arch}")
    released = RELEASED[family]
    settings: dict[str, Any] = {"variant": name}
    if name == "clipped_softmax":
        if length is None:
            raise ValueError("clipped_softmax needs the training sequence length T (γ = −α/T): pass sequence_length")
        alpha = variant.alpha if variant.alpha is not None else released["alpha"]
        settings |= {"alpha": alpha, "length": length, "gamma": -alpha / length, "eta": variant.eta}
    if name == "gated":
        init = variant.gate_init
        settings |= {"gate": variant.gate or released["gate"],
                     "gate_init": init if init is not None else released["gate_init"]}  # fmt: skip
    if name == "output_gate":
        settings |= {"granularity": variant.granularity}
    return settings


# What variant_settings writes for each variant, so what an export's config.json must hold (a number or a choice).
SETTING_KINDS: dict[str, dict[str, Any]] = {
    "softmax": {},
    "kv_bias": {},
    "clipped_softmax": {"alpha": float, "length": int, "gamma": float, "eta": float},
    "gated": {"gate": ("linear", "mlp"), "gate_init": (float, type(None))},
    "output_gate": {"granularity": ("headwise", "elementwise")},
}


def checked_settings(settings: Any) -> dict[str, Any]:
    """``settings`` as variant_settings writes them, or a ValueError naming what is wrong: an export's config.json
    is data from elsewhere (before, a bogus degen_attention failed with KeyError: 'variant')."""
    where = f"the model config's {SETTINGS_KEY}={settings!r}"
    if not isinstance(settings, Mapping) or settings.get("variant") not in SETTING_KINDS:
        raise ValueError(f"{where}: its variant must be one of {', '.join(SETTING_KINDS)} (an edited or foreign "
                         f"config.json: re-export the model)")  # fmt: skip
    for key, kind in SETTING_KINDS[settings["variant"]].items():
        value = settings.get(key)
        fits = value in kind if isinstance(kind, tuple) and all(isinstance(k, str) for k in kind) else (
            isinstance(value, kind) and not isinstance(value, bool))  # fmt: skip
        if kind is float:
            fits = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not fits:
            raise ValueError(f"{where}: {key}={value!r} is not what degen-train writes for {settings['variant']} "
                             f"(an edited or foreign config.json: re-export the model)")  # fmt: skip
    return dict(settings)


def _attention_modules(model: nn.Module, arch: str) -> list[nn.Module]:
    return [module for module in model.modules() if type(module).__name__ == ATTENTION_MODULES[arch]]


def install_attention_variant(model: PreTrainedModel, settings: Mapping[str, Any], *, arch: str) -> PreTrainedModel:
    """Install ``settings`` (from ``variant_settings``) into ``model`` in place: gates, hooks, attention function."""
    settings = checked_settings(settings)
    if settings["variant"] == "softmax":
        return model
    config, modules = model.config, _attention_modules(model, arch)
    if any(hasattr(module, "attention_gate") or hasattr(module, "attention_kv_bias") for module in modules):
        raise ValueError("this model has an attention variant installed already")
    setattr(config, SETTINGS_KEY, dict(settings))
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    for module in modules:  # clipped softmax adds nothing to a module: its attention function does it all
        if settings["variant"] == "kv_bias":
            module.attention_kv_bias = KeyValueBias(getattr(config, "num_key_value_heads", None) or heads, head_dim)
        elif settings["variant"] == "gated":
            module.attention_gate = HeadGate(heads, head_dim, form=settings["gate"], init=settings["gate_init"])
        elif settings["variant"] == "output_gate":
            module.attention_gate = OutputGate(
                config.hidden_size, heads, head_dim, granularity=settings["granularity"],
                bias=_query_has_bias(module), std=config.initializer_range,
            )  # fmt: skip
        if hasattr(module, "attention_gate"):
            module.register_forward_pre_hook(_remember_gate_input, with_kwargs=True)
    eager = settings["variant"] == "clipped_softmax" or config._attn_implementation in ("eager", "degen_eager")
    implementation = "degen_eager" if eager else "degen_sdpa"
    model.set_attn_implementation(implementation)
    return model


def _query_has_bias(module: nn.Module) -> bool:
    for name in ("q_proj", "query", "c_attn", "Wqkv"):
        projection = getattr(module, name, None)
        if projection is not None:
            return getattr(projection, "bias", None) is not None
    return True


# Export: a model with a variant computes what its stock class does not, so its config.json names the model type
# ``degen_<arch>``. Plain transformers then refuses it ("does not recognize this architecture") instead of loading
# plain softmax without a word; every degen_train process registers the classes below, built from the stock ones
# and this module (never code from the folder), so degen-analyze, degen-eval, degen-finetune and init_from load it.
EXPORTED_TYPE_PREFIX = "degen_"


def exported_model_type(config: Any) -> str:
    """The model_type an export of ``config`` declares: the stock one, or degen_<arch> when a variant is installed."""
    settings = getattr(config, SETTINGS_KEY, None)
    if not settings or settings.get("variant", "softmax") == "softmax":
        return config.model_type
    return EXPORTED_TYPE_PREFIX + config.model_type


def _variant_class(base: type, config_class: type, arch: str) -> type:
    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, config, *args, **kwargs)
        install_attention_variant(self, getattr(config, SETTINGS_KEY), arch=arch)

    name = f"Degen{base.__name__}"
    variant_class = type(name, (base,), {"__init__": __init__, "config_class": config_class, "__module__": __name__})
    globals()[name] = variant_class  # a module attribute, so that pickle finds the class by name
    return variant_class


def register_exported_classes() -> None:
    """Teach transformers' Auto classes, in this process, the degen_<arch> types our exports with a variant declare."""
    import transformers
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        AutoModelForPreTraining,
        AutoModelForSequenceClassification,
    )
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    heads = {
        AutoModel: modeling_auto.MODEL_MAPPING_NAMES,
        AutoModelForMaskedLM: modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        AutoModelForCausalLM: modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        AutoModelForPreTraining: modeling_auto.MODEL_FOR_PRETRAINING_MAPPING_NAMES,
        AutoModelForSequenceClassification: modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    }
    for arch in ATTENTION_MODULES:
        model_type = EXPORTED_TYPE_PREFIX + arch
        if model_type in CONFIG_MAPPING:
            continue  # registered already (this module imported twice under another name)
        base_config = CONFIG_MAPPING[arch]
        name = f"Degen{base_config.__name__}"
        config_class = type(name, (base_config,), {"model_type": model_type, "__module__": __name__})
        globals()[name] = config_class
        AutoConfig.register(model_type, config_class)
        for auto, names in heads.items():
            if arch in names:
                base = getattr(transformers, names[arch])
                auto.register(config_class, _variant_class(base, config_class, arch))


register_exported_classes()
