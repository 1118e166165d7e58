"""Masked language modelling (Devlin et al. 2019)."""

from __future__ import annotations

from typing import Annotated, Any

import torch
import torch.nn.functional as F
from annotated_types import Ge
from torch import Tensor, nn

from degen_train.losses.chunked_ce import chunked_linear_cross_entropy
from degen_train.losses.compiled_head import compiled_head_cross_entropy
from degen_train.losses.contract import LossTerm, TermOutput, distributed_mean, register_term
from degen_train.models.output import ForwardOutput


def token_cross_entropy_sum(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """Σ_i −log softmax(z_i)[y_i] over N targets, and N; computed in float32 (Devlin et al. 2019)."""
    total = F.cross_entropy(logits.float(), targets, reduction="sum")
    return total, torch.tensor(float(targets.numel()), device=logits.device)


def token_accuracy(logits: Tensor, targets: Tensor) -> Tensor:
    """Share of targets whose arg-max logit is the target id."""
    if targets.numel() == 0:
        return torch.zeros((), device=logits.device)
    return (logits.argmax(-1) == targets).float().mean()


class TokenPredictionTerm(LossTerm):
    """−(1/N) Σ log p(target) over the N labelled positions of every process: the MLM and MLE loss alike.

    ``chunk_size``: make the output layer's logits that many positions at a time, never all N at once
    (losses/chunked_ce.py; equal loss and gradient); null: the (N, V) logits in one piece. ``compiled``: the output
    layer and its cross-entropy as one compiled graph at a padded row count (losses/compiled_head.py; equal loss and
    gradient; with chunk_size null).
    """

    perplexity_metric = "loss"
    averages_over = ("targets",)

    def __init__(self, *, chunk_size: Annotated[int, Ge(1)] | None = None, compiled: bool = False) -> None:
        super().__init__()
        self.chunk_size, self.compiled = chunk_size, compiled
        self.requires = frozenset() if chunk_size or compiled else frozenset({"logits"})

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        chunk_size = options.get("chunk_size")
        if options.get("compiled") and chunk_size:
            raise ValueError(
                f"compiled=true makes the head's logits in one compiled graph, chunk_size={chunk_size} a chunk at a "
                f"time: set chunk_size=null with compiled=true (or compiled=false)"
            )

    def head_parameters(self, backbone: nn.Module) -> list[nn.Parameter]:
        """The vocabulary head but the input word matrix (tied or not, every term reads that one)."""
        shared = {id(backbone.model.get_input_embeddings().weight)}
        return [p for p in backbone.vocab_head.parameters() if id(p) not in shared]

    def forward(self, output: ForwardOutput) -> TermOutput:
        targets = output.target_ids
        count = torch.tensor(float(targets.numel()), device=targets.device)
        if output.logits is not None:
            total, _ = token_cross_entropy_sum(output.logits, targets)
            accuracy = token_accuracy(output.logits.detach(), targets)
        else:
            assert output.labelled_hidden is not None and (self.chunk_size or self.compiled)
            # A padded vocabulary: the whole (V', H) output layer, its columns from V on masked (models/vocabulary.py)
            weight, bias = output.padded_output or (output.output_embedding_weight, output.output_bias)
            vocabulary = output.output_embedding_weight.shape[0]
            if self.compiled:
                total, correct = compiled_head_cross_entropy(
                    output.labelled_hidden, weight, bias, targets, vocabulary=vocabulary
                )
            else:
                total, correct = chunked_linear_cross_entropy(
                    output.labelled_hidden, weight, bias, targets, chunk_size=self.chunk_size, vocabulary=vocabulary
                )
            accuracy = correct / count.clamp_min(1)
        return TermOutput(distributed_mean(total, count, over="targets"), {"accuracy": accuracy})


@register_term("mlm", section="objective")
class MaskedLMTerm(TokenPredictionTerm):
    """L_MLM = −(1/N) Σ_{i masked} log p(x_i | x̃); Devlin et al. 2019 (BERT).

    Source: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
    Understanding" (NAACL 2019); released: google-research/bert, run_pretraining.py (get_masked_lm_output).
    Needs: an encoder and masked blocks (masking.*: 15% selected, 80/10/10).
    Example: ``degen-train recipe=bert_mlm model=tiny``
    """

    family = "encoder"
    paper_metrics = ("accuracy",)
    data_format = "mlm"
