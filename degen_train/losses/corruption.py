"""Shared base of ELECTRA and COCO-LM: a generator fills the masked positions with sampled tokens."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from annotated_types import Ge, Gt
from torch import Tensor

from degen_train.losses.contract import LossTerm, TermContext, distributed_mean
from degen_train.models.generator import AuxiliaryGenerator, sample_replacements
from degen_train.models.output import ForwardOutput
from degen_train.models.positions import at_positions, labelled_positions


class GeneratorCorruption(LossTerm):
    """prepare_batch: masked input -> generator -> sampled replacements -> corrupted input.

    The generator is trained by its own MLM loss; the main model never back-propagates into it
    through the samples (they are drawn without gradient).
    """

    family = "encoder"
    data_format = "mlm"
    main_model_predicts_tokens = False  # ELECTRA: no vocabulary head on the main model
    default_sample_mode = "train"

    def __init__(
        self,
        *,
        generator_layers: int | str = "auto",
        generator_hidden_fraction: float | str = "auto",
        generator_heads: int | None = None,
        generator_intermediate_size: int | None = None,
        generator_weight: Annotated[float, Ge(0)] = 1.0,
        generator_sample_mode: Literal["train", "eval"] | None = None,
        sampling_temperature: Annotated[float, Gt(0)] = 1.0,
    ) -> None:
        super().__init__()
        self.sample_mode = generator_sample_mode or self.default_sample_mode
        self.generator_options = {
            "layers": generator_layers,
            "fraction": generator_hidden_fraction,
            "heads": generator_heads,
            "intermediate_size": generator_intermediate_size,
        }
        self.generator_weight, self.sampling_temperature = generator_weight, sampling_temperature
        self.generator: AuxiliaryGenerator | None = None

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        fraction = options.get("generator_hidden_fraction", "auto")
        if fraction != "auto" and not 0 < float(fraction) <= 1:
            raise ValueError(f"{cls.name}: generator_hidden_fraction not in (0, 1]: {fraction}")

    def released_generator_shape(self, layers: int, hidden: int) -> tuple[int, float]:
        """(depth, width fraction) of the authors' generator for a main model of this depth and width."""
        raise NotImplementedError

    @property
    def uses_main_vocab_head(self) -> bool:
        """Whether the main model's own MLM head is trained (else it is frozen: no unused parameters)."""
        return self.main_model_predicts_tokens

    def setup(self, context: TermContext) -> None:
        if context.backbone is None or context.backbone.model.config.model_type != "bert":
            model_type = context.backbone.model.config.model_type if context.backbone is not None else None
            raise ValueError(
                f"loss term {self.name!r} builds its generator from the main model's BERT embeddings and layers: "
                f"it needs model.arch=bert, this model is {model_type!r}"
            )
        main = context.backbone.model.config
        auto_layers, auto_fraction = self.released_generator_shape(main.num_hidden_layers, main.hidden_size)
        options = self.generator_options
        layers = auto_layers if options["layers"] == "auto" else int(options["layers"])
        fraction = auto_fraction if options["fraction"] == "auto" else float(options["fraction"])
        if not self.uses_main_vocab_head:
            context.backbone.freeze_vocab_head()
        self.generator = AuxiliaryGenerator(
            context.backbone.model,
            layers=layers,
            hidden_size=max(1, round(fraction * main.hidden_size)),
            heads=options["heads"],
            intermediate_size=options["intermediate_size"],
        )

    def auxiliary_models(self) -> list[torch.nn.Module]:
        return [self.generator.encoder] if self.generator is not None else []

    def prepare_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        assert self.generator is not None
        index = labelled_positions(batch)  # (N,) the masked positions, flat
        generator_logits = self.generator(batch, index)  # (N, V), with gradient for the generator loss
        sampled_from = generator_logits.detach()
        if self.sample_mode == "eval" and self.generator.training:
            # COCO-LM samples from a second pass of the generator without dropout and without gradient.
            self.generator.eval()
            with torch.no_grad():
                sampled_from = self.generator(batch, index)
            self.generator.train()
        original = batch["original_ids"]  # (B, T)
        replacements = sample_replacements(
            sampled_from, index, batch["sample_seed"], length=original.shape[1], temperature=self.sampling_temperature
        )
        corrupted = original.reshape(-1).index_copy(0, index, replacements).view_as(original)  # (B, T)
        prepared = dict(batch)
        prepared.update(
            input_ids=corrupted,
            generator_logits=generator_logits,
            generator_targets=at_positions(original, index),
            replaced=corrupted != original,
        )
        if not self.main_model_predicts_tokens:
            prepared["labels"] = torch.full_like(batch["labels"], -100)
            prepared["labelled_index"] = index[:0]  # no labelled position left
        return prepared

    def generator_accuracy(self, output: ForwardOutput) -> Tensor:
        """Share of masked positions where the generator's top token is the original one."""
        logits, targets = output.extras["generator_logits"], output.extras["generator_targets"]
        return (logits.detach().argmax(-1) == targets).float().mean()

    def generator_loss(self, output: ForwardOutput) -> Tensor:
        """L_gen = −(1/N) Σ_i log p_G(x_i | x̃) at the masked positions (the generator's MLM)."""
        logits, targets = output.extras["generator_logits"], output.extras["generator_targets"]
        total = F.cross_entropy(logits.float(), targets, reduction="sum")
        return distributed_mean(total, torch.tensor(float(targets.numel()), device=targets.device), over="targets")
