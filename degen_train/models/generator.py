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
    """Draw x̂_i ~ softmax(z_i / t) at each selected position by inverse-CDF sampling.

    Each example's uniforms come from its own seed, so the draws are identical under any batching,
    process count or resume. One uniform per position (not one exponential per vocabulary entry, as
    ``torch.multinomial`` draws) keeps sampling cheap next to the generator's forward pass.
    """
    probs = F.softmax(logits.float() / temperature, dim=-1)  # (N, V)
    cdf = probs.cumsum(dim=-1)  # (N, V)
    rows = selected.nonzero()[:, 0]  # (N,) the example each selected position belongs to
    uniforms = torch.empty(len(rows), dtype=torch.float64)
    for b in rows.unique().tolist():
        here = (rows == b).cpu()
        generator = torch.Generator().manual_seed(mix_seed(int(sample_seeds[b]), 0xC0C0))
        uniforms[here] = torch.rand(int(here.sum()), generator=generator, dtype=torch.float64)
    targets = uniforms.to(cdf.device, torch.float32)[:, None] * cdf[:, -1:]  # (N, 1), scaled to the CDF's end
    return torch.searchsorted(cdf, targets).squeeze(-1).clamp_max(cdf.shape[-1] - 1)
