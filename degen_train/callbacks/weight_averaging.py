"""``callbacks.weight_averaging.kind=ema|swa``: an average of the model's weights kept beside training and validated
beside the trained model, as Hägele et al. 2024 ("Scaling Laws and Compute-Optimal Training Beyond Fixed Training
Durations") run theirs (epfml/schedules-and-scaling, src/optim/weight_averaging.py and base.py).

A sample is the model after update u, taken when (u − 1 − start_step) is a multiple of every_n_steps (the released
averagers count from 0 after the first update, so the first sample is update 1, then 1 + n, 1 + 2n, ...).

- EMA: the first sample copies, then θ̄ ← θ̄ + (1 − β)(θ − θ̄) (torch.lerp); released defaults β = 0.95, every 10.
- SWA: the uniform mean of the samples in a window of ``window`` updates, restarted each window (θ̄ ← θ̄ + (θ − θ̄)/k
  for the k-th sample of the window); what is validated is the last *completed* window's mean (released defaults:
  window 500, every 5). ``window: 0``: one running mean from start_step on (Izmailov et al. 2018's SWA; this
  project's earlier default).

The average accumulates in float32 (``dtype: float32``, released; ``model``: the model's own dtype, which under
bf16-true drifts from the float average). ``validate: both`` (released): every validation scores the trained model
(val/...) and the average beside it (val_average/...), both in summary.json and the report; ``averaged``: the
average alone, under val/...; ``current``: the trained model alone. ``export``: the model written to RUN/hf/ and
probed: ``current`` (the trained weights, as the released runs keep them) or ``averaged``.

Written here rather than with Lightning's ``WeightAveraging`` callback, which deep-copies the whole LightningModule
(a TaCL teacher, an ELECTRA generator's frozen parts), overwrites every buffer (state a term keeps, such as CosReg's
seen rows) and puts the average into the checkpoint's ``state_dict``, which resumes, ``degen-convert`` and
branching read as the trained weights. Here the average covers the exported model's parameters only, travels in the
checkpoint's callback state (a resume continues it exactly), and ``state_dict`` stays the weights training left.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from degen_train.callbacks.sections import AVERAGING_FSDP2_REFUSAL, AVERAGING_RELEASED

log = logging.getLogger("degen_train")

DTYPES = {"float32": torch.float32, "model": None}
AVERAGE_PREFIX = "val_average"


class WeightAverage(Callback):
    """An EMA or SWA of ``module.backbone.model``'s parameters, validated beside the trained model; ``kind: null``:
    off. ``decay``, ``every_n_steps``, ``window``: null takes the released value of the kind (``window: 0``: one
    running mean, no window)."""

    def __init__(
        self,
        *,
        kind: str | None = None,
        decay: float | None = None,
        start_step: int = 0,
        every_n_steps: int | None = None,
        window: int | None = None,
        dtype: str = "float32",
        validate: str = "both",
        export: str = "current",
    ) -> None:
        # checked by its section (callbacks/sections.py: WeightAveragingCallbackConfig); null takes the released
        released = AVERAGING_RELEASED.get(kind or "", {})
        decay = released.get("decay") if decay is None else decay
        every_n_steps = released.get("every_n_steps", 1) if every_n_steps is None else every_n_steps
        window = released.get("window") if window is None and kind == "swa" else window or None  # 0: no window
        self.kind, self.decay, self.start_step, self.every_n_steps = kind, decay, start_step, every_n_steps
        self.window = window if kind == "swa" else None
        self.dtype, self.validate, self.export = dtype, validate, export
        self.names: list[str] = []
        self.running: list[Tensor] | None = None  # EMA, or the mean of the SWA window being filled
        self.completed: list[Tensor] | None = None  # SWA with a window: the last completed window's mean
        self.samples = 0  # samples taken in all
        self.in_window = 0  # samples in the running mean (an SWA window restarts it; EMA: all samples)
        self._updated_at: int | None = None  # the update the average last took in
        self._pending: dict[str, Any] | None = None  # a checkpoint's state, loaded before setup saw the model
        self._swapped: list[Tensor] | None = None
        self._device = torch.device("cpu")

    def setup(self, trainer: pl.Trainer, module: pl.LightningModule, stage: str) -> None:
        if self.kind is None or stage != "fit" or self.names:
            return
        if getattr(trainer.strategy, "fsdp_options", None) is not None:
            raise ValueError(AVERAGING_FSDP2_REFUSAL)
        self.names = [name for name, _ in module.backbone.model.named_parameters()]
        self._device = next(module.backbone.model.parameters()).device
        if self._pending is not None:
            self._restore(self._pending)
            self._pending = None

    # -- sampling -------------------------------------------------------------------------------------------------
    def _due(self, update: int) -> bool:
        count = update - 1 - self.start_step  # the released averagers' count: 0 after the first update they see
        return count >= 0 and count % self.every_n_steps == 0

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, *args: Any) -> None:
        # global_step counts updates: called once per micro-batch, the average moves once per update.
        update = trainer.global_step
        if self.kind is None or update == 0 or update == self._updated_at:
            return
        self._updated_at = update
        if self._due(update):
            self._take(list(module.backbone.model.parameters()))
        # A window ends on whichever update closes it, sampled or not (the released averager counts every update).
        if self.window is not None and self.running is not None and update > self.start_step and (
                update - self.start_step) % self.window == 0:  # fmt: skip
            self.completed = [r.clone() for r in self.running]
            self.in_window = 0

    @torch.no_grad()
    def _take(self, params: list[Tensor]) -> None:
        dtype = DTYPES[self.dtype]
        current = [p.detach().to(dtype) if dtype is not None else p.detach() for p in params]
        if self.running is None or self.in_window == 0:
            self.running = [c.clone() for c in current]  # the first sample (of the run, or of a window) copies
        elif self.kind == "ema":
            torch._foreach_lerp_(self.running, current, 1 - self.decay)
        else:  # the k-th sample of the mean weighs 1/k
            torch._foreach_lerp_(self.running, current, 1 / (self.in_window + 1))
        self.samples += 1
        self.in_window += 1

    @property
    def validated(self) -> list[Tensor] | None:
        """The average that is validated and exported: the EMA, the running SWA, or the last completed window."""
        return self.completed if self.window is not None else self.running

    # -- validation beside, export --------------------------------------------------------------------------------
    @contextmanager
    def _average_in(self, module: pl.LightningModule) -> Any:
        params = list(module.backbone.model.parameters())
        held = [p.detach().clone() for p in params]
        _copy_into(params, self.validated)
        try:
            yield
        finally:
            _copy_into(params, held)

    def _validating(self, trainer: pl.Trainer) -> bool:
        return self.validated is not None and not trainer.sanity_checking

    def on_validation_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self.validate == "averaged" and self._validating(trainer):
            self._swapped = [p.detach().clone() for p in module.backbone.model.parameters()]
            _copy_into(list(module.backbone.model.parameters()), self.validated)

    def on_validation_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:  # fmt: skip
        if self.validate == "both" and self._validating(trainer):
            with self._average_in(module):
                module.validate_batch(batch, batch_idx, AVERAGE_PREFIX)

    def on_validation_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self._swapped is not None:
            _copy_into(list(module.backbone.model.parameters()), self._swapped)
            self._swapped = None

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self.export != "averaged" or self.validated is None:
            return
        _copy_into(list(module.backbone.model.parameters()), self.validated)
        self.changed_weights = True  # the final validation scores the average (run/pretrain.fit)
        log.info("weight_averaging: the %s (%s) replaces the last step's weights for validation, export and probes",
                 self.kind.upper(), self.describe())  # fmt: skip

    def describe(self) -> str:
        every = f"every {self.every_n_steps} updates from update {self.start_step + 1}"
        if self.kind == "ema":
            return f"decay {self.decay}, {every}, {self.samples} samples"
        if self.window is None:
            return f"running mean of {self.samples} samples, {every}"
        return f"mean of the last completed window of {self.window} updates, {every}"

    def summary(self) -> dict[str, Any] | None:
        if self.kind is None:
            return None
        validated = self.describe() if self.validated is not None else "none yet (no window completed)"
        return {"kind": self.kind, "decay": self.decay if self.kind == "ema" else None, "updates": self.samples,
                "start_step": self.start_step, "every_n_steps": self.every_n_steps, "window": self.window,
                "dtype": self.dtype, "validate": self.validate, "export": self.export,
                "validated": validated}  # fmt: skip

    # -- checkpoint -----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.kind is None or self.running is None:
            return {}

        def named(tensors: list[Tensor] | None) -> dict[str, Tensor] | None:
            if tensors is None:
                return None
            return {name: t.detach().clone() for name, t in zip(self.names, tensors, strict=True)}

        return {"version": 2, "running": named(self.running), "completed": named(self.completed),
                "samples": self.samples, "in_window": self.in_window, "updated_at": self._updated_at}  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        if state_dict.get("version") != 2:
            raise ValueError(
                "this checkpoint's weight average was kept by an older degen_train (torch's AveragedModel, every "
                "update from step 0): resume it with that version, or set callbacks.weight_averaging.kind=null"
            )
        if self.names:  # Lightning restores callbacks after setup: the model is known
            self._restore(state_dict)
        else:
            self._pending = state_dict

    def _restore(self, state: dict[str, Any]) -> None:
        def ordered(named: dict[str, Tensor] | None) -> list[Tensor] | None:
            return None if named is None else [named[n].to(self._device) for n in self.names]

        self.running, self.completed = ordered(state["running"]), ordered(state["completed"])
        self.samples, self.in_window, self._updated_at = state["samples"], state["in_window"], state["updated_at"]


@torch.no_grad()
def _copy_into(params: list[Tensor], values: list[Tensor]) -> None:
    """Each parameter takes its value, cast to the parameter's dtype (a float32 average into bf16 weights)."""
    for param, value in zip(params, values, strict=True):
        param.copy_(value)
