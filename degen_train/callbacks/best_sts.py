"""Keep the weights that score best on an STS file while training: SimCSE's released model selection."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from scipy.stats import spearmanr

from degen_train.callbacks.sections import BEST_BY_STS_FSDP2_REFUSAL
from degen_train.core.rng import RandomStreams
from degen_train.metrics.encode import Encoder, sentence_vectors
from degen_train.metrics.probes import SentencePairs, read_sts

log = logging.getLogger("degen_train")


def sts_spearman(pairs: SentencePairs, vectors: torch.Tensor) -> float:
    """Spearman ρ × 100 between the gold scores and cos(u, v) of each pair's vectors (first half u, second v)."""
    count = len(pairs.first)
    cosine = torch.nn.functional.cosine_similarity(vectors[:count].double(), vectors[count:].double(), dim=-1)
    return float(spearmanr(cosine.numpy(), pairs.scores).statistic * 100)


class BestBySTS(Callback):
    """Every ``every_n_steps`` updates, score the model on ``sts`` (Spearman × 100 of the cosines of ``pooling``
    vectors) and keep the best weights; at the end of training put them back, so the final validation, the
    export and the probes see the selected model. Gao, Yao, Chen 2021 (SimCSE) evaluate STS-B dev every 125
    steps with [CLS] vectors (no MLP) and keep the best checkpoint (run_unsup_example.sh: --eval_steps 125,
    --metric_for_best_model stsb_spearman, --load_best_model_at_end). ``sts: null``: off.
    """

    def __init__(self, *, sts: str | None = None, every_n_steps: int = 125, pooling: str = "cls") -> None:
        # every_n_steps and pooling: checked by its section (callbacks/sections.py: BestBySTSCallbackConfig)
        self.pairs = read_sts(sts) if sts else None  # read now: a bad file fails before training
        self.sts, self.every_n_steps, self.pooling = sts, every_n_steps, pooling
        self.best_score: float | None = None
        self.best_step: int | None = None
        self.best_weights: dict[str, torch.Tensor] | None = None
        self._scored_step = -1
        self._tokenizer: Any = None

    def setup(self, trainer: pl.Trainer, module: pl.LightningModule, stage: str) -> None:
        if self.pairs is None:
            return
        if getattr(trainer.strategy, "fsdp_options", None) is not None:
            raise ValueError(BEST_BY_STS_FSDP2_REFUSAL)
        self._tokenizer = trainer.datamodule.data.tokenizer

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, *args: Any) -> None:
        step = trainer.global_step
        if self.pairs is None or step == 0 or step % self.every_n_steps or step == self._scored_step:
            return
        self._scored_step = step
        model = module.backbone.model
        modes = {m: m.training for m in model.modules()}
        model.eval()
        try:
            limit = min(int(getattr(model.config, "max_position_embeddings", 512)), 512)
            encoder = Encoder(model, self._tokenizer, Path(str(self.sts)), max_length=limit, batch_size=64)
            with RandomStreams().kept():  # the probe's cadence never changes a run's weights
                vectors = sentence_vectors(encoder, self.pairs.first + self.pairs.second, pooling=self.pooling)
        finally:
            for m, training in modes.items():
                m.training = training
        score = sts_spearman(self.pairs, vectors.cpu())
        module.log("train/sts_spearman", score, on_step=True, batch_size=1)
        if self.best_score is None or score > self.best_score:
            self.best_score, self.best_step = score, step
            self.best_weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self.best_weights is None:
            return
        module.backbone.model.load_state_dict(self.best_weights)
        self.changed_weights = True  # the final validation scores the weights put back (run/pretrain.fit)
        log.info(
            "best_by_sts: the weights of step %d (STS Spearman %.2f on %s) replace the last step's for validation, "
            "export and probes",
            self.best_step,
            self.best_score,
            self.sts,
        )

    def summary(self) -> dict[str, Any] | None:
        if self.pairs is None:
            return None
        return {"sts": self.sts, "pooling": self.pooling, "step": self.best_step, "spearman": self.best_score}

    def state_dict(self) -> dict[str, Any]:  # a resumed run selects among every step it scored
        return {"best_score": self.best_score, "best_step": self.best_step, "best_weights": self.best_weights}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best_score, self.best_step = state_dict.get("best_score"), state_dict.get("best_step")
        self.best_weights = state_dict.get("best_weights")
