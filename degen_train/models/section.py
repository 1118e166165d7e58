"""The model's typed section, model.* (conf/model/), and its attention variant's, model.attention_variant.*. Each field
says its role where it is declared (core/roles.py); the cross-field rules are the section's validators."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import ConfigDict, Field, field_validator, model_validator

from degen_train.core.roles import INPUT, LAUNCH_ALONE, TRAINS
from degen_train.core.section import Section, checked_section
from degen_train.core.source_reading import class_mapping_keys

# Each model.arch a run can build, by its family; models/architectures.py gives each its transformers classes.
ARCHITECTURE_FAMILIES = {"bert": "encoder", "roberta": "encoder", "modernbert": "encoder", "gpt2": "decoder",
                         "llama": "decoder", "qwen2": "decoder"}  # fmt: skip
NO_HIDDEN_DROPOUT = ("llama", "qwen2")  # attention dropout only: model.dropout means nothing there
NEXT_SENTENCE_HEAD = ("bert",)  # those with a pretraining class that holds one (models/architectures.py: nsp_class)
LEARNED_POSITIONS = ("bert", "roberta", "gpt2")  # an absolute position table; the others' positions are rotary
DEFAULT_ARCH = {"encoder": "bert", "decoder": "gpt2"}  # a family's, where a config names none (from before model.arch)
PRESETS = {"encoder": "tiny, roberta_tiny, ...", "decoder": "llama_tiny, qwen2_tiny, gpt2_tiny, ..."}


# where transformers registers its attention implementations (besides eager), read from its source: torch would load
ATTENTION_REGISTRY = ("transformers.modeling_utils", "AttentionInterface", "_global_mapping")


@functools.cache
def attention_implementations() -> tuple[str, ...]:
    """Every model.attention transformers takes (eager and its registry's); () where its source no longer says
    (transformers' own check then, where the model is built)."""
    try:
        return ("eager", *class_mapping_keys(*ATTENTION_REGISTRY))
    except (KeyError, ModuleNotFoundError, SyntaxError, ValueError):
        return ()


class AttentionVariantConfig(Section):
    """model.attention_variant: how heads may do nothing (degen_train/models/attention_variants.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Annotated[Literal["softmax", "clipped_softmax", "gated", "output_gate", "kv_bias"], TRAINS] = "softmax"
    # clipped softmax: γ = −α/T; null = the family's released α
    alpha: Annotated[float | None, TRAINS] = Field(default=None, ge=0)
    eta: Annotated[float, TRAINS] = Field(default=1.0, ge=1)  # clipped softmax: ζ, the stretch above 1
    # gated: G_h's form; null = the family's released one
    gate: Annotated[Literal["linear", "mlp"] | None, TRAINS] = None
    # gated: π_init; null = the family's released one
    gate_init: Annotated[float | None, TRAINS] = Field(default=None, gt=0, lt=1)
    granularity: Annotated[Literal["headwise", "elementwise"], TRAINS] = "elementwise"  # output gate


class ModelConfig(Section):
    # Closed: every key a model preset or architecture reads is listed, so `+model.hiden_size=64` is refused
    # (naming the nearest setting) instead of training the preset's width in silence.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    family: Annotated[Literal["encoder", "decoder"], TRAINS]
    arch: Annotated[str | None, TRAINS] = None  # null: the family's (DEFAULT_ARCH)
    hidden_size: Annotated[int, TRAINS] = Field(ge=1)
    num_layers: Annotated[int, TRAINS] = Field(ge=1)
    num_heads: Annotated[int, TRAINS] = Field(ge=1)
    num_kv_heads: Annotated[int | None, TRAINS] = Field(default=None, ge=1)
    intermediate_size: Annotated[int | None, TRAINS] = Field(default=None, ge=1)
    max_position: Annotated[int, TRAINS] = Field(ge=8)
    dropout: Annotated[float, TRAINS] = Field(ge=0, lt=1)
    attention_dropout: Annotated[float, TRAINS] = Field(default=0.1, ge=0, lt=1)
    tie_embeddings: Annotated[bool, TRAINS] = True
    # transformers' attention implementation (eager, sdpa, flash_attention_2, ...: ATTENTION_REGISTRY); a Hub kernel
    # (namespace/repo) is code downloaded and run, which degen-train never does (issue 72.6)
    attention: Annotated[str, TRAINS] = "sdpa"
    init_from: Annotated[str | None, INPUT] = None
    compile: Annotated[bool, TRAINS] = False
    # every objective's head + cross-entropy compiled (losses/catalog.with_compiled_heads)
    compile_head: Annotated[bool, TRAINS] = False
    # models/activation_checkpointing.py: none, full, or every k-th block (an integer k >= 1)
    activation_checkpointing: Annotated[Literal["none", "full"] | Annotated[int, Field(ge=1)], LAUNCH_ALONE] = "none"
    # models/vocabulary.py: 1 = the tokenizer's size
    pad_vocab_to_multiple_of: Annotated[int, TRAINS] = Field(default=1, ge=1)
    # none: the absolute table zeroed and frozen
    position_embeddings: Annotated[Literal["learned", "none"], TRAINS] = "learned"
    local_attention: Annotated[int, TRAINS] = Field(default=128, ge=1)  # ModernBERT's sliding window (its released 128)
    # Llama / Qwen2's RoPE base (Llama's released 10,000)
    rope_theta: Annotated[float, TRAINS] = Field(default=10000.0, gt=0)
    norm_eps: Annotated[float, TRAINS] = Field(default=1e-6, gt=0)  # Llama / Qwen2's RMSNorm ε (both released at 1e-6)
    attention_variant: AttentionVariantConfig = Field(default_factory=AttentionVariantConfig)

    @model_validator(mode="after")
    def clipped_softmax_runs_eager(self) -> ModelConfig:
        if self.attention_variant.name == "clipped_softmax" and self.attention != "eager":
            raise ValueError(
                f"attention_variant.name=clipped_softmax needs the score matrix, which attention={self.attention} "
                f"never forms: set model.attention=eager"
            )
        return self

    @field_validator("arch")
    @classmethod
    def an_architecture_the_house_builds(cls, value: str | None) -> str | None:
        if value is not None and value not in ARCHITECTURE_FAMILIES:
            raise ValueError(f"not one of {', '.join(ARCHITECTURE_FAMILIES)}")
        return value

    @model_validator(mode="after")
    def architecture_fits(self) -> ModelConfig:
        """The family and dropout agree with the architecture (an init_from model's is read where it is built)."""
        if self.init_from:
            return self
        arch = self.arch or DEFAULT_ARCH[self.family]
        family = ARCHITECTURE_FAMILIES[arch]
        if family != self.family:
            raise ValueError(f"model.arch={arch} is a {family} but model.family={self.family}: pick a {family} "
                             f"preset (model={PRESETS[family]}) or set model.family={family}")  # fmt: skip
        if arch in NO_HIDDEN_DROPOUT and self.dropout:
            raise ValueError(f"model.dropout={self.dropout}: {arch} has no hidden-state dropout (only "
                             f"model.attention_dropout); set model.dropout=0")  # fmt: skip
        if self.position_embeddings == "none" and arch not in LEARNED_POSITIONS:
            raise ValueError(f"model.position_embeddings=none: {arch} has no learned absolute position table (its "
                             f"positions are rotary); choices: learned, or an architecture with one "
                             f"({', '.join(LEARNED_POSITIONS)})")  # fmt: skip
        return self

    @model_validator(mode="after")
    def heads_divide_width(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not a multiple of num_heads={self.num_heads}")
        if self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}: each key/value "
                f"head serves a whole number of query heads"
            )
        return self

    @field_validator("attention")
    @classmethod
    def an_implementation_transformers_has(cls, value: str) -> str:
        known = attention_implementations()
        if "/" in value:
            raise ValueError(f"{value!r} names a kernel on the Hugging Face Hub: code downloaded and run, which "
                             f"degen-train never does (as it never passes trust_remote_code); choose a transformers "
                             f"implementation: {', '.join(known) or 'eager, sdpa, flash_attention_2'}")  # fmt: skip
        if known and value not in known:
            raise ValueError(f"not one of transformers' attention implementations ({', '.join(known)})")
        return value


def next_sentence_refusal(arch: str) -> str | None:
    """Why next-sentence prediction cannot train on ``arch``, or None where it has the head."""
    if arch in NEXT_SENTENCE_HEAD:
        return None
    return (f"next-sentence prediction (objective=mlm_nsp) needs a next-sentence head, which model.arch={arch} does "
            f"not have; architectures with one: {', '.join(NEXT_SENTENCE_HEAD)}")


def model_section(cfg: ModelConfig | DictConfig | Mapping[str, Any]) -> ModelConfig:
    """The model section typed; a section composed in Python (tests, notebooks, tools) is checked here."""
    if isinstance(cfg, ModelConfig):
        return cfg
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    return checked_section(ModelConfig, raw, "model")
