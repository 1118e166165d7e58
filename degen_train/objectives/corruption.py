"""Shared base of ELECTRA and COCO-LM: a generator fills the masked positions with sampled tokens."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from degen_train.models.generator import AuxiliaryGenerator, sample_replacements
from degen_train.terms import LossTerm, TermContext, distributed_mean
from degen_train.types import ForwardOutput


class GeneratorCorruption(LossTerm):
    """prepare_batch: masked input -> generator -> sampled replacements -> corrupted input.

    The generator is trained by its own MLM loss; the main model never back-propagates into it
    through the samples (they are drawn without gradient).
    """

    family = "encoder"
    data_format = "mlm"
    main_model_predicts_tokens = False  # ELECTRA: no vocabulary head on the main model

    def __init__(
        self,
        *,
        generator_layers: int | str = "auto",
        generator_heads: int | None = None,
        generator_intermediate_size: int | None = None,
        generator_weight: float = 1.0,
        sampling_temperature: float = 1.0,
    ) -> None:
        super().__init__()
        if generator_weight < 0 or sampling_temperature <= 0:
            raise ValueError(
                f"{self.name}: generator_weight must be >= 0 and sampling_temperature > 0, got "
                f"{generator_weight} and {sampling_temperature}"
            )
        self.generator_options = {
            "layers": generator_layers,
            "heads": generator_heads,
            "intermediate_size": generator_intermediate_size,
        }
        self.generator_weight, self.sampling_temperature = generator_weight, sampling_temperature
        self.generator: AuxiliaryGenerator | None = None

    def setup(self, context: TermContext) -> None:
        if context.backbone is None or context.backbone.model.config.model_type != "bert":
            raise ValueError(f"loss term {self.name!r} needs a BERT-style main model")
        options = dict(self.generator_options)
        if options["layers"] == "auto":  # a third of the main depth: 4 layers for a 12-layer base model
            options["layers"] = max(1, context.backbone.model.config.num_hidden_layers // 3)
        self.generator = AuxiliaryGenerator(context.backbone.model, **options)

    def prepare_batch(self, batch: dict[str, Any], backbone: nn.Module) -> dict[str, Any]:
        assert self.generator is not None
        selected = batch["labels"] != -100  # (B, T) the masked positions
        generator_logits = self.generator(batch, selected)  # (N, V), with gradient for the generator loss
        replacements = sample_replacements(
            generator_logits.detach(), selected, batch["sample_seed"], temperature=self.sampling_temperature
        )
        original = batch["original_ids"]
        corrupted = original.clone()
        corrupted[selected] = replacements
        prepared = dict(batch)
        prepared.update(
            input_ids=corrupted,
            generator_logits=generator_logits,
            generator_targets=original[selected],
            replaced=corrupted != original,
        )
        if not self.main_model_predicts_tokens:
            prepared["labels"] = torch.full_like(batch["labels"], -100)
        return prepared

    def generator_loss(self, output: ForwardOutput) -> Tensor:
        """L_gen = −(1/N) Σ_i log p_G(x_i | x̃) at the masked positions (the generator's MLM)."""
        logits, targets = output.extras["generator_logits"], output.extras["generator_targets"]
        total = F.cross_entropy(logits.float(), targets, reduction="sum")
        return distributed_mean(total, torch.tensor(float(targets.numel()), device=targets.device))
