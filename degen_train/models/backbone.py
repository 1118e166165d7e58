"""Build an HF model (any architecture of ``models.architectures``) and run it into a ForwardOutput.

The model is a stock ``transformers`` class, so ``save_pretrained`` exports it as is. Only the
vocabulary projection is called by hand: on the N labelled positions rather than all B·T.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor, nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    PreTrainedModel,
)

from degen_train.core.handed_files import no_remote_code
from degen_train.core.io import resolve_pretrained
from degen_train.models.architectures import ARCHITECTURES, Architecture, architecture, architecture_of
from degen_train.models.attention_variants import SETTINGS_KEY, install_attention_variant, variant_settings
from degen_train.models.loading import load_pretrained
from degen_train.models.output import ForwardOutput
from degen_train.models.positions import at_positions, labelled_positions, model_inputs, skip_padding_warning
from degen_train.models.section import ModelConfig, model_section, next_sentence_refusal
from degen_train.models.vocabulary import pad_vocabulary, vocabulary_size

# Batch entries with a ForwardOutput field of their own; any other entry lands in ``extras``.
BATCH_KEYS = frozenset(
    {"input_ids", "attention_mask", "labels", "labelled_index", "padded", "host_counts", "original_ids",
     "token_type_ids", "next_sentence_label", "views", "dropout"}  # fmt: skip
)



def model_architecture(section: ModelConfig | DictConfig) -> Architecture:
    """The configured architecture: ``init_from``'s config when set, else ``cfg.arch`` (default: the family's)."""
    cfg = model_section(section)
    if cfg.init_from:
        source = resolve_pretrained(cfg.init_from)
        model_type = AutoConfig.from_pretrained(source, **no_remote_code(source)).model_type
        arch = architecture_of(model_type)
        if arch is None:
            raise ValueError(
                f"model.init_from={cfg.init_from} is a {model_type!r} model; supported: {', '.join(ARCHITECTURES)}"
            )
        return arch
    return architecture(cfg.arch, family=cfg.family)  # its family and dropout: the section's rules


def model_family(cfg: ModelConfig | DictConfig) -> str:
    """The family ("encoder" or "decoder") of the configured model."""
    return model_architecture(cfg).family


def build_hf_model(
    section: ModelConfig | DictConfig, *, tokenizer: Any, with_nsp_head: bool, sequence_length: int | None = None
) -> PreTrainedModel:
    """A fresh model from the size preset, or the weights at ``cfg.init_from`` (path or hub name), with the
    configured attention variant installed (``sequence_length``: the T of clipped softmax's γ = −α/T)."""
    cfg = model_section(section)
    arch = model_architecture(cfg)
    variant = variant_settings(cfg.attention_variant, family=arch.family, arch=arch.name, length=sequence_length)
    if with_nsp_head and (refusal := next_sentence_refusal(arch.name)):  # an init_from model's architecture
        raise ValueError(refusal)
    if cfg.init_from:
        loader = (
            AutoModelForCausalLM
            if arch.family == "decoder"
            else AutoModelForPreTraining
            if with_nsp_head
            else AutoModelForMaskedLM
        )
        source = resolve_pretrained(cfg.init_from)
        model = load_pretrained(loader, source, "model.init_from", attn_implementation=cfg.attention)
        if model.get_input_embeddings().num_embeddings < len(tokenizer):
            raise ValueError(
                f"model.init_from={cfg.init_from} has {model.get_input_embeddings().num_embeddings} embeddings "
                f"but the tokenizer has {len(tokenizer)} tokens: use that model's tokenizer (data.tokenizer.path)"
            )
        trained_with = getattr(model.config, SETTINGS_KEY, None)
        if trained_with is not None and trained_with != variant:
            raise ValueError(
                f"model.init_from={cfg.init_from} was trained with attention variant {trained_with}; set "
                f"model.attention_variant to it (this run asks for {variant})"
            )
        if trained_with is None:  # a stock model: the variant's fresh gates on its trained attention, as released
            install_attention_variant(model, variant, arch=arch.name)
        if cfg.position_embeddings == "none":  # the ablation on the loaded model: its own table, where it has one
            without_positions(model, f"model.init_from={cfg.init_from} ({arch.name})")
        # from_pretrained leaves eval mode: continued pretraining would run without dropout
        return pad_vocabulary(model, cfg.pad_vocab_to_multiple_of).train()
    model_class = arch.nsp_class if with_nsp_head else arch.model_class
    model = install_attention_variant(model_class(arch.make_config(cfg, tokenizer)), variant, arch=arch.name)
    if cfg.position_embeddings == "none":
        without_positions(model, arch.name)
    return pad_vocabulary(model, cfg.pad_vocab_to_multiple_of)


POSITION_TABLES = ("position_embeddings", "wpe")  # BERT's and RoBERTa's, GPT-2's learned absolute positions


def position_tables(model: nn.Module) -> list[nn.Embedding]:
    """The learned absolute position tables of an HF model (BERT's ``embeddings.position_embeddings``, GPT-2's
    ``wpe``); none for rotary or ALiBi positions."""
    return [m for name, m in model.named_modules()
            if isinstance(m, nn.Embedding) and name.rsplit(".", 1)[-1] in POSITION_TABLES]  # fmt: skip


def without_positions(model: nn.Module, what: str) -> None:
    """Luo et al. 2021's ablation, model.position_embeddings=none: the learned absolute position table zeroed and
    frozen (no gradient, so no optimizer moves it), so the model sees its tokens without their positions. The model
    section refuses a fresh architecture without one (models/section.LEARNED_POSITIONS); a loaded model (``what``:
    model.init_from's) is refused here."""
    tables = position_tables(model)
    if not tables:
        raise ValueError(f"model.position_embeddings=none: {what} has no learned absolute position table (its "
                         f"positions are rotary): set model.position_embeddings=learned")  # fmt: skip
    for table in tables:
        with torch.no_grad():
            table.weight.zero_()
        table.weight.requires_grad_(False)


def shape_signature(model: PreTrainedModel) -> dict[str, Any]:
    """What must match for a checkpoint to load into this model."""
    config = model.config
    names = (
        "model_type",
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "n_inner",
        "max_position_embeddings",
        "tie_word_embeddings",
    )
    signature = {name: getattr(config, name, None) for name in names}
    signature["architecture"] = type(model).__name__
    return signature


class Backbone(nn.Module):
    """Wraps the HF model; returns hidden states, logits at labelled positions and heads' outputs."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model
        skip_padding_warning(model)
        arch = architecture_of(model.config.model_type)
        self.family = arch.family if arch is not None else "encoder"
        self.token_types = arch.token_types if arch is not None else True
        self.vocabulary = vocabulary_size(model)  # the tokenizer's V; the model's rows may be padded beyond it

    @property
    def vocab_head(self) -> nn.Module:
        """The HF model's own MLM / LM head (BERT's cls.predictions, RoBERTa's lm_head, ModernBERT's head +
        decoder, a decoder's lm_head), as one module from the last hidden states to the logits."""
        cls = getattr(self.model, "cls", None)
        if cls is not None:
            return cls.predictions
        if isinstance(getattr(self.model, "head", None), nn.Module):  # ModernBERT: prediction head, then decoder
            return nn.Sequential(self.model.head, self.model.get_output_embeddings())
        return self.model.lm_head

    def freeze_vocab_head(self) -> None:
        """Freeze the vocabulary head's own parameters (not the tied word matrix): for terms that never use it
        (ELECTRA's discriminator, COCO-LM's released CLM head), so the optimizer and DDP see no unused ones."""
        shared = {id(self.model.get_input_embeddings().weight)}
        for param in self.vocab_head.parameters():
            if id(param) not in shared:
                param.requires_grad_(False)

    def vocab_parts(self) -> tuple[Callable[[Tensor], Tensor], nn.Linear] | None:
        """The vocabulary head as (transform, output linear), logits = linear(transform(h)); None if not so."""
        head = self.vocab_head
        if isinstance(head, nn.Linear):  # GPT-2, Llama, Qwen2: lm_head on the final (normed) states
            return (lambda hidden: hidden), head
        transform, decoder = getattr(head, "transform", None), getattr(head, "decoder", None)
        if transform is not None and isinstance(decoder, nn.Linear):  # BERT: transform (dense, GELU, LN) + decoder
            return transform, decoder
        if isinstance(head, nn.Sequential) and isinstance(head[-1], nn.Linear):  # ModernBERT
            return head[0], head[-1]
        dense, norm = getattr(head, "dense", None), getattr(head, "layer_norm", None)
        if dense is not None and norm is not None and isinstance(decoder, nn.Linear):  # RoBERTa: dense, GELU, LN
            return (lambda hidden: norm(nn.functional.gelu(dense(hidden)))), decoder
        return None

    @property
    def nsp_head(self) -> nn.Module | None:
        return getattr(getattr(self.model, "cls", None), "seq_relationship", None)

    def encode(self, batch: dict[str, Tensor], *, all_layers: bool = False) -> Any:
        kwargs = model_inputs(batch, token_types=self.token_types)
        if self.family == "decoder":  # HF decoders build a KV cache in training too (config.use_cache): work for
            kwargs["use_cache"] = False  # nothing, and under model.compile each block's cache state recompiled it
        return self.model.base_model(**kwargs, output_hidden_states=all_layers, return_dict=True)

    def forward(self, batch: dict[str, Any], *, requires: frozenset[str] = frozenset()) -> ForwardOutput:
        """One pass over ``batch``, plus one per entry of ``batch["views"]`` (extra inputs a term asked for).

        ``requires`` names the optional fields (types.OPTIONAL_FIELDS) to compute; the others stay None.
        """
        encoded = self.encode(batch, all_layers="all_hidden_states" in requires)
        hidden = encoded.last_hidden_state  # (B, T, H)
        labels = batch["labels"]
        index = labelled_positions(batch)  # (N,)
        parts = self.vocab_parts()
        labelled, bias, logits = None, None, None
        if parts is None:  # a head we cannot split: its logits always
            logits = self.vocab_head(at_positions(hidden, index))  # (N, V)
        else:
            transform, decoder = parts
            labelled, bias = transform(at_positions(hidden, index)), decoder.bias  # (N, H), (V,)
            if "logits" in requires:
                logits = decoder(labelled)  # (N, V)
        word_rows = self.model.get_input_embeddings().weight  # (V, H)
        output_rows = self.model.get_output_embeddings().weight  # (V, H), the same tensor when tied
        padded_output = None
        if word_rows.shape[0] > self.vocabulary:  # (V', H) padded rows: the terms see the tokenizer's V (views)
            padded_output, tied = (output_rows, bias), output_rows is word_rows
            word_rows = word_rows[: self.vocabulary]
            output_rows = word_rows if tied else output_rows[: self.vocabulary]  # one view when tied, as before
            bias = bias[: self.vocabulary] if bias is not None else None
        pooled = getattr(encoded, "pooler_output", None)  # (B, H), None when the model has no pooler
        sequence_logits = None
        if "sequence_logits" in requires:
            if self.nsp_head is None or pooled is None:
                raise ValueError(
                    f"{type(self.model).__name__} has no next-sentence head: use recipe=bert_mlm_nsp (model.arch=bert)"
                )
            sequence_logits = self.nsp_head(pooled)  # (B, 2)
        return ForwardOutput(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            hidden_states=hidden,
            labels=labels,
            logits=logits,
            labelled_hidden=labelled,
            output_bias=bias,
            padded_output=padded_output,
            target_ids=at_positions(labels, index),
            labelled_index=index,
            embedding_weight=word_rows,
            output_embedding_weight=output_rows,
            original_ids=batch.get("original_ids"),
            token_type_ids=batch.get("token_type_ids"),
            sequence_labels=batch.get("next_sentence_label"),
            pooled=pooled if "pooled" in requires else None,
            sequence_logits=sequence_logits,
            all_hidden_states=encoded.hidden_states if "all_hidden_states" in requires else None,
            views=tuple(self.view(view, requires=requires) for view in batch.get("views", ())),
            extras={k: v for k, v in batch.items() if k not in BATCH_KEYS},
        )

    def view(self, batch: dict[str, Any], *, requires: frozenset[str]) -> ForwardOutput:
        """One extra pass a term asked for. ``batch["dropout"]=True``: with dropout also in validation (SimCSE's two
        views are two dropout masks: without them the views are equal and the loss means nothing)."""
        if not batch.get("dropout") or self.model.training:
            return self(batch, requires=requires)
        modes = {module: module.training for module in self.model.modules()}
        self.model.train()
        try:
            return self(batch, requires=requires)
        finally:
            for module, training in modes.items():
                module.training = training

    @torch.no_grad()
    def full_logits(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, T, V) logits at every position, as the exported HF model computes them."""
        return self.vocab_head(self.encode(batch).last_hidden_state)
