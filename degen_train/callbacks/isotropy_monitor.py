"""Measure degeneration while training: embedding-matrix and per-layer isotropy, and the hidden states' outliers
(kurtosis, ∞-norm, massive activations), every N steps."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from degen_train.callbacks.throughput import Throughput
from degen_train.core.rng import RandomStreams
from degen_train.devices.sharding import gathered
from degen_train.metrics.isotropy import (
    VectorMoments,
    isoscore,
    mean_pairwise_cosine,
    outlier_dimensions,
    tacl_self_similarity,
)
from degen_train.metrics.outlier_sites import block_outputs
from degen_train.metrics.outliers import layer_outliers


def embedding_metrics(weights: torch.Tensor) -> dict[str, float]:
    moments = VectorMoments.of(weights.detach().float())
    return {
        "mean_cosine": mean_pairwise_cosine(moments),
        "isoscore": isoscore(moments),
        "outlier_dims": float(len(outlier_dimensions(moments)["dims"])),
    }


def probe_states(backbone: Any, probe: dict[str, torch.Tensor]) -> tuple[tuple[torch.Tensor, ...], list]:
    """The probe's hidden states (embeddings, then each layer) and its blocks' own outputs, in eval mode, eagerly.

    Eagerly because under model.compile the compiled blocks would otherwise trace the probe's per-block hooks and
    eval mode: a recompilation per block (the recompile limit, 8, hit on BERT-base), ~3 s per probe on an H200,
    counted into the training rate; the training graphs are untouched either way.
    """
    was_training = backbone.training
    backbone.eval()
    try:  # the training streams kept: a probe's cadence never changes a run's weights
        with torch.compiler.set_stance("force_eager"), block_outputs(backbone.model) as blocks, RandomStreams().kept():
            layers = backbone.encode(probe, all_layers=True).hidden_states
    finally:
        backbone.train(was_training)
    return layers, blocks


class IsotropyMonitor(Callback):
    """Every ``every_n_steps`` optimizer steps (and at the end): isotropy of the input embeddings and of the
    contextual vectors of a fixed validation probe batch, per layer, logged as ``isotropy/...``; the same vectors'
    kurtosis and ∞-norm per layer (mean over the probe's sequences, Bondarenko et al. 2023) and massive activations
    (Sun et al. 2024), logged as ``outliers/...``. The attention-sink rate needs attention maps (the eager path):
    ``degen-analyze`` measures it on the export."""

    def __init__(self, every_n_steps: int = 100, probe_size: int = 32, at_end: bool = True) -> None:
        """``at_end``: measure once more after the last step (summary.json's ``isotropy`` is then the final
        model's; false: the last periodic measurement's, or none)."""
        if every_n_steps < 1 or probe_size < 1:
            raise ValueError(
                f"isotropy monitor: every_n_steps and probe_size must be >= 1, got {every_n_steps} and {probe_size}"
            )
        self.every_n_steps, self.probe_size, self.at_end = every_n_steps, probe_size, at_end
        self.probe: dict[str, torch.Tensor] | None = None
        self.latest: dict[str, float] = {}
        self._last_step = -1

    def on_fit_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        if datamodule is None or not hasattr(datamodule, "data"):
            return
        examples = datamodule.data.validation
        rows = [dict(examples[i], sample_seed=i) for i in range(min(self.probe_size, len(examples)))]
        batch = datamodule.collator(rows)
        self.probe = {"input_ids": batch["original_ids"], "attention_mask": batch["attention_mask"]}
        if "token_type_ids" in batch:
            self.probe["token_type_ids"] = batch["token_type_ids"]

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        stepped = (batch_idx + 1) % trainer.accumulate_grad_batches == 0  # this micro-batch ended an update
        if step % self.every_n_steps == 0 and step != self._last_step and stepped:
            self.measure(trainer, module)

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self.at_end and trainer.global_step != self._last_step:
            self.measure(trainer, module)

    def state_dict(self) -> dict[str, Any]:  # a run resumed at its last step still reports its geometry
        return {"latest": self.latest, "last_step": self._last_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.latest = dict(state_dict.get("latest", {}))
        self._last_step = int(state_dict.get("last_step", -1))

    @torch.no_grad()
    def measure(self, trainer: pl.Trainer, module: pl.LightningModule) -> dict[str, float]:
        start = time.perf_counter()
        with gathered(module):  # FSDP2: the embedding rows whole, on every process
            metrics = self._measure(trainer, module)
        # Measuring is not training: the tokens/s and MFU leave the probe out (0.6 s per probe for BERT-base on an
        # H200, against ~50 ms a step), as they leave validation out.
        for callback in trainer.callbacks:
            if isinstance(callback, Throughput):
                callback.exclude(time.perf_counter() - start)
        return metrics

    def _measure(self, trainer: pl.Trainer, module: pl.LightningModule) -> dict[str, float]:
        self._last_step = trainer.global_step
        backbone = module.backbone
        metrics = {
            f"isotropy/embedding/{k}": v
            # the tokenizer's rows: a padded vocabulary's extra rows are no token (models/vocabulary.py)
            for k, v in embedding_metrics(backbone.model.get_input_embeddings().weight[: backbone.vocabulary]).items()
        }
        if self.probe is not None:
            probe = {k: v.to(module.device) for k, v in self.probe.items()}
            layers, blocks = probe_states(backbone, probe)
            mask = probe["attention_mask"].bool()
            # Outliers of the blocks' own outputs (a decoder's last before its final norm, as Bondarenko et al. read
            # OPT's layers); isotropy of the hidden states the model hands on (Ethayarajh's per-layer vectors).
            read = [layers[0], *blocks] if all(b is not None for b in blocks) else list(layers)
            outliers: dict[str, list[float]] = {"kurtosis": [], "inf_norm": [], "massive_activations": []}
            for index, (hidden, block) in enumerate(zip(layers, read, strict=True)):
                sequences = [h[m].float() for h, m in zip(hidden, mask, strict=True)]  # on the device: no copies
                metrics[f"isotropy/layer_{index}/mean_cosine"] = mean_pairwise_cosine(torch.cat(sequences))
                metrics[f"isotropy/layer_{index}/tacl_self_similarity"] = tacl_self_similarity(sequences)[
                    "tacl_self_similarity"
                ]
                measured = layer_outliers([h[m].float()[None] for h, m in zip(block, mask, strict=True)])
                for name in outliers:
                    metrics[f"outliers/layer_{index}/{name}"] = float(measured[name])
                    outliers[name].append(float(measured[name]))
            blocks = slice(1, None) if len(layers) > 1 else slice(None)  # the transformer layers, as Bondarenko
            metrics["outliers/max_kurtosis"] = max(outliers["kurtosis"][blocks])
            metrics["outliers/max_inf_norm"] = max(outliers["inf_norm"][blocks])
            metrics["outliers/massive_activations"] = sum(outliers["massive_activations"])
        self.latest = metrics
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
        return metrics
