"""TaCL: token-aware contrastive learning against a frozen teacher (Su et al. 2021)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from annotated_types import Gt
from torch import Tensor, nn
from transformers import AutoConfig, AutoModel

from degen_train.core.handed_files import no_remote_code
from degen_train.core.io import resolve_pretrained
from degen_train.core.roles import INPUT
from degen_train.devices.precision import autocast_off
from degen_train.losses.contract import LossTerm, TermContext, TermOutput, distributed_mean, register_term
from degen_train.models.loading import load_pretrained
from degen_train.models.output import ForwardOutput

log = logging.getLogger(__name__)


def tacl_loss(
    student: Tensor, teacher: Tensor, anchors: Tensor, candidates: Tensor, *, temperature: float
) -> tuple[Tensor, Tensor]:
    """Σ_i −log( e^{cos(h̃_i, h_i)/τ} / Σ_{j∈C(i)} e^{cos(h̃_i, h_j)/τ} ) over anchors i, and their count;
    Su et al. 2021 (TaCL), eq. 2. student, teacher: (B, T, H); anchors: (B, T) bool; candidates: (B, T, T)
    bool, row i = the positions j allowed in i's denominator (i itself always included)."""
    with autocast_off(student):
        s = F.normalize(student.float(), dim=-1)
        t = F.normalize(teacher.float(), dim=-1)
        logits = torch.einsum("bih,bjh->bij", s, t) / temperature  # (B, T, T): one T×T per sequence
        logits = logits.masked_fill(~candidates, float("-inf"))
        log_prob = logits.diagonal(dim1=1, dim2=2) - torch.logsumexp(logits, dim=-1)  # (B, T)
    return -torch.where(anchors, log_prob, 0.0).sum(), anchors.sum().float()  # no boolean-mask selection: no wait


def resolve_teacher_path(teacher: str | None) -> str:
    """A degen_train run directory (its hf/ export), an HF model directory, or a hub name."""
    if not teacher:
        raise ValueError(
            "regularizer.tacl.teacher is not set: give a degen_train run directory, an HF BERT-style "
            "model directory or a hub name (the student starts from the same weights: model.init_from)"
        )
    try:
        resolved = resolve_pretrained(teacher)
    except FileNotFoundError as error:  # said under the key the user gave (a recipe's teacher= sets it)
        raise FileNotFoundError(f"regularizer.tacl.teacher={error}") from None
    if Path(resolved).is_dir() and not (Path(resolved) / "config.json").exists():
        raise ValueError(f"regularizer.tacl.teacher={teacher} is neither a degen_train run nor an HF model directory")
    return resolved


@register_term("tacl")
class TokenContrastiveTerm(LossTerm):
    """L = −(1/N) Σ_{i masked} log( e^{cos(h̃_i, h_i)/τ} / Σ_{j} e^{cos(h̃_i, h_j)/τ} ), h̃ the student's and h the
    frozen teacher's states of the same sequence, j over its positions, τ = 0.01; Su et al. 2021 (TaCL), eq. 2.

    Source: Su et al. 2021, "TaCL: Improving BERT Pre-training with Token-aware Contrastive Learning" (Findings
    of NAACL 2022, arXiv 2111.04198); released: yxuansu/TaCL, pretraining/bert_contrastive.py.
    Needs: an encoder student started from its teacher (``model.init_from``) and masked blocks; ``teacher``, a
    run or HF model folder (an input: found by ``check_inputs``), loaded frozen at set-up.
    Example: ``degen-train recipe=tacl teacher=runs/teacher``
    """

    averages_over = ("targets",)  # the anchors: the MLM-selected positions

    def __init__(
        self,
        *,
        teacher: Annotated[str | None, INPUT] = None,  # a run folder or model it loads: an input (core/roles.py)
        temperature: Annotated[float, Gt(0)] = 0.01,
        pad_in_denominator: bool = True,
        teacher_dropout: bool = True,
        exclude_same_token: bool = False,
        teacher_sharding: Literal["shard", "replicate"] = "shard",
    ) -> None:
        super().__init__()
        self.teacher_sharding = teacher_sharding
        self.teacher_path = resolve_teacher_path(teacher)
        self.temperature = temperature
        self.pad_in_denominator = pad_in_denominator
        self.teacher_dropout = teacher_dropout
        self.exclude_same_token = exclude_same_token
        # Kept outside the module tree on purpose: no parameters in the optimizer, nothing in
        # checkpoints or DDP buckets. It is reloaded from ``teacher_path`` on resume.
        self._teacher: list[nn.Module] = []

    @classmethod
    def check_inputs(cls, options: dict[str, Any]) -> None:
        resolve_teacher_path(options.get("teacher"))  # an input: found by the read stage, loaded at setup

    @property
    def teacher(self) -> nn.Module | None:
        return self._teacher[0] if self._teacher else None

    def setup(self, context: TermContext) -> None:
        model_type = AutoConfig.from_pretrained(self.teacher_path, **no_remote_code(self.teacher_path)).model_type
        pooler = {"add_pooling_layer": False} if model_type in ("bert", "roberta") else {}  # no pooler to skip
        teacher = load_pretrained(AutoModel, self.teacher_path, "TaCL teacher", **pooler)
        config = teacher.config
        if config.hidden_size != context.hidden_size:
            raise ValueError(
                f"TaCL teacher {self.teacher_path} has hidden size {config.hidden_size}, "
                f"the student has {context.hidden_size}"
            )
        if config.vocab_size != context.vocab_size:
            raise ValueError(
                f"TaCL teacher {self.teacher_path} has vocabulary {config.vocab_size}, "
                f"the student has {context.vocab_size}: use the teacher's tokenizer"
            )
        teacher.requires_grad_(False)
        self._teacher[:] = [teacher]
        self.block_size = context.block_size
        self.pad_id = int(config.pad_token_id or 0)
        self.train(self.training)
        log.info("TaCL teacher: %s (frozen, dropout %s)", self.teacher_path, "on" if self.teacher_dropout else "off")

    def frozen_modules(self) -> list[nn.Module]:
        """Under FSDP2 the teacher is sharded like the student (teacher_sharding=shard) or kept whole on every
        process (replicate: no all-gather per step, the memory of a full copy)."""
        return [self.teacher] if self.teacher is not None and self.teacher_sharding == "shard" else []

    def auxiliary_models(self) -> list[nn.Module]:
        return [self.teacher] if self.teacher is not None else []

    def train(self, mode: bool = True) -> TokenContrastiveTerm:
        super().train(mode)
        if self.teacher is not None:  # the teacher's mode is a setting, not the trainer's stage
            self.teacher.train(mode and self.teacher_dropout)
        return self

    def forward(self, output: ForwardOutput) -> TermOutput:
        assert self.teacher is not None and output.original_ids is not None
        if next(self.teacher.parameters()).device != output.hidden_states.device:
            self.teacher.to(output.hidden_states.device)
        # The teacher's mode follows this term's at every forward: Lightning restores the modes after a validation
        # by setting each module's ``training`` flag, which never reaches a teacher outside the module tree, and a
        # teacher left in eval mode would train without its dropout from the first validation on (issue 57).
        if self.teacher.training != (self.training and self.teacher_dropout):
            self.teacher.train(self.training and self.teacher_dropout)
        teacher_input = {"input_ids": output.original_ids, "attention_mask": output.attention_mask}
        if output.token_type_ids is not None:
            teacher_input["token_type_ids"] = output.token_type_ids
        if self.pad_in_denominator:  # the released code pads every sequence to max_len: as many pad negatives
            teacher_input = self.pad_to_block(teacher_input)
        with torch.no_grad():
            teacher_hidden = self.teacher(**teacher_input).last_hidden_state  # (B, T', H), T' >= T
        if hasattr(self.teacher, "reshard"):  # FSDP2 keeps a root gathered for a backward the teacher never has
            self.teacher.reshard()
        anchors = output.labels != -100  # the MLM-selected positions
        candidates = self.candidates(output.original_ids, output.attention_mask, width=teacher_hidden.shape[1])
        total, count = tacl_loss(
            output.hidden_states, teacher_hidden, anchors, candidates, temperature=self.temperature
        )
        return TermOutput(distributed_mean(total, count, over="targets"), {"anchors": count})

    def pad_to_block(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Right-pad every entry to ``block_size`` columns (pad id, attention 0, segment 0)."""
        extra = max(0, self.block_size - batch["input_ids"].shape[1])
        fill = {"input_ids": self.pad_id, "attention_mask": 0, "token_type_ids": 0}
        return {k: F.pad(v, (0, extra), value=fill[k]) for k, v in batch.items()}

    def candidates(self, ids: Tensor, attention_mask: Tensor, width: int | None = None) -> Tensor:
        """(B, T, W) bool: which teacher positions j (W >= T columns) enter position i's denominator."""
        batch, size = ids.shape
        width = width or size
        allowed = torch.ones(batch, size, width, dtype=torch.bool, device=ids.device)
        if not self.pad_in_denominator:
            allowed[:, :, :size] &= attention_mask.bool()[:, None, :]
            allowed[:, :, size:] = False
        if self.exclude_same_token:
            allowed[:, :, :size] &= ids[:, :, None] != ids[:, None, :]
        eye = torch.eye(size, width, dtype=torch.bool, device=ids.device)
        return allowed | eye
