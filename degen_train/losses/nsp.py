"""Next-sentence prediction (Devlin et al. 2019)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from degen_train.losses.contract import LossTerm, TermOutput, distributed_mean, register_term
from degen_train.models.output import ForwardOutput


@register_term("nsp", section="objective")
class NextSentenceTerm(LossTerm):
    """L_NSP = −(1/B) Σ_b log p(y_b | [CLS]_b), y = 0 if segment B follows A else 1; Devlin et al. 2019.

    The classifier is the HF model's own NSP head, so it is exported with the model.

    Source: Devlin et al. 2019 (BERT, NAACL 2019); released: google-research/bert, run_pretraining.py
    (get_next_sentence_output) and create_pretraining_data.py (the pairs).
    Needs: an encoder with its NSP head and sentence-pair blocks (``data.examples=packed``: half the second
    segments drawn from another document).
    Example: ``degen-train recipe=bert_mlm_nsp model=tiny``
    """

    family = "encoder"
    data_format = "mlm_nsp"
    paper_metrics = ("accuracy",)
    requires = frozenset({"sequence_logits"})
    averages_over = ("sequences",)

    def head_parameters(self, backbone: nn.Module) -> list[nn.Parameter]:
        """The NSP classifier and the pooler below it: nothing else reads them."""
        pooler = getattr(backbone.model.base_model, "pooler", None)
        return [*backbone.nsp_head.parameters(), *(pooler.parameters() if pooler is not None else ())]

    def forward(self, output: ForwardOutput) -> TermOutput:
        logits, labels = output.sequence_logits, output.sequence_labels
        assert logits is not None and labels is not None
        total = F.cross_entropy(logits.float(), labels, reduction="sum")
        count = torch.tensor(float(labels.numel()), device=labels.device)
        accuracy = (logits.detach().argmax(-1) == labels).float().mean()
        return TermOutput(distributed_mean(total, count, over="sequences"), {"accuracy": accuracy})
