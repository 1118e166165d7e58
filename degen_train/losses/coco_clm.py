"""COCO-LM corrective language modelling (Meng et al. 2021): copy head + LM over the vocabulary."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from annotated_types import Ge
from torch import Tensor, nn

from degen_train.losses.contract import TermContext, TermOutput, distributed_mean, masked_mean, register_term
from degen_train.losses.corruption import GeneratorCorruption
from degen_train.losses.electra import replaced_token_detection
from degen_train.models.output import ForwardOutput
from degen_train.models.positions import at_positions, labelled_positions


def corrective_lm_paper(lm_logits: Tensor, targets: Tensor, copy_logits: Tensor, copied: Tensor) -> Tensor:
    """Σ_i −log(1[x̂_i = x_i]·sg(p_copy(1|h_i)) + sg(p_copy(0|h_i))·p_LM(x_i|h_i)); Meng et al. 2021, eq. 5."""
    log_copy = F.logsigmoid(copy_logits.detach().float())  # log p_copy(1|h)
    log_not_copy = F.logsigmoid(-copy_logits.detach().float())  # log p_copy(0|h)
    log_lm = -F.cross_entropy(lm_logits.float(), targets, reduction="none")  # log p_LM(x_i|h_i)
    generate = log_not_copy + log_lm
    copy_term = torch.where(copied, log_copy, torch.full_like(log_copy, float("-inf")))
    return -torch.logaddexp(copy_term, generate).sum()


def corrective_lm_released(lm_logits: Tensor, targets: Tensor, copy_logits: Tensor) -> Tensor:
    """Σ_i sg(1 − p_copy(1|h_i)) · −log p_LM(x_i|h_i): the authors' released implementation."""
    weight = 1 - torch.sigmoid(copy_logits.detach().float())
    return (weight * F.cross_entropy(lm_logits.float(), targets, reduction="none")).sum()


@register_term("coco_clm", section="objective")
class CorrectiveLMTerm(GeneratorCorruption):
    """L = L_gen + λ_copy · L_copy + L_LM with λ_copy = 50; Meng et al. 2021 (COCO-LM).

    Source: Meng et al. 2021, "COCO-LM: Correcting and Contrasting Text Sequences for Language Model Pretraining"
    (NeurIPS 2021); released: microsoft/COCO-LM, fairseq/fairseq/models/cocolm/model.py and its base.yaml.
    Needs: an encoder and masked blocks (COCO-LM's masking: every selected token [MASK]); it builds its generator.
    Example: ``degen-train recipe=coco_lm model=tiny``
    """

    main_model_predicts_tokens = True
    # The CLM loss is over generator-corrupted input (copy-weighted): its exp() is no perplexity.
    perplexity_metric = "generator_mlm"
    paper_metrics = ("copy_accuracy", "clm_accuracy", "generator_accuracy", "replaced_rate")
    default_sample_mode = "eval"  # the released config: sample from a no-grad pass without dropout
    averages_over = ("targets", "tokens")  # generator and CLM: the masked tokens; copy: every real token

    def __init__(
        self,
        *,
        copy_weight: Annotated[float, Ge(0)] = 50.0,
        lm_form: Literal["paper", "released"] = "paper",
        clm_head: Literal["released", "mlm_head"] = "released",
        **generator_options: Any,
    ) -> None:
        super().__init__(**generator_options)
        self.copy_weight, self.lm_form, self.clm_head = copy_weight, lm_form, clm_head
        self.requires = frozenset({"logits"}) if clm_head == "mlm_head" else frozenset()  # the main MLM head's
        self.copy_head: nn.Module | None = None
        self.clm_bias: nn.Parameter | None = None

    @property
    def uses_main_vocab_head(self) -> bool:
        return self.clm_head == "mlm_head"

    def released_generator_shape(self, layers: int, hidden: int) -> tuple[int, float]:
        """The main width; 4 layers from base width up (base, large), 2 below (small): Meng et al. 2021's
        released configs. Never more than half the main depth (a 2-layer main model gets 1)."""
        return max(1, min(4 if hidden >= 768 else 2, layers // 2)), 1.0

    def setup(self, context: TermContext) -> None:
        super().setup(context)
        self.copy_head = nn.Linear(context.hidden_size, 1)  # the released binary head: one linear layer
        if self.clm_head == "released":
            self.clm_bias = nn.Parameter(torch.zeros(context.vocab_size))

    def prepare_batch(self, batch: dict) -> dict:
        prepared = super().prepare_batch(batch)
        if self.clm_head == "released":  # our own head: the backbone need not project anything itself
            index = labelled_positions(prepared)
            prepared["clm_labels"], prepared["labels"] = prepared["labels"], torch.full_like(prepared["labels"], -100)
            prepared["clm_index"], prepared["labelled_index"] = index, index[:0]
        return prepared

    def clm_logits(self, output: ForwardOutput) -> tuple[Tensor, Tensor, Tensor]:
        """(N, V) logits at the selected positions, their (N,) targets and (N,) flat positions."""
        if self.clm_head == "mlm_head":
            assert output.logits is not None
            return output.logits, output.target_ids, output.labelled_index
        index = output.extras["clm_index"]
        # Released CLM head: a bare linear over the tied word embeddings plus a bias (no MLM transform).
        hidden = at_positions(output.hidden_states, index)  # (N, H)
        logits = F.linear(hidden, output.embedding_weight, self.clm_bias)  # (N, V)
        return logits, at_positions(output.extras["clm_labels"], index), index

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert self.copy_head is not None
        lm_logits, targets, index = self.clm_logits(output)
        copy_logits = self.copy_head(output.hidden_states).squeeze(-1)  # (B, T)
        mask = output.attention_mask.bool()
        copied = ~output.extras["replaced"]  # 1 = the token is the original one
        copy_total, copy_count = replaced_token_detection(copy_logits, copied, mask)
        copy_loss = distributed_mean(copy_total, copy_count, over="tokens")
        copy_at_targets = at_positions(copy_logits, index)  # (N,)
        if self.lm_form == "paper":
            lm_total = corrective_lm_paper(lm_logits, targets, copy_at_targets, at_positions(copied, index))
        else:
            lm_total = corrective_lm_released(lm_logits, targets, copy_at_targets)
        count = torch.tensor(float(targets.numel()), device=lm_total.device)
        lm_loss = distributed_mean(lm_total, count, over="targets")
        generator = self.generator_loss(output)
        loss = self.generator_weight * generator + self.copy_weight * copy_loss + lm_loss
        metrics = {
            "generator_mlm": generator.detach(),
            "copy": copy_loss.detach(),
            "clm": lm_loss.detach(),
            "copy_accuracy": masked_mean((copy_logits.detach() > 0) == copied, mask),
            "clm_accuracy": (lm_logits.detach().argmax(-1) == targets).float().mean(),
            "generator_accuracy": self.generator_accuracy(output),
            "replaced_rate": masked_mean(~copied, mask),
        }
        return TermOutput(loss, metrics)
