"""MLM corruption: 15% of maskable tokens, split 80/10/10, never specials or padding."""

from __future__ import annotations

import torch

from degen_train.core.rng import mix_seed
from degen_train.data.collate import CausalLMCollator, MaskedLMCollator

PAD, UNK, CLS, SEP, MASK = range(5)


def batch_rows(count: int, length: int) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    rows = []
    for i in range(count):
        body = torch.randint(5, 100, (length - 2 - i % 7,), generator=generator).tolist()
        rows.append({"input_ids": [CLS, *body, SEP], "sample_seed": mix_seed(1, 0, i)})
    return rows


def collator() -> MaskedLMCollator:
    return MaskedLMCollator(pad_id=PAD, mask_id=MASK, special_ids=[PAD, UNK, CLS, SEP, MASK], vocab_size=100)


def test_masking_statistics_follow_80_10_10() -> None:
    rows = batch_rows(96, 512)
    batch = collator()(rows)
    original, inputs, labels = batch["original_ids"], batch["input_ids"], batch["labels"]
    maskable = (original >= 5) & batch["attention_mask"].bool()
    selected = labels != -100
    assert abs(selected.sum().item() / maskable.sum().item() - 0.15) < 0.01
    n = selected.sum().item()
    as_mask = (inputs[selected] == MASK).sum().item() / n
    kept = (inputs[selected] == original[selected]).sum().item() / n
    replaced = 1 - as_mask - kept
    # A random replacement draws the original id with p = 1/95, so "kept" is 0.1 + 0.1/95.
    assert abs(as_mask - 0.8) < 0.015
    assert abs(kept - 0.101) < 0.01
    assert abs(replaced - 0.099) < 0.01
    assert torch.equal(labels[selected], original[selected])


def test_specials_and_padding_are_never_selected() -> None:
    batch = collator()(batch_rows(64, 256))
    special = batch["original_ids"] < 5
    assert (batch["attention_mask"] == 0).any()  # rows have different lengths, so padding exists
    assert not (batch["labels"][special] != -100).any()
    assert torch.equal(batch["input_ids"][special], batch["original_ids"][special])
    replaced = (batch["input_ids"] != batch["original_ids"]) & (batch["input_ids"] != MASK)
    assert (batch["input_ids"][replaced] >= 5).all()  # random replacements are never special tokens


def test_masking_depends_only_on_the_example_seed() -> None:
    """Not on the batch's padded width either: short rows (sentences) batched with longer ones or alone."""
    rows = [*batch_rows(3, 40), *batch_rows(3, 128)]
    whole = collator()(rows)
    halves = [collator()(rows[:3]), collator()(rows[3:])]
    assert halves[0]["labels"].shape[1] < whole["labels"].shape[1]
    for name in ("input_ids", "labels"):
        for i, row in enumerate(rows):
            length = len(row["input_ids"])
            assert torch.equal(whole[name][i, :length], halves[i // 3][name][i % 3, :length]), (name, i)
    reordered = collator()(rows[::-1])
    assert torch.equal(reordered["labels"].flip(0), whole["labels"])


def test_causal_labels_are_the_next_token_and_ignore_padding() -> None:
    rows = [{"input_ids": [7, 8, 9], "sample_seed": 1}, {"input_ids": [5, 6], "sample_seed": 2}]
    batch = CausalLMCollator(pad_id=0)(rows)
    assert batch["labels"][0, :3].tolist() == [8, 9, -100]
    assert batch["labels"][1, :3].tolist() == [6, -100, -100]
    assert (batch["labels"][:, 3:] == -100).all()
