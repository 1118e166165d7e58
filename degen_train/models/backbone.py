"""Build an HF model (BERT-style encoder or GPT-2-style decoder) and run it into a ForwardOutput.

The model is a stock ``transformers`` class, so ``save_pretrained`` exports it as is. Only the
vocabulary projection is called by hand: on the N labelled positions rather than all B·T.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedModel,
)

from degen_train.io import resolve_pretrained
from degen_train.types import ForwardOutput

FAMILIES = ("encoder", "decoder")
FAMILY_OF_MODEL_TYPE = {"bert": "encoder", "roberta": "encoder", "gpt2": "decoder"}
# Batch entries with a ForwardOutput field of their own; any other entry lands in ``extras``.
BATCH_KEYS = frozenset(
    {"input_ids", "attention_mask", "labels", "original_ids", "token_type_ids", "next_sentence_label", "views"}
)


def model_family(cfg: Any) -> str:
    """The family of the configured model: from ``init_from``'s config when set, else ``cfg.family``."""
    if cfg.get("init_from"):
        model_type = AutoConfig.from_pretrained(resolve_pretrained(cfg.init_from)).model_type
        if model_type not in FAMILY_OF_MODEL_TYPE:
            raise ValueError(
                f"model.init_from={cfg.init_from} is a {model_type!r} model; supported: "
                f"{', '.join(sorted(FAMILY_OF_MODEL_TYPE))}"
            )
        return FAMILY_OF_MODEL_TYPE[model_type]
    if cfg.family not in FAMILIES:
        raise ValueError(f"model.family={cfg.family!r} is not one of {', '.join(FAMILIES)}")
    return cfg.family


def build_hf_model(cfg: Any, *, tokenizer: Any, with_nsp_head: bool) -> PreTrainedModel:
    """A fresh model from the size preset, or the weights at ``cfg.init_from`` (path or hub name)."""
    family = model_family(cfg)
    if cfg.get("init_from"):
        loader = (
            AutoModelForCausalLM
            if family == "decoder"
            else AutoModelForPreTraining
            if with_nsp_head
            else AutoModelForMaskedLM
        )
        model = loader.from_pretrained(resolve_pretrained(cfg.init_from), attn_implementation=cfg.attention)
        if model.get_input_embeddings().num_embeddings < len(tokenizer):
            raise ValueError(
                f"model.init_from={cfg.init_from} has {model.get_input_embeddings().num_embeddings} embeddings "
                f"but the tokenizer has {len(tokenizer)} tokens: use that model's tokenizer (data.tokenizer.path)"
            )
        return model.train()  # from_pretrained leaves eval mode: continued pretraining would run without dropout
    common = {
        "vocab_size": len(tokenizer),
        "tie_word_embeddings": bool(cfg.tie_embeddings),
        "attn_implementation": cfg.attention,
    }
    if family == "encoder":
        config = BertConfig(
            hidden_size=cfg.hidden_size,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            intermediate_size=cfg.intermediate_size,
            max_position_embeddings=cfg.max_position,
            hidden_dropout_prob=cfg.dropout,
            attention_probs_dropout_prob=cfg.attention_dropout,
            pad_token_id=tokenizer.pad_token_id,
            **common,
        )
        return (BertForPreTraining if with_nsp_head else BertForMaskedLM)(config)
    config = GPT2Config(
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
        pad_token_id=tokenizer.pad_token_id,
        **common,
    )
    return GPT2LMHeadModel(config)


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
        self.family = FAMILY_OF_MODEL_TYPE.get(model.config.model_type, "encoder")

    @property
    def vocab_head(self) -> nn.Module:
        """The HF model's own MLM / LM head (tied to the input embeddings by default)."""
        cls = getattr(self.model, "cls", None)
        return cls.predictions if cls is not None else self.model.lm_head

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
        if isinstance(head, nn.Linear):  # GPT-2's lm_head
            return (lambda hidden: hidden), head
        transform, decoder = getattr(head, "transform", None), getattr(head, "decoder", None)
        if transform is not None and isinstance(decoder, nn.Linear):  # BERT's transform (dense, GELU, LN) + decoder
            return transform, decoder
        return None

    @property
    def nsp_head(self) -> nn.Module | None:
        return getattr(getattr(self.model, "cls", None), "seq_relationship", None)

    def encode(self, batch: dict[str, Tensor], *, all_layers: bool = False) -> Any:
        kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        if self.family == "encoder" and "token_type_ids" in batch:
            kwargs["token_type_ids"] = batch["token_type_ids"]
        return self.model.base_model(**kwargs, output_hidden_states=all_layers, return_dict=True)

    def forward(self, batch: dict[str, Any], *, requires: frozenset[str] = frozenset()) -> ForwardOutput:
        """One pass over ``batch``, plus one per entry of ``batch["views"]`` (extra inputs a term asked for).

        ``requires`` names the optional fields (types.OPTIONAL_FIELDS) to compute; the others stay None.
        """
        encoded = self.encode(batch, all_layers="all_hidden_states" in requires)
        hidden = encoded.last_hidden_state  # (B, T, H)
        labels = batch["labels"]
        selected = labels != -100  # (B, T)
        parts = self.vocab_parts()
        labelled, bias, logits = None, None, None
        if parts is None:  # a head we cannot split: its logits always
            logits = self.vocab_head(hidden[selected])  # (N, V)
        else:
            transform, decoder = parts
            labelled, bias = transform(hidden[selected]), decoder.bias  # (N, H), (V,)
            if "logits" in requires:
                logits = decoder(labelled)  # (N, V)
        pooled = getattr(encoded, "pooler_output", None)  # (B, H), None when the model has no pooler
        sequence_logits = None
        if "sequence_logits" in requires:
            if self.nsp_head is None or pooled is None:
                raise ValueError(f"{type(self.model).__name__} has no next-sentence head: use recipe=bert_mlm_nsp")
            sequence_logits = self.nsp_head(pooled)  # (B, 2)
        return ForwardOutput(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            hidden_states=hidden,
            labels=labels,
            logits=logits,
            labelled_hidden=labelled,
            output_bias=bias,
            target_ids=labels[selected],
            embedding_weight=self.model.get_input_embeddings().weight,
            output_embedding_weight=self.model.get_output_embeddings().weight,
            original_ids=batch.get("original_ids"),
            token_type_ids=batch.get("token_type_ids"),
            sequence_labels=batch.get("next_sentence_label"),
            pooled=pooled if "pooled" in requires else None,
            sequence_logits=sequence_logits,
            all_hidden_states=encoded.hidden_states if "all_hidden_states" in requires else None,
            views=tuple(self(view, requires=requires) for view in batch.get("views", ())),
            extras={k: v for k, v in batch.items() if k not in BATCH_KEYS},
        )

    @torch.no_grad()
    def full_logits(self, batch: dict[str, Tensor]) -> Tensor:
        """(B, T, V) logits at every position, as the exported HF model computes them."""
        return self.vocab_head(self.encode(batch).last_hidden_state)
