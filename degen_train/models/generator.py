"""The auxiliary MLM generator of ELECTRA and COCO-LM, sharing the main model's embeddings."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import BertModel

from degen_train.core.rng import REPLACEMENT_SALT, counter_uniforms
from degen_train.models.positions import at_positions, model_inputs, skip_padding_warning
from degen_train.models.vocabulary import vocabulary_size


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
        skip_padding_warning(self.encoder)
        projection = nn.Identity() if same_width else nn.Linear(main.hidden_size, width)
        self.encoder.embeddings = _ProjectedEmbeddings(main_model.base_model.embeddings, projection)
        self.transform = nn.Sequential(
            nn.Linear(width, main.hidden_size), nn.GELU(), nn.LayerNorm(main.hidden_size, eps=main.layer_norm_eps)
        )
        self.decoder_weight = main_model.get_input_embeddings().weight  # (V', H) shared, V' ≥ V when padded
        self.decoder_bias = nn.Parameter(torch.zeros(main.vocab_size))
        self.vocabulary = vocabulary_size(main_model)  # columns past it are padding: −∞, never sampled

    def forward(self, batch: dict[str, Tensor], index: Tensor) -> Tensor:
        """(N, V') generator logits (−∞ past the tokenizer's V) at the flat positions ``index`` (N,) (the masked
        ones) of the masked input."""
        hidden = self.encoder(**model_inputs(batch)).last_hidden_state  # (B, T, H_gen)
        labelled = self.transform(at_positions(hidden, index))  # (N, H)
        logits = F.linear(labelled, self.decoder_weight, self.decoder_bias)  # (N, V'), V' = V unless padded
        if logits.shape[-1] > self.vocabulary:
            logits[:, self.vocabulary :] = float("-inf")  # in place, as the main output layer's (models/vocabulary.py)
        return logits


@torch.no_grad()
def sample_replacements(
    logits: Tensor, index: Tensor, sample_seeds: Tensor, *, length: int, temperature: float = 1.0
) -> Tensor:
    """Draw x̂_i ~ softmax(z_i / t) at each position of ``index`` (N,) (flat b·T + t, T = ``length``) by
    inverse-CDF sampling.

    Position t of example b draws the uniform counter_uniforms(seed_b ^ salt, t): the same under any batching,
    process count or resume, and drawn for the whole batch on its device at once. One uniform per position (not one
    exponential per vocabulary entry, as ``torch.multinomial`` draws) keeps sampling cheap next to the generator.
    """
    probs = F.softmax(logits.float() / temperature, dim=-1)  # (N, V)
    cdf = probs.cumsum(dim=-1)  # (N, V)
    rows, columns = index // length, index % length  # (N,) the example and the position of each draw
    seeds = sample_seeds.to(index.device).index_select(0, rows) ^ REPLACEMENT_SALT  # (N,)
    uniforms = counter_uniforms(seeds, columns)  # (N,) float64
    targets = uniforms.to(torch.float32)[:, None] * cdf[:, -1:]  # (N, 1), scaled to the CDF's end
    return torch.searchsorted(cdf, targets).squeeze(-1).clamp_max(cdf.shape[-1] - 1)
