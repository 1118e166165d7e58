"""The typed sections optimizer.* (conf/optimizer/: AdamW, Muon) and scheduler.* (conf/scheduler/), each a section
Hydra builds (its ``_target_`` a CODE field). Each field says its role where it is declared (core/roles.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from degen_train.core.roles import TRAINS
from degen_train.core.section import Instantiated, given_only


class OptimizerConfig(Instantiated):
    builds = ("degen_train.optim.optimizer.build_optimizer", "degen_train.optim.muon.build_muon")
    lr: Annotated[float, TRAINS] = Field(gt=0)
    weight_decay: Annotated[float, TRAINS] = Field(ge=0)
    eps: Annotated[float, TRAINS] = Field(gt=0)
    betas: Annotated[tuple[float, float], TRAINS]
    # optimizer=muon (degen_train.optim.muon): Muon's own settings; the four above are its AdamW part's
    muon_lr: Annotated[float | None, TRAINS] = Field(default=None, gt=0)
    muon_weight_decay: Annotated[float | None, TRAINS] = Field(default=None, ge=0)
    muon_momentum: Annotated[float | None, TRAINS] = Field(default=None, ge=0, lt=1)
    muon_ns_steps: Annotated[int | None, TRAINS] = Field(default=None, ge=1, lt=100)
    muon_adjust_lr: Annotated[Literal["original", "match_rms_adamw"] | None, TRAINS] = None
    muon_ns_dtype: Annotated[Literal["bfloat16", "float32"] | None, TRAINS] = None
    muon_nesterov: Annotated[bool | None, TRAINS] = given_only()
    muon_ns_coefficients: Annotated[list[float] | None, TRAINS] = given_only()
    fused: Annotated[bool | None, TRAINS] = given_only()  # null: fused on a GPU and for FSDP2's sharded parameters

    @model_validator(mode="after")
    def betas_in_range(self) -> OptimizerConfig:
        if not all(0 <= beta < 1 for beta in self.betas):
            raise ValueError(f"betas={list(self.betas)}: each must be in [0, 1)")
        return self


class SchedulerConfig(Instantiated):
    builds = ("degen_train.optim.schedule.build_scheduler",)
    schedule: Annotated[Literal["linear", "cosine", "constant", "wsd"], TRAINS]
    warmup_steps: Annotated[int, TRAINS] = Field(ge=0)
    total_steps: Annotated[int, TRAINS] = Field(ge=1)
    min_ratio: Annotated[float, TRAINS] = Field(ge=0, le=1)
    # wsd: the decay's length (wins over decay_fraction)
    decay_steps: Annotated[int | None, TRAINS] = Field(default=None, ge=1)
    decay_fraction: Annotated[float, TRAINS] = Field(default=0.2, gt=0, le=1)  # wsd: the decay's share of total_steps
    decay_shape: Annotated[Literal["linear", "cosine", "one_minus_sqrt"], TRAINS] = "linear"
    # the warm-up starts at lr / this (wsd: 100, released)
    warmup_init_div: Annotated[float | None, TRAINS] = Field(default=None, ge=1)

    @model_validator(mode="after")
    def decay_fits_the_run(self) -> SchedulerConfig:
        if self.schedule == "wsd":
            wsd_decay_steps(self.total_steps, self.warmup_steps, self.decay_steps, self.decay_fraction)
        return self


def wsd_decay_steps(total_steps: int, warmup_steps: int, decay_steps: int | None, decay_fraction: float) -> int:
    """The decay's length: ``decay_steps`` when given, else ``decay_fraction`` of the run rounded down (int(f·T), as
    the released wsd_schedule counts it); refused when it does not fit after the warm-up."""
    steps = decay_steps if decay_steps is not None else int(decay_fraction * total_steps)
    if total_steps - warmup_steps < 1:
        raise ValueError(
            f"scheduler.warmup_steps={warmup_steps} leaves no step of total_steps={total_steps} for the stable phase "
            f"and the decay: lower scheduler.warmup_steps below {total_steps}, or raise trainer.max_steps"
        )
    if not 0 < steps <= total_steps - warmup_steps:
        given = (
            f"scheduler.decay_steps={steps}"
            if decay_steps is not None
            else (f"scheduler.decay_fraction={decay_fraction} of total_steps={total_steps} ({steps} steps)")
        )
        raise ValueError(
            f"{given} must be in 1..{total_steps - warmup_steps} steps: the decay follows "
            f"warmup_steps={warmup_steps} within total_steps={total_steps}"
        )
    return steps
