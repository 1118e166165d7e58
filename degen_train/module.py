"""One LightningModule for every objective: backbone -> ForwardOutput -> WeightedSum -> log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

from degen_train.accumulation import Window, averaging_over, reduce_counts, verify_counts
from degen_train.loggers import ResumingLogger
from degen_train.models.backbone import Backbone
from degen_train.optim import keep_kernel
from degen_train.parallel import parallelize
from degen_train.rng import DROPOUT_SALT, VALIDATION_DROPOUT_SALT, mix_seed
from degen_train.terms import WeightedSum

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
    ) -> None:
        super().__init__()
        self.backbone, self.loss = backbone, loss
        frozen = loss.freeze_unweighted(backbone)
        if frozen:
            log.info("weight-0 terms: %d parameter tensors frozen (%s)", len(frozen), ", ".join(frozen[:4]))
        self.optimizer_factory, self.scheduler_factory = optimizer_factory, scheduler_factory
        self.seed = seed
        self.checkpoint_identity = checkpoint_identity
        self._step_losses: list[Tensor] = []  # loss columns of each micro-batch since the last update
        self._loss_names: list[str] = []
        self.last_train_metrics: dict[str, Any] = {}  # the last logged train values, kept in checkpoints
        self.step_grad_norm: Tensor | None = None  # set by the divergence guard, used by clipping
        self.provenance: dict[str, Any] = {}  # degen_train.provenance.run_provenance, kept in every checkpoint
        self._window: Window | None = None  # the accumulation window being trained (accumulate_grad_batches > 1)
        self._window_logged: Tensor | None = None  # Σ of its micro-batches' logged values so far
        self.source_labels: list[str] = []  # a mixture's sources (data.sources), as the batches' ``source`` numbers
        self.compile_model = compile_model  # model.compile: blocks compiled in configure_model (parallelize)
        self._counts_verified = False  # the terms' count() checked against their forward on the first window
        self.states_sampled_at: int | None = None  # the last update before which a term sampled states (Throughput)

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

    def configure_model(self) -> None:
        """Compile and FSDP2, in the order degen_train.parallel.parallelize gives; nothing else changes the model."""
        options = getattr(self.trainer.strategy, "fsdp_options", None)
        frozen = [(term.name, module) for term in self.loss.terms.values() for module in term.frozen_modules()]
        parallelize(self, self.backbone.model, frozen, compile_model=self.compile_model, fsdp_options=options,
                    mesh=self.device_mesh["data_parallel"] if options is not None else None,
                    device=self.device)  # fmt: skip

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Count the batch's tokens and predicted tokens while it is on the host (the throughput's counts): read
        from the device after the step, they would make the host wait for it."""
        if isinstance(batch, dict) and "attention_mask" in batch and "labels" in batch:
            index = batch.get("labelled_index")
            predicted = index.numel() if index is not None else int((batch["labels"] != -100).sum())
            batch["host_counts"] = (int(batch["attention_mask"].sum()), predicted)
        return batch

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        self._seed_step_randomness(batch_idx)
        sources = batch.pop("source", None)
        window = self._accumulation_window(batch, batch_idx)
        with averaging_over(window):
            total, logged = self(batch)
        if sources is not None:  # a mixture: each source's share of the batch (of the global batch, once reduced)
            logged |= {f"mixture/{label}": (sources == k).float().mean() for k, label in enumerate(self.source_labels)}
        closes_window = window is not None and window.index == self.trainer.accumulate_grad_batches - 1
        if closes_window and window.checks is not None:
            verify_counts(window.checks)  # once per (re)start: one host sync
            window.checks, self._counts_verified = None, True
        self._log("train", logged, batch)
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
            with torch.no_grad():
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

    def _accumulation_window(self, batch: dict[str, Any], batch_idx: int) -> Window | None:
        """The window this micro-batch belongs to, its counts summed over the processes once, at its first."""
        counts, micro = batch.pop("window_counts", None), batch.pop("micro_counts", None)
        if counts is None:  # no accumulation: each term's mean is over this batch (and the processes)
            return None
        accumulate = self.trainer.accumulate_grad_batches
        index = batch_idx % accumulate
        if index == 0 or self._window is None:
            self._window = Window(
                counts=reduce_counts(counts, self.device),
                micro=micro,
                scale=float(self.trainer.world_size * accumulate),
                checks=None if self._counts_verified else [],
            )
        self._window.index, self._window.micro = index, micro
        return self._window

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.validate_batch(batch, batch_idx, "val")

    def validate_batch(self, batch: dict[str, Tensor], batch_idx: int, stage: str) -> None:
        """Score one validation batch and log it under ``stage`` (val; val_average for a weight average scored
        beside the model on the same batch, callbacks/weight_averaging.py)."""
        # Seeded: a view that keeps its dropout in validation (SimCSE's) draws the same masks in every run.
        torch.manual_seed(mix_seed(self.seed, VALIDATION_DROPOUT_SALT, batch_idx, self.global_rank))
        sources = batch.pop("source", None)
        _, logged = self(batch)
        self._log(stage, logged, batch)
        if sources is not None:  # a mixture's batch holds one source: its own validation curves beside the whole's
            self._log(f"{stage}/{self.source_labels[int(sources[0])]}", logged, batch)
            batch["source"] = sources  # kept for a second scoring of the same batch

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
        if not gradient_clip_val:
            return
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        no_scaler = getattr(self.trainer.precision_plugin, "scaler", None) is None
        if gradient_clip_algorithm != "value" and norm is not None and no_scaler:
            # The divergence guard already took this step's norm: clip with it instead of a second pass. The
            # factor stays on the device (no host wait), except for FSDP2's DTensor gradients, which a plain-tensor
            # factor cannot scale: a Python number there.
            factor = (gradient_clip_val / (norm.float() + 1e-6)).clamp(max=1.0)
            grads = [p.grad for p in params]
            if grads and hasattr(grads[0], "full_tensor"):
                factor = float(factor)
            if grads:  # a skipped step has no gradients left to clip
                torch._foreach_mul_(grads, factor)
            return
        fused = any(group.get("fused") for group in optimizer.param_groups)
        if fused and no_scaler:
            # Lightning refuses to clip for a fused optimizer because of fp16 loss scaling; with no
            # scaler (fp32, bf16) the gradients are already unscaled and clipping them is exact.
            if gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
            else:
                torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

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

    def take_step_losses(self) -> tuple[list[str], Tensor]:
        """The losses ("loss" first, then each term's) of the micro-batches since the last update: (M, L)."""
        values, self._step_losses = torch.stack(self._step_losses), []
        return self._loss_names, values

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self._step_losses = []  # runs after the callbacks': without a divergence guard nothing piles up

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
        self.last_train_metrics = dict(checkpoint.get("degen_train", {}).get("train_metrics", {}))

    def _seed_step_randomness(self, batch_idx: int) -> None:
        """Dropout (the global RNG) is a function of (seed, step, micro-batch, rank): exact on resume."""
        micro = batch_idx % self.trainer.accumulate_grad_batches
        torch.manual_seed(mix_seed(self.seed, DROPOUT_SALT, self.global_step, micro, self.global_rank))

    def _log(self, stage: str, logged: dict[str, Tensor], batch: dict[str, Tensor]) -> None:
        names, values = list(logged), stack_logged(logged)
        if stage == "train" and self.trainer.world_size > 1:
            # One collective for all metrics: train curves show the global batch, not rank 0's share.
            values = self.trainer.strategy.reduce(values, reduce_op="mean")
        metrics = {f"{stage}/{name}": value for name, value in zip(names, values, strict=True)}
        if stage == "train":
            losses = [i for i, name in enumerate(names) if name == "loss" or name.endswith("/loss")]
            losses.sort(key=lambda i: names[i] != "loss")  # the total first
            self._loss_names = [names[i] for i in losses]
            self._step_losses.append(values[losses])
            if self._window is not None:  # log the window's mean so far: at its last micro-batch, the update's
                index = self._window.index
                self._window_logged = values if index == 0 else self._window_logged + values
                values = self._window_logged / (index + 1)
                metrics = {f"{stage}/{name}": value for name, value in zip(names, values, strict=True)}
            self.last_train_metrics = metrics
        self.log_dict(
            metrics,
            on_step=stage == "train",
            on_epoch=stage != "train",
            sync_dist=stage != "train",
            batch_size=batch["input_ids"].shape[0],
        )
        if stage == "train":
            self.log("loss", metrics["train/loss"], prog_bar=True, logger=False, batch_size=1)


def stack_logged(logged: dict[str, Tensor]) -> Tensor:
    """The step's logged values as one float32 vector (one collective, one transfer): every value must be on the
    loss's device, so a term makes its metrics from its inputs (tests/test_step_check.py)."""
    return torch.stack([value.float() for value in logged.values()])


def rate_of_this_schedule(scheduler: Any) -> None:
    """Set the learning rate the first update uses from this run's schedule at the restored step. A restored
    optimizer keeps the rate its checkpoint's last scheduler step set: a branch with a longer schedule would take
    its first update at the parent's final rate (0 after a full decay). A plain resume gets the same value back."""
    if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        return
    rates = [base * rule(scheduler.last_epoch) for base, rule in zip(scheduler.base_lrs, scheduler.lr_lambdas,
                                                                     strict=True)]  # fmt: skip
    for group, rate in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    scheduler._last_lr = rates
