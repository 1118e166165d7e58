"""What the backbone's forward pass hands the loss terms (degen_train/losses/). No logic here."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass(frozen=True, kw_only=True)
class ForwardOutput:
    """What one forward pass produced. B batch, T tokens, H hidden, V vocab, N labelled positions.

    Vocabulary logits are computed only where ``labels != -100`` (row-major order): at 15% of the
    positions for MLM this skips most of the (B·T·V) projection and gives the same loss.
    """

    input_ids: Tensor  # (B, T) what the model saw (masked or corrupted)
    attention_mask: Tensor  # (B, T) 1 = real token
    hidden_states: Tensor  # (B, T, H) last layer
    labels: Tensor  # (B, T) target id, -100 = no target
    target_ids: Tensor  # (N,) labels at those positions
    embedding_weight: Tensor  # (V, H) input embeddings, the tokenizer's V rows (padding left out: a view)
    output_embedding_weight: Tensor  # (V, H) LM-head decoder (the same tensor when tied)
    original_ids: Tensor | None = None  # (B, T) ids before masking/corruption
    token_type_ids: Tensor | None = None  # (B, T) segment ids (NSP pairs)
    sequence_labels: Tensor | None = None  # (B,) NSP label: 0 = B follows A, 1 = random B
    # The output layer's input and bias at the N labelled positions: logits = labelled_hidden · Wᵀ + b, with W the
    # output_embedding_weight (a term may make them chunk by chunk instead of asking for ``logits``).
    labelled_hidden: Tensor | None = None  # (N, H) after the head's own transform (BERT's dense+LN; GPT-2: none)
    output_bias: Tensor | None = None  # (V,)
    # With model.pad_vocab_to_multiple_of > 1: the output layer's whole (V', H) weight and (V',) bias, for a term that
    # makes logits itself at the padded width (the tiles' width; models/vocabulary.py), masking columns V.. itself.
    padded_output: tuple[Tensor, Tensor | None] | None = None
    # Optional: computed only when a term names the field in its ``requires`` (OPTIONAL_FIELDS).
    logits: Tensor | None = None  # (N, V) at the labelled positions; (N, V') with −∞ at padded columns
    pooled: Tensor | None = None  # (B, H) [CLS] after the pooler
    sequence_logits: Tensor | None = None  # (B, 2) NSP head
    all_hidden_states: tuple[Tensor, ...] | None = None  # embeddings + every layer
    views: tuple[ForwardOutput, ...] = ()  # one output per view a term's prepare_batch added (COCO-LM crops)
    extras: dict[str, Tensor] = field(default_factory=dict)  # batch entries with no field of their own: EXTRAS
    # (N,) the labelled positions, flat b·T + t, row-major (b = labelled_index // T): the backbone passes the
    # collator's; a hand-made output (a unit test) may leave it out and it is found from ``labels``.
    labelled_index: Tensor = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.labelled_index is None:
            object.__setattr__(self, "labelled_index", (self.labels.reshape(-1) != -100).nonzero().squeeze(1))


# The ForwardOutput fields a term must ask for in ``LossTerm.requires``; every other field is always set.
OPTIONAL_FIELDS = frozenset({"logits", "pooled", "sequence_logits", "all_hidden_states"})

# Every key that may travel in ``ForwardOutput.extras``: who writes it, its shape and meaning. A term that
# adds a batch entry in ``prepare_batch`` documents it here (tests/unit/test_contract.py checks each recipe).
EXTRAS: dict[str, str] = {
    "sample_seed": "collator: (B,) int64 per-example seed for a term's own sampling (masks, crops, replacements)",
    "generator_logits": "electra, coco_clm: (N, V) the generator's logits at the masked positions, with gradient",
    "generator_targets": "electra, coco_clm: (N,) the original ids at those positions",
    "replaced": "electra, coco_clm: (B, T) bool, the corrupted input differs from the original here",
    "clm_labels": "coco_clm (clm_head=released): (B, T) corrective-LM targets, -100 = none",
    "clm_index": "coco_clm (clm_head=released): (N,) flat positions of clm_labels != -100 (as labelled_index)",
}
