"""Collators: pad, then build the labels of the objective (MLM 80/10/10 masking, NSP, causal)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


def labelled_index(labels: Tensor) -> Tensor:
    """(N,) flat positions b·T + t of the labelled tokens (labels != -100), row-major: made with the batch on the
    host, where finding them costs nothing, so the step never waits for the device to count them."""
    return (labels.reshape(-1) != -100).nonzero().squeeze(1)


# A batch also carries "padded": whether any row is shorter than the batch (known here, on the host). A batch of
# full rows (packed blocks) runs its model without an attention mask, which transformers would otherwise inspect
# on the device (``mask.all()``), making the host wait once per forward.


def pad_to(rows: list[list[int]], value: int, multiple: int = 8) -> Tensor:
    """Stack rows right-padded with ``value`` to the longest row, rounded up to ``multiple``."""
    longest = max(len(r) for r in rows)
    length = -(-longest // multiple) * multiple
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def mask_tokens(
    ids: Tensor,
    maskable: Tensor,
    *,
    generator: torch.Generator,
    probability: float,
    mask_id: int,
    replacement_ids: Tensor,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
) -> tuple[Tensor, Tensor]:
    """BERT masking of one sequence: each maskable token is selected with ``probability``; of those
    80% become [MASK], 10% a random token, 10% stay (Devlin et al. 2019). Returns (inputs, labels)."""
    selected = (torch.rand(ids.shape, generator=generator) < probability) & maskable
    action = torch.rand(ids.shape, generator=generator)
    picks = torch.randint(len(replacement_ids), ids.shape, generator=generator)
    inputs = ids.clone()
    to_mask = selected & (action < mask_fraction)
    to_random = selected & (action >= mask_fraction) & (action < mask_fraction + random_fraction)
    inputs[to_mask] = mask_id
    inputs[to_random] = replacement_ids[picks[to_random]]
    labels = torch.where(selected, ids, torch.full_like(ids, -100))
    return inputs, labels


@dataclass
class MaskedLMCollator:
    """Batches for MLM (and NSP when examples carry ``next_sentence_label``)."""

    pad_id: int
    mask_id: int
    special_ids: list[int]
    vocab_size: int
    probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1
    replacement_ids: Tensor = field(init=False)

    def __post_init__(self) -> None:
        keep = torch.ones(self.vocab_size, dtype=torch.bool)
        keep[torch.tensor(sorted(set(self.special_ids)), dtype=torch.long)] = False
        self.replacement_ids = torch.arange(self.vocab_size)[keep]
        self._special = torch.tensor(sorted(set(self.special_ids) | {self.pad_id}), dtype=torch.long)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Tensor]:
        ids = pad_to([r["input_ids"] for r in rows], self.pad_id)  # (B, T)
        attention_mask = pad_to([[1] * len(r["input_ids"]) for r in rows], 0)
        maskable = ~torch.isin(ids, self._special) & attention_mask.bool()
        inputs, labels = ids.clone(), torch.full_like(ids, -100)
        for i, row in enumerate(rows):
            # Drawn over the row's own length: a row's mask must not depend on how long its batch's longest row
            # is (1 process holding the global batch pads differently from each of 2 processes).
            length = len(row["input_ids"])
            generator = torch.Generator().manual_seed(row["sample_seed"])
            inputs[i, :length], labels[i, :length] = mask_tokens(
                ids[i, :length],
                maskable[i, :length],
                generator=generator,
                probability=self.probability,
                mask_id=self.mask_id,
                replacement_ids=self.replacement_ids,
                mask_fraction=self.mask_fraction,
                random_fraction=self.random_fraction,
            )
        batch = {
            "input_ids": inputs,
            "original_ids": ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "labelled_index": labelled_index(labels),
            "padded": not bool(attention_mask.all()),
            "sample_seed": torch.tensor([r["sample_seed"] for r in rows], dtype=torch.long),
        }
        if "token_type_ids" in rows[0]:
            batch["token_type_ids"] = pad_to([r["token_type_ids"] for r in rows], 0)
        if "next_sentence_label" in rows[0]:
            batch["next_sentence_label"] = torch.tensor([r["next_sentence_label"] for r in rows])
        return batch


@dataclass
class CausalLMCollator:
    """Batches for next-token prediction: labels[t] = input_ids[t+1]; padding and the last slot are −100."""

    pad_id: int

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Tensor]:
        ids = pad_to([r["input_ids"] for r in rows], self.pad_id)  # (B, T)
        attention_mask = pad_to([[1] * len(r["input_ids"]) for r in rows], 0)
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = torch.where(attention_mask[:, 1:].bool(), ids[:, 1:], labels[:, 1:])
        return {
            "input_ids": ids,
            "original_ids": ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "labelled_index": labelled_index(labels),
            "padded": not bool(attention_mask.all()),
            "sample_seed": torch.tensor([r["sample_seed"] for r in rows], dtype=torch.long),
        }
