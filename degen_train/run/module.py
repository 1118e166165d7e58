"""One LightningModule for every objective: backbone -> ForwardOutput -> WeightedSum -> log.

The step is here; what is not the step lives beside it: the logged rows (run/step_log.py), the accumulation
window (terms/accumulation.py's WindowTracker), clipping (optim/clipping.py), the schedule's rate on resume
(optim.rate_of_this_schedule) and the seeds (core/rng.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

from degen_train.core.rng import DROPOUT_SALT, VALIDATION_DROPOUT_SALT, RandomStreams, mix_seed
from degen_train.data.validation_items import BATCH_ID_KEY, ValidationItems
from degen_train.losses.accumulation import WindowTracker, averaging_over
from degen_train.losses.contract import WeightedSum
from degen_train.models.backbone import Backbone
from degen_train.optim.clipping import clip_gradients
from degen_train.optim.optimizer import keep_kernel
from degen_train.optim.schedule import rate_of_this_schedule
from degen_train.run.loggers import ResumingLogger
from degen_train.run.parallel import parallelize
from degen_train.run.step_log import StepLog

log = logging.getLogger("degen_train")


class PretrainModule(pl.LightningModule):
    def __init__(
        self,
        backbone: Backbone,
        loss: WeightedSum,
        *,
        optimizer_factory: Callable[..., torch.optim.Optimizer],
        scheduler_factory: Callable[..., Any],
        seed: int,
        checkpoint_identity: dict[str, Any],
        compile_model: bool = False,
        activation_checkpointing: str | int = "none",
    ) -> None:
        super().__init__()
        self.backbone, self.loss = backbone, loss
        frozen = loss.freeze_unweighted(backbone)
        if frozen:
            log.info("weight-0 terms: %d parameter tensors frozen (%s)", len(frozen), ", ".join(frozen[:4]))
        self.optimizer_factory, self.scheduler_factory = optimizer_factory, scheduler_factory
        self.seed = seed
        self.checkpoint_identity = checkpoint_identity
        self.step_log = StepLog()  # the last train row (kept in checkpoints), the losses since the last update
        self.step_grad_norm: Tensor | None = None  # set by the divergence guard, used by clipping
        self.provenance: dict[str, Any] = {}  # degen_train.run.provenance.run_provenance, kept in every checkpoint
        self.windows = WindowTracker()  # the accumulation window being trained (accumulate_grad_batches > 1)
        self.source_labels: list[str] = []  # a mixture's sources (data.sources), as the batches' ``source`` numbers
        self.compile_model = compile_model  # model.compile: blocks compiled in configure_model (parallelize)
        self.activation_checkpointing = activation_checkpointing  # model.activation_checkpointing, applied there too
        self.states_sampled_at: int | None = None  # the last update before which a term sampled states (Throughput)
        self.validated_at: int | None = None  # the update a periodic validation of this segment last scored
        self.training_streams = RandomStreams()  # kept across a validation: its draws are not training's (issue 57)
        # the last validation's per-batch loss of the perplexity's term: val_perplexity's bootstrap (issue 71.5)
        self.validation_items = ValidationItems()

    def forward(self, batch: dict[str, Tensor], *, states_for: Any = None) -> Any:
        """The whole step, (loss, logged): under FSDP2 this is the root's forward, so every parameter a term
        reads (embeddings, heads) is gathered while the terms run. ``states_for=TERM``: the backbone's
        ForwardOutput alone, with what that term requires (a term's sampling pass, see ``_sample_states``)."""
        if "source" in batch:  # a mixture's row sources (a term's sampling pass): for logging only
            batch = {k: v for k, v in batch.items() if k != "source"}
        if states_for is not None:
            return self.backbone(batch, requires=states_for.requires)
        batch = self.loss.prepare_batch(batch)
        return self.loss(self.backbone(batch, requires=self.loss.requires))

    def on_fit_start(self) -> None:
        """Each process says where it stands, as its launcher placed it (degen-cluster check reads these lines)."""
        trainer = self.trainer
        log.info("process %d of %d (node %d, local %d): %s, trainer.num_nodes=%d trainer.devices=%d, run folder %s",
                 trainer.global_rank, trainer.world_size, trainer.node_rank, trainer.local_rank,
                 type(trainer.strategy).__name__, trainer.num_nodes, trainer.num_devices,
                 trainer.default_root_dir)  # fmt: skip

    def configure_model(self) -> None:
        """Compile and FSDP2, in the order run.parallel.parallelize gives; nothing else changes the model."""
        options = getattr(self.trainer.strategy, "fsdp_options", None)
        frozen = [(term.name, module) for term in self.loss.terms.values() for module in term.frozen_modules()]
        auxiliary = [module for term in self.loss.terms.values() for module in term.auxiliary_models()]
        parallelize(self, self.backbone.model, frozen, compile_model=self.compile_model, fsdp_options=options,
                    activation_checkpointing=self.activation_checkpointing, auxiliary=auxiliary,
                    mesh=self.device_mesh["data_parallel"] if options is not None else None,
                    device=self.device)  # fmt: skip

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        self._seed_step_randomness(batch_idx)
        sources = batch.pop("source", None)
        accumulate = self.trainer.accumulate_grad_batches
        window = self.windows.window_for(batch, batch_idx, accumulate=accumulate, world_size=self.trainer.world_size,
                                         device=self.device)  # fmt: skip
        with averaging_over(window):
            total, logged = self(batch)
        if sources is not None:  # a mixture: each source's share of the batch (of the global batch, once reduced)
            logged |= {f"mixture/{label}": (sources == k).float().mean() for k, label in enumerate(self.source_labels)}
        self.windows.close(window, accumulate)
        self._log("train", logged, batch, window_index=None if window is None else window.index)
        return total

    def on_train_batch_start(self, batch: dict[str, Any], batch_idx: int) -> None:
        datamodule = self.trainer.datamodule
        if datamodule is None or batch_idx % self.trainer.accumulate_grad_batches:  # once per update, at its start
            return
        per_epoch = datamodule.updates_per_epoch()
        for term in self.loss.terms.values():
            wanted = term.states_wanted(self.global_step, per_epoch)
            if wanted:
                self._sample_states(term, wanted)

    def _sample_states(self, term: Any, wanted: int) -> None:
        """Run ``term.refresh`` over eval-mode, no-gradient passes of this process's upcoming training batches.

        Every module's mode is restored afterwards (a frozen teacher keeps its own); under FSDP2 the passes go
        through the root, so its parameters are gathered, and it is resharded after."""
        modes = {module: module.training for module in self.modules()}
        self.eval()
        try:
            with torch.no_grad(), RandomStreams().kept():
                loader = self.trainer.datamodule.upcoming_batches()
                outputs = (self(self.transfer_batch_to_device(b, self.device, 0), states_for=term) for b in loader)
                term.refresh(outputs, wanted)
            self.states_sampled_at = self.global_step
        finally:
            for module, training in modes.items():
                module.training = training
            if hasattr(self, "reshard"):
                self.reshard()
        log.info("%s: refreshed from a sample of the upcoming training batches at step %d", term.name, self.global_step)

    def on_validation_start(self) -> None:
        # Validation seeds the global generators per batch (below): whatever it draws, training's streams come back
        # as they were, so a run's weights are the same whatever its validation cadence (on every process).
        self.training_streams.take()
        self.validation_items.start()

    def on_validation_end(self) -> None:
        self.training_streams.restore()
        if self.trainer.training or self.trainer.state.fn == "fit" and not self.trainer.sanity_checking:
            self.validated_at = self.global_step  # a periodic validation: the final one may repeat it (pretrain.fit)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.validate_batch(batch, batch_idx, "val")

    def validate_batch(self, batch: dict[str, Tensor], batch_idx: int, stage: str) -> None:
        """Score one validation batch and log it under ``stage`` (val; val_average for a weight average scored
        beside the model on the same batch, callbacks/weight_averaging.py)."""
        # Seeded: a view that keeps its dropout in validation (SimCSE's) draws the same masks in every run.
        torch.manual_seed(mix_seed(self.seed, VALIDATION_DROPOUT_SALT, batch_idx, self.global_rank))
        sources, text_hash = batch.pop("source", None), batch.pop(BATCH_ID_KEY, None)
        _, logged = self(batch)
        self._log(stage, logged, batch)
        if stage == "val":
            examples = batch["input_ids"].shape[0]
            self.validation_items.add(text_hash, self.global_rank, logged.get(self.loss.perplexity_source), examples)
        if sources is not None:  # a mixture's batch holds one source: its own validation curves beside the whole's
            self._log(f"{stage}/{self.source_labels[int(sources[0])]}", logged, batch)
            batch["source"] = sources  # kept for a second scoring of the same batch
        if text_hash is not None:
            batch[BATCH_ID_KEY] = text_hash

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.optimizer_factory([self.backbone, self.loss])
        scheduler = self.scheduler_factory(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        norm, self.step_grad_norm = self.step_grad_norm, None
        clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm, norm)

    def on_train_start(self) -> None:
        # Every module that trains must be in train mode (dropout on): a module loaded by from_pretrained
        # is in eval mode, and training it so would silently differ from its paper's setting.
        idle = [n for n, m in self.named_modules() if not m.training and any(p.requires_grad for p in m.parameters())]
        if idle:
            raise RuntimeError(f"modules with trainable parameters start training in eval mode: {', '.join(idle[:5])}")
        for logger in self.loggers:
            if isinstance(logger, ResumingLogger):
                logger.prepare_resume(self.global_step, last_train_row=self.last_train_metrics)
        for optimizer in self.trainer.optimizers:  # a resumed optimizer state brought its groups' kernel along
            keep_kernel(getattr(optimizer, "optimizer", optimizer))
        for config in self.trainer.lr_scheduler_configs:
            rate_of_this_schedule(config.scheduler)

    @property
    def last_train_metrics(self) -> dict[str, Any]:
        """The last logged train row (kept in checkpoints: the summary of a run resumed at its last step)."""
        return self.step_log.last_train_metrics

    def take_step_losses(self) -> tuple[list[str], Tensor]:
        """The losses of the micro-batches since the last update, (M, L): the divergence guard's."""
        return self.step_log.take_step_losses()

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.step_log.step_losses = []  # runs after the callbacks': without a divergence guard nothing piles up

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The step's whole train row (the guard's and the throughput's values too): Lightning hands it to the
        # loggers only after the checkpoint is written, so a kill right after would lose it without this copy.
        logged = {k: v for k, v in self.trainer.callback_metrics.items() if k.startswith("train/")}
        checkpoint["degen_train"] = {
            **self.checkpoint_identity,
            "provenance": self.provenance,
            "train_metrics": {k: float(v) for k, v in {**self.last_train_metrics, **logged}.items()},
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A run resumed at its last step trains no more: its summary still reports the last train loss.
        self.step_log.last_train_metrics = dict(checkpoint.get("degen_train", {}).get("train_metrics", {}))

    def _seed_step_randomness(self, batch_idx: int) -> None:
        """Dropout (the global RNG) is a function of (seed, step, micro-batch, rank): exact on resume."""
        micro = batch_idx % self.trainer.accumulate_grad_batches
        torch.manual_seed(mix_seed(self.seed, DROPOUT_SALT, self.global_step, micro, self.global_rank))

    def _log(self, stage: str, logged: dict[str, Tensor], batch: dict[str, Tensor], *,
             window_index: int | None = None) -> None:  # fmt: skip
        metrics = self.step_log.metrics(self, stage, logged, window_index)
        self.log_dict(
            metrics,
            on_step=stage == "train",
            on_epoch=stage != "train",
            sync_dist=stage != "train",
            batch_size=batch["input_ids"].shape[0],
        )
        if stage == "train":
            self.log("loss", metrics["train/loss"], prog_bar=True, logger=False, batch_size=1)

