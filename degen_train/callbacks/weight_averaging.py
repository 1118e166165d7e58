"""``callbacks.weight_averaging.kind=ema|swa``: an average of the model's weights kept beside training, validated
and exported in place of the last step's.

EMA: θ̄ ← β·θ̄ + (1 − β)·θ after each update (Polyak & Juditsky 1992; the form of torch's ``get_ema_multi_avg_fn``).
SWA: θ̄ ← θ̄ + (θ − θ̄)/(n + 1), the running mean of the weights every ``every_n_steps`` updates (Izmailov et al.
2018, "Averaging Weights Leads to Wider Optima and Better Generalization"). Both from ``start_step``.

Built on torch's ``AveragedModel`` rather than Lightning's ``WeightAveraging`` callback, which does not fit this
house: it deep-copies the whole LightningModule (a TaCL teacher, an ELECTRA generator's frozen parts: twice the
memory for weights that never move), swaps and overwrites every buffer (state a term keeps, such as CosReg's seen
rows, would be rolled back to a stale copy at the end), and writes the average into a checkpoint's ``state_dict``,
which resumes, ``degen-convert``, branching and every comparison read as the trained weights. Here the average
covers the exported model's parameters only, travels in the checkpoint's callback state (a resume continues it
exactly), and ``state_dict`` stays the weights training left.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn, get_swa_multi_avg_fn

log = logging.getLogger("degen_train")

KINDS = ("ema", "swa")
FSDP2_REFUSAL = (
    "callbacks.weight_averaging keeps a whole copy of the model beside it, which strategy=fsdp shards: use "
    "strategy=ddp (or auto), or callbacks.weight_averaging.kind=null"
)


def check_weight_averaging_fits(callbacks: Any, strategy: Any) -> None:
    """From the config alone, before data or weights: the settings (as the callback will read them) and FSDP2."""
    averaging = (callbacks or {}).get("weight_averaging") or {}
    WeightAverage(**{k: v for k, v in averaging.items() if not k.startswith("_")})
    if averaging.get("kind") and "FSDP2" in str((strategy or {}).get("_target_", "")):
        raise ValueError(FSDP2_REFUSAL)


class WeightAverage(Callback):
    """Keep an EMA or SWA of ``module.backbone.model``'s parameters; validate with it (``validate: averaged``) and
    put it in the model at the end (``export: averaged``) so the final validation, the export and the probes use it.
    ``kind: null``: off."""

    def __init__(
        self,
        *,
        kind: str | None = None,
        decay: float = 0.999,
        start_step: int = 0,
        every_n_steps: int = 1,
        validate: str = "averaged",
        export: str = "averaged",
    ) -> None:
        if kind is not None and kind not in KINDS:
            raise ValueError(f"callbacks.weight_averaging.kind={kind!r} is not one of null, {', '.join(KINDS)}")
        if kind == "ema" and not 0 < decay < 1:
            raise ValueError(f"callbacks.weight_averaging.decay={decay} must be in (0, 1), e.g. 0.999")
        if start_step < 0 or every_n_steps < 1:
            raise ValueError(
                f"callbacks.weight_averaging.start_step={start_step} must be >= 0 and every_n_steps={every_n_steps} "
                f">= 1"
            )
        for key, value in (("validate", validate), ("export", export)):
            if value not in ("averaged", "current"):
                raise ValueError(f"callbacks.weight_averaging.{key}={value!r} is not one of averaged, current")
        self.kind, self.decay, self.start_step, self.every_n_steps = kind, decay, start_step, every_n_steps
        self.validate, self.export = validate, export
        self.average: AveragedModel | None = None
        self._pending: dict[str, Any] | None = None  # a checkpoint's average, loaded before setup built the copy
        self._swapped = False
        self._updated_at: int | None = None  # the update the average last took in

    def setup(self, trainer: pl.Trainer, module: pl.LightningModule, stage: str) -> None:
        if self.kind is None or stage != "fit" or self.average is not None:
            return
        if getattr(trainer.strategy, "fsdp_options", None) is not None:
            raise ValueError(FSDP2_REFUSAL)
        averaging = get_ema_multi_avg_fn(self.decay) if self.kind == "ema" else get_swa_multi_avg_fn()
        self.average = AveragedModel(module.backbone.model, multi_avg_fn=averaging, use_buffers=False)
        if self._pending is not None:
            self.average.load_state_dict(self._pending)
            self._pending = None

    def _due(self, step: int) -> bool:
        return step >= self.start_step and (step - self.start_step) % self.every_n_steps == 0

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, *args: Any) -> None:
        # global_step counts updates: called once per micro-batch, the average moves once per update.
        step = trainer.global_step
        if self.average is None or step == 0 or step == self._updated_at or not self._due(step):
            return
        self.average.update_parameters(module.backbone.model)
        self._updated_at = step

    @property
    def updates(self) -> int:
        return int(self.average.n_averaged) if self.average is not None else 0

    def _swap(self, module: pl.LightningModule) -> None:
        with torch.no_grad():
            for averaged, current in zip(
                self.average.module.parameters(), module.backbone.model.parameters(), strict=True
            ):
                held = current.detach().clone()
                current.copy_(averaged)
                averaged.copy_(held)
        self._swapped = not self._swapped

    def on_validation_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self.validate == "averaged" and self.updates and not trainer.sanity_checking:
            self._swap(module)

    def on_validation_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self._swapped:
            self._swap(module)

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self.export != "averaged" or not self.updates:
            return
        with torch.no_grad():
            for averaged, current in zip(
                self.average.module.parameters(), module.backbone.model.parameters(), strict=True
            ):
                current.copy_(averaged)
        log.info(
            "weight_averaging: the %s of %d updates (from step %d) replaces the last step's weights for validation, "
            "export and probes",
            self.kind.upper(),
            self.updates,
            self.start_step,
        )

    def summary(self) -> dict[str, Any] | None:
        if self.kind is None:
            return None
        return {"kind": self.kind, "decay": self.decay if self.kind == "ema" else None, "updates": self.updates,
                "start_step": self.start_step, "every_n_steps": self.every_n_steps}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        if self.average is None:
            return {}
        return {"average": {k: v.detach().clone() for k, v in self.average.state_dict().items()},
                "updated_at": self._updated_at}  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        self._updated_at = state_dict.get("updated_at")
        if self.average is not None:
            self.average.load_state_dict(state_dict["average"])
        else:
            self._pending = state_dict["average"]
