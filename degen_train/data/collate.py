"""Collators: pad, then build the labels of the objective (MLM 80/10/10 masking, NSP, causal)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from degen_train.core.rng import seed_states, uniforms_at


def labelled_index(labels: Tensor) -> Tensor:
    """(N,) flat positions b·T + t of the labelled tokens (labels != -100), row-major: made with the batch on the
    host, where finding them costs nothing, so the step never waits for the device to count them."""
    return (labels.reshape(-1) != -100).nonzero().squeeze(1)


# A batch also carries "padded": whether any row is shorter than the batch (known here, on the host). A batch of
# full rows (packed blocks) runs its model without an attention mask, which transformers would otherwise inspect
# on the device (``mask.all()``), making the host wait once per forward.


def pad_to(rows: list[list[int]], value: int, multiple: int = 8) -> Tensor:
    """Stack rows right-padded with ``value`` to the longest row, rounded up to ``multiple`` (one numpy array)."""
    lengths = [len(r) for r in rows]
    longest = max(lengths)
    length = -(-longest // multiple) * multiple
    if length == longest and min(lengths) == longest:  # packed blocks: every row full
        return torch.from_numpy(np.asarray(rows, dtype=np.int64))
    out = np.full((len(rows), length), value, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : lengths[i]] = row
    return torch.from_numpy(out)


def row_mask(rows: list[dict[str, Any]], length: int) -> Tensor:
    """(B, T) 1 over each row's own tokens, 0 over its padding."""
    lengths = torch.tensor([len(r["input_ids"]) for r in rows])  # (B,)
    return (torch.arange(length)[None, :] < lengths[:, None]).long()


def mask_tokens(
    ids: Tensor,
    maskable: Tensor,
    *,
    seeds: Tensor,
    probability: float,
    mask_id: int,
    replacement_ids: Tensor,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
) -> tuple[Tensor, Tensor]:
    """BERT masking of a batch (B, T): each maskable token is selected with ``probability``; of those 80% become
    [MASK], 10% a random token, 10% stay (Devlin et al. 2019). Returns (inputs, labels).

    Position t of row b draws its three uniforms counter_uniforms(seeds[b], 3t + k), k = 0, 1, 2: a token's fate
    depends on its example's seed and its position only, not on the batch, its padding or the process count."""
    positions = torch.arange(ids.shape[1], dtype=torch.int64)[None, :] * 3  # (1, T)
    states = seed_states(seeds)[:, None]  # (B, 1): the seed's round, once per row
    select, action, pick = (uniforms_at(states, positions + k) for k in range(3))  # (B, T) each
    selected = (select < probability) & maskable
    picks = (pick * len(replacement_ids)).long().clamp_max(len(replacement_ids) - 1)
    to_mask = selected & (action < mask_fraction)
    to_random = selected & (action >= mask_fraction) & (action < mask_fraction + random_fraction)
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, replacement_ids[picks], inputs)
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
        attention_mask = row_mask(rows, ids.shape[1])  # (B, T)
        maskable = ~torch.isin(ids, self._special) & attention_mask.bool()
        seeds = torch.tensor([r["sample_seed"] for r in rows], dtype=torch.long)  # (B,)
        inputs, labels = mask_tokens(
            ids,
            maskable,
            seeds=seeds,
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
            "sample_seed": seeds,
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
        attention_mask = row_mask(rows, ids.shape[1])  # (B, T)
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
