"""The auxiliary MLM generator of ELECTRA and COCO-LM, sharing the main model's embeddings."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import BertModel

from degen_train.rng import REPLACEMENT_SALT, mix_seed


class _ProjectedEmbeddings(nn.Module):
    """The main model's embedding module (shared, not copied), projected to the generator's width."""

    def __init__(self, shared: nn.Module, projection: nn.Module) -> None:
        super().__init__()
        self.shared, self.projection = shared, projection

    def forward(self, **kwargs: Tensor) -> Tensor:
        return self.projection(self.shared(**kwargs))  # (B, T, H_gen)


class AuxiliaryGenerator(nn.Module):
    """A BERT-style MLM generator that reads the main model's embeddings and decodes with its word matrix.

    At the main width (COCO-LM) the embeddings feed the generator's layers directly; narrower
    (ELECTRA: ¼ or ⅓ of the width at full depth) they pass a linear projection first, and the MLM head
    maps back to the main width (dense → GELU → LayerNorm) before the tied decoder and its own bias.
    """

    def __init__(
        self,
        main_model: nn.Module,
        *,
        layers: int,
        hidden_size: int | None = None,
        heads: int | None = None,
        intermediate_size: int | None = None,
    ) -> None:
        super().__init__()
        main = main_model.config
        width = hidden_size or main.hidden_size
        if layers < 1 or not 1 <= width <= main.hidden_size:
            raise ValueError(
                f"generator: layers must be >= 1 and hidden size in [1, {main.hidden_size}], got {layers} and {width}"
            )
        same_width = width == main.hidden_size
        config = copy.deepcopy(main)
        config.hidden_size, config.num_hidden_layers = width, layers
        config.num_attention_heads = heads or (main.num_attention_heads if same_width else max(1, width // 64))
        config.intermediate_size = intermediate_size or (main.intermediate_size if same_width else 4 * width)
        if width % config.num_attention_heads:
            raise ValueError(f"generator width {width} is not a multiple of its {config.num_attention_heads} heads")
        self.encoder = BertModel(config, add_pooling_layer=False)
        projection = nn.Identity() if same_width else nn.Linear(main.hidden_size, width)
        self.encoder.embeddings = _ProjectedEmbeddings(main_model.base_model.embeddings, projection)
        self.transform = nn.Sequential(
            nn.Linear(width, main.hidden_size), nn.GELU(), nn.LayerNorm(main.hidden_size, eps=main.layer_norm_eps)
        )
        self.decoder_weight = main_model.get_input_embeddings().weight  # (V, H) shared
        self.decoder_bias = nn.Parameter(torch.zeros(main.vocab_size))

    def forward(self, batch: dict[str, Tensor], selected: Tensor) -> Tensor:
        """(N, V) generator logits at the selected (masked) positions of the masked input."""
        kwargs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        if "token_type_ids" in batch:
            kwargs["token_type_ids"] = batch["token_type_ids"]
        hidden = self.encoder(**kwargs).last_hidden_state  # (B, T, H_gen)
        return F.linear(self.transform(hidden[selected]), self.decoder_weight, self.decoder_bias)  # (N, V)


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
        generator = torch.Generator().manual_seed(mix_seed(int(sample_seeds[b]), REPLACEMENT_SALT))
        uniforms[here] = torch.rand(int(here.sum()), generator=generator, dtype=torch.float64)
    targets = uniforms.to(cdf.device, torch.float32)[:, None] * cdf[:, -1:]  # (N, 1), scaled to the CDF's end
    return torch.searchsorted(cdf, targets).squeeze(-1).clamp_max(cdf.shape[-1] - 1)
