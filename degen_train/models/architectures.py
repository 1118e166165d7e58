"""The transformers architectures a run can build (``model.arch``), each from its own config class.

One entry per architecture: its family, its transformers classes, and how our shape keys (hidden_size,
num_layers, ...) become its config. Everything else (heads, embeddings, hidden states) is read through
``Backbone``, so a term never names ``model.bert`` or ``model.cls``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    RobertaConfig,
    RobertaForMaskedLM,
)

from degen_train.models import attention_variants  # noqa: F401 - registers the exports' degen_<arch> types
from degen_train.models.section import (
    ARCHITECTURE_FAMILIES,
    DEFAULT_ARCH,
    NEXT_SENTENCE_HEAD,
    NO_HIDDEN_DROPOUT,
    ModelConfig,
)


@dataclass(frozen=True)
class Architecture:
    """How to build one transformers architecture from a ``model`` config section."""

    name: str  # its family and dropout are the section's (models/section.py: ARCHITECTURE_FAMILIES)
    model_class: type[PreTrainedModel]  # the class trained and exported
    make_config: Callable[[Any, Any], PretrainedConfig]  # (model cfg, tokenizer) -> transformers config
    nsp_class: type[PreTrainedModel] | None = None  # with a next-sentence head, when the architecture has one
    token_types: bool = False  # whether the model reads token_type_ids (segments A/B)

    @property
    def family(self) -> str:
        """"encoder" (masked LM) or "decoder" (causal LM)."""
        return ARCHITECTURE_FAMILIES[self.name]

    @property
    def hidden_dropout(self) -> bool:
        """Whether model.dropout means anything (Llama/Qwen2 have attention dropout only)."""
        return self.name not in NO_HIDDEN_DROPOUT


def _common(cfg: ModelConfig, tokenizer: Any) -> dict[str, Any]:
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "tie_word_embeddings": bool(cfg.tie_embeddings),
        "attn_implementation": cfg.attention,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _bert(cfg: ModelConfig, tokenizer: Any) -> PretrainedConfig:
    return BertConfig(
        **_common(cfg, tokenizer),
        max_position_embeddings=cfg.max_position,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
    )


def _roberta(cfg: ModelConfig, tokenizer: Any) -> PretrainedConfig:
    # RoBERTa numbers positions from pad_token_id + 1 (HF's roberta-base: 512 + 2 = 514 positions).
    return RobertaConfig(
        **_common(cfg, tokenizer),
        max_position_embeddings=cfg.max_position + tokenizer.pad_token_id + 1,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        type_vocab_size=1,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )


def _modernbert(cfg: ModelConfig, tokenizer: Any) -> PretrainedConfig:
    # RoPE, GeGLU, pre-norm without biases, local (sliding) attention with a global layer every third.
    return ModernBertConfig(
        **_common(cfg, tokenizer),
        max_position_embeddings=cfg.max_position,
        embedding_dropout=cfg.dropout,
        mlp_dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        local_attention=cfg.local_attention,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
    )


def _gpt2(cfg: ModelConfig, tokenizer: Any) -> PretrainedConfig:
    common = _common(cfg, tokenizer)
    return GPT2Config(
        vocab_size=common["vocab_size"],
        tie_word_embeddings=common["tie_word_embeddings"],
        attn_implementation=common["attn_implementation"],
        pad_token_id=common["pad_token_id"],
        n_embd=cfg.hidden_size,
        n_layer=cfg.num_layers,
        n_head=cfg.num_heads,
        n_inner=cfg.intermediate_size,
        n_positions=cfg.max_position,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.attention_dropout,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def _llama_like(config_class: type[PretrainedConfig]) -> Callable[[Any, Any], PretrainedConfig]:
    """Llama and Qwen2: RoPE, RMSNorm, SwiGLU, grouped-query attention, no hidden-state dropout."""

    def make(cfg: ModelConfig, tokenizer: Any) -> PretrainedConfig:
        return config_class(
            **_common(cfg, tokenizer),
            num_key_value_heads=cfg.num_kv_heads or cfg.num_heads,
            max_position_embeddings=cfg.max_position,
            attention_dropout=cfg.attention_dropout,
            rope_theta=cfg.rope_theta,
            rms_norm_eps=cfg.norm_eps,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )

    return make


ARCHITECTURES: dict[str, Architecture] = {
    arch.name: arch
    for arch in (
        Architecture("bert", BertForMaskedLM, _bert, nsp_class=BertForPreTraining, token_types=True),
        Architecture("roberta", RobertaForMaskedLM, _roberta),
        Architecture("modernbert", ModernBertForMaskedLM, _modernbert),
        Architecture("gpt2", GPT2LMHeadModel, _gpt2),
        Architecture("llama", LlamaForCausalLM, _llama_like(LlamaConfig)),
        Architecture("qwen2", Qwen2ForCausalLM, _llama_like(Qwen2Config)),
    )
}
if ARCHITECTURES.keys() != ARCHITECTURE_FAMILIES.keys():  # one built for each the section allows, no more
    raise ImportError(f"models/architectures.py builds {sorted(ARCHITECTURES)}, the section allows "
                      f"{sorted(ARCHITECTURE_FAMILIES)}")  # fmt: skip
if {a.name for a in ARCHITECTURES.values() if a.nsp_class} != set(NEXT_SENTENCE_HEAD):  # the section's fact holds
    raise ImportError(f"models/architectures.py gives a next-sentence head to another set than the section's "
                      f"{NEXT_SENTENCE_HEAD}")  # fmt: skip


def architecture(name: str | None, *, family: str) -> Architecture:
    """The architecture called ``name`` (default: the family's; the section checked both)."""
    return ARCHITECTURES[name or DEFAULT_ARCH[family]]


def architecture_of(model_type: str) -> Architecture | None:
    """The architecture of a loaded model's ``config.model_type`` (None if we do not build that type); an export
    with an attention variant declares degen_<arch> (models/attention_variants.py)."""
    return ARCHITECTURES.get(model_type.removeprefix("degen_"))
