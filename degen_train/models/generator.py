"""The auxiliary MLM generator of ELECTRA and COCO-LM, sharing the main model's embeddings."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import BertForMaskedLM

from degen_train.data.sampling import mix_seed


class AuxiliaryGenerator(nn.Module):
    """A shallow BERT MLM whose token/position embeddings (and tied MLM decoder) are the main model's."""

    def __init__(
        self, main_model: nn.Module, *, layers: int, heads: int | None = None, intermediate_size: int | None = None
    ) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"generator layers must be >= 1, got {layers}")
        config = copy.deepcopy(main_model.config)
        config.num_hidden_layers = layers
        config.num_attention_heads = heads or config.num_attention_heads
        config.intermediate_size = intermediate_size or config.intermediate_size
        config.tie_word_embeddings = True
        generator = BertForMaskedLM(config)
        # Shared, not copied: one set of embedding parameters is trained by both models.
        generator.bert.embeddings = main_model.base_model.embeddings
        generator.cls.predictions.decoder.weight = main_model.get_input_embeddings().weight
        self.model = generator

    def forward(self, batch: dict[str, Tensor], selected: Tensor) -> Tensor:
        """(N, V) generator logits at the selected (masked) positions of the masked input."""
        kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        if "token_type_ids" in batch:
            kwargs["token_type_ids"] = batch["token_type_ids"]
        hidden = self.model.bert(**kwargs).last_hidden_state  # (B, T, H)
        return self.model.cls(hidden[selected])  # (N, V)


@torch.no_grad()
def sample_replacements(logits: Tensor, selected: Tensor, sample_seeds: Tensor, *, temperature: float = 1.0) -> Tensor:
    """Draw x̂_i ~ softmax(z_i / t) at each selected position, row b's draws seeded by its example seed.

    Seeds per example keep the draws identical under any batching, process count or resume.
    """
    probs = F.softmax(logits.float() / temperature, dim=-1)  # (N, V)
    rows = selected.nonzero()[:, 0]  # (N,) the example each selected position belongs to
    out = torch.empty(len(rows), dtype=torch.long, device=logits.device)
    for b in rows.unique().tolist():
        here = rows == b
        generator = torch.Generator(device=logits.device).manual_seed(mix_seed(int(sample_seeds[b]), 0xC0C0))
        out[here] = torch.multinomial(probs[here], 1, generator=generator).squeeze(-1)
    return out
