"""The final validation's per-batch record of the perplexity's loss: val_perplexity's evaluation-set error.

A run's ``val_perplexity`` is exp of one term's token loss (``summary.val_perplexity_of``) averaged over the
validation batches, each batch weighted by its examples (Lightning's epoch mean with ``batch_size``), so

    val_perplexity = exp( Σ_b n_b · L_b / Σ_b n_b )

over the batches b of every process, with n_b the batch's examples and L_b its mean token loss. Kept as an
``ItemScores("perplexity", {"nll": n_b · L_b, "tokens": n_b})`` record (metrics/evaluation_noise.py's form), one item
per batch, the report's bootstrap resamples the validation set the way generated-text perplexity's resamples its
documents (the unit a reviewer asks for, issue 71.5). The unit is the batch, not the document: packing joins
documents into blocks (data/examples.py), so no document boundary survives into a batch; a batch is a fixed,
unshuffled run of consecutive blocks (data/sampling.ShardedBatches), a stretch of the validation text, so the
blocks one document spans mostly share its batch and its luck is resampled together.

Each item's id is its process, its place there and a hash of its tokens as the corpus holds them (the masked
positions' labels put back), so two runs pair batch by batch only where they validated the same text in the same
batches (same data, batch size and process count); the report names any other pairing and takes each run's own
bootstrap error instead."""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import Tensor

# the host-side id a validation batch carries to run/module.validate_batch, which pops it
BATCH_ID_KEY = "validation_item"


def batch_text_hash(batch: dict[str, Any]) -> str:
    """sha256 (16 hex digits) of the batch's tokens as the corpus holds them: ``original_ids`` where the collator
    keeps them, else ``input_ids`` with each labelled position's label put back (an MLM's masking is the run's own
    draw, its text is not), over the attention mask."""
    ids = batch.get("original_ids")
    if ids is None:
        ids, labels = batch["input_ids"], batch.get("labels")
        if isinstance(labels, Tensor) and labels.shape == ids.shape:
            ids = torch.where(labels >= 0, labels, ids)
    mask = batch.get("attention_mask")
    kept = ids[mask.bool()] if isinstance(mask, Tensor) and mask.shape == ids.shape else ids.reshape(-1)
    digest = hashlib.sha256(str(tuple(ids.shape)).encode())
    digest.update(kept.to(torch.int64).cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


class ValidationItems:
    """One validation epoch's batches: (id, the batch's mean loss of the perplexity's term, its examples)."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, Tensor, int]] = []

    def start(self) -> None:
        self.batches = []

    def add(self, text_hash: str | None, rank: int, loss: Tensor | None, examples: int) -> None:
        if text_hash is not None and loss is not None:
            self.batches.append((f"rank{rank}.batch{len(self.batches)}:{text_hash}", loss.detach(), examples))

    def record(self) -> dict[str, Any] | None:
        """The last validation's record over every process (a collective: every process calls it), or None where
        it scored no batch (no final validation, no term with a perplexity)."""
        mine = [(item, float(loss), examples) for item, loss, examples in self.batches]  # one read, at the end
        everyone: list[Any] = [mine]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            everyone = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(everyone, mine)
        rows = [row for part in everyone for row in part]
        if not rows or len({item for item, _, _ in rows}) != len(rows):
            return None
        import numpy as np

        examples = np.array([n for _, _, n in rows], dtype=float)
        nll = np.array([loss for _, loss, _ in rows]) * examples
        if not np.isfinite(nll).all():
            return None
        # metrics/evaluation_noise.ItemScores' record form (data/ may not import metrics/): its "perplexity" kind
        return {"kind": "perplexity", "ids": [i for i, _, _ in rows], "nll": [float(v) for v in nll],
                "tokens": [float(v) for v in examples]}  # fmt: skip
