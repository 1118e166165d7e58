"""callbacks: each callback's typed section (conf/callbacks/default.yaml gives their values), every setting with its
role. Each section is what its callback's constructor receives (degen_train/callbacks/); the constructor checks what
needs the run itself."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from degen_train.core.roles import (
    CADENCE_MINUTES,
    DIVERGENCE,
    FLOOR_MINUTES,
    HOUSE_CHECKPOINT_STEPS,
    INPUT,
    LAUNCH_ALONE,
    MEASURES,
    OUTPUT,
    PRESENTATION,
    TRAINS,
    VALIDATION,
    checkpoints,
    measures,
    protection,
)
from degen_train.core.section import MAX_ITEMS, Instantiated, Open, Section, given_only
from degen_train.evaluation.section import Pooling


class CheckpointCallbackConfig(Instantiated):
    builds = ("degen_train.callbacks.checkpoint.RunCheckpoint",)
    every_n_train_steps: Annotated[int | None, checkpoints(at_most=HOUSE_CHECKPOINT_STEPS)] = Field(
        default=None, ge=1
    )
    save_top_k: Annotated[int, checkpoints(keeps=(-1,), at_least=2)] = Field(default=1, ge=-1)
    background: Annotated[bool | Literal["auto"], LAUNCH_ALONE] = "auto"
    dirpath: Annotated[str | None, OUTPUT] = given_only()
    filename: Annotated[str | None, OUTPUT] = given_only()
    auto_insert_metric_name: Annotated[bool | None, OUTPUT] = given_only()
    monitor: Annotated[str | None, checkpoints(keeps=("step",))] = given_only()
    mode: Annotated[str | None, checkpoints(keeps=("max",))] = given_only()
    save_last: Annotated[bool | Literal["link"] | None, checkpoints(keeps=(True,))] = given_only()


class PreemptionCallbackConfig(Instantiated):
    builds = ("degen_train.callbacks.preemption.Preemption",)
    requeue: Annotated[bool | None, protection("the requeue of a preempted cluster job", keeps=(True,),
                                               same_result=True)] = given_only()  # fmt: skip
    # null leaves the signal alone
    requeue_signal: Annotated[str | None, protection("the cluster's warning signal", keeps=("SIGUSR1", "SIGUSR2"),
                                                     same_result=True)] = given_only()  # fmt: skip


class ThroughputCallbackConfig(Instantiated):
    builds = ("degen_train.callbacks.throughput.Throughput",)
    window: Annotated[int | None, measures(at_most=10_000)] = given_only()
    peak_flops: Annotated[float | None, MEASURES] = given_only()
    count_total_flops: Annotated[bool | None, MEASURES] = given_only()


class ProgressBarCallbackConfig(Instantiated):
    builds = ("degen_train.callbacks.throughput.StepProgressBar",)
    refresh_rate: Annotated[int | None, PRESENTATION] = given_only()


class LearningRateMonitorConfig(Instantiated):
    builds = ("lightning.pytorch.callbacks.LearningRateMonitor",)
    logging_interval: Annotated[str | None, PRESENTATION] = given_only()


class CadenceCallbackConfig(Instantiated):
    """Validation, checkpoints and the isotropy probe every so many minutes of training (callbacks/cadence.py)."""

    builds = ("degen_train.callbacks.cadence.ClockCadence",)
    validation_minutes: Annotated[float | None, protection(VALIDATION, keeps=(None,), at_least=FLOOR_MINUTES,
                                                           at_most=CADENCE_MINUTES)] = given_only()  # fmt: skip
    checkpoint_minutes: Annotated[float | None, checkpoints(keeps=(None,), at_least=FLOOR_MINUTES,
                                                           at_most=CADENCE_MINUTES)] = given_only()  # fmt: skip
    isotropy_minutes: Annotated[float | None, measures(at_least=FLOOR_MINUTES, at_most=24 * 60)] = given_only()


class IsotropyCallbackConfig(Instantiated):
    builds = ("degen_train.callbacks.isotropy_monitor.IsotropyMonitor",)
    every_n_steps: Annotated[int, MEASURES] = Field(ge=1, le=MAX_ITEMS)
    probe_size: Annotated[int, MEASURES] = Field(ge=1, le=4096)
    at_end: Annotated[bool | None, MEASURES] = given_only()


class BestBySTSCallbackConfig(Instantiated):
    """The weights of the best STS score are the run's result (callbacks/best_sts.py)."""

    builds = ("degen_train.callbacks.best_sts.BestBySTS",)
    sts: Annotated[str | None, INPUT] = given_only()  # an STS file the run reads every few steps
    every_n_steps: Annotated[int | None, TRAINS] = given_only(ge=1)
    pooling: Annotated[Pooling | None, TRAINS] = given_only()


BEST_BY_STS_FSDP2_REFUSAL = (
    "callbacks.best_by_sts scores the whole model between steps, which strategy=fsdp keeps sharded: use strategy=ddp "
    "(or auto), or callbacks.best_by_sts.sts=null"
)
# A kind's released settings, taken where its own are null (Hägele et al. 2024, epfml/schedules-and-scaling)
AVERAGING_RELEASED = {"ema": {"decay": 0.95, "every_n_steps": 10}, "swa": {"every_n_steps": 5, "window": 500}}
AVERAGING_FSDP2_REFUSAL = (
    "callbacks.weight_averaging keeps a whole copy of the model beside it, which strategy=fsdp shards: use "
    "strategy=ddp (or auto), or callbacks.weight_averaging.kind=null"
)


class WeightAveragingCallbackConfig(Instantiated):
    """An average of the weights beside the model: what it exports is the run's result (callbacks/weight_averaging).
    Its rules are all here; the callback receives them checked."""

    builds = ("degen_train.callbacks.weight_averaging.WeightAverage",)
    kind: Annotated[Literal["ema", "swa"] | None, TRAINS] = given_only()  # null: off
    decay: Annotated[float | None, TRAINS] = given_only(gt=0, lt=1)
    start_step: Annotated[int | None, TRAINS] = given_only(ge=0)
    every_n_steps: Annotated[int | None, TRAINS] = given_only(ge=1)
    window: Annotated[int | None, TRAINS] = given_only(ge=0)  # swa; 0: one running mean, no window
    dtype: Annotated[Literal["float32", "model"] | None, TRAINS] = given_only()
    validate_with: Annotated[Literal["both", "averaged", "current"] | None, TRAINS] = given_only(
        alias="validate")  # pydantic's own name: aliased  # fmt: skip
    export: Annotated[Literal["current", "averaged"] | None, TRAINS] = given_only()

    @model_validator(mode="after")
    def window_holds_whole_intervals(self) -> WeightAveragingCallbackConfig:
        if self.kind == "swa":
            released = AVERAGING_RELEASED["swa"]
            every = self.every_n_steps or released["every_n_steps"]
            window = released["window"] if self.window is None else self.window
            if window % every:
                raise ValueError(
                    f"window={window} must be a multiple of every_n_steps={every} (a window holds whole sampling "
                    f"intervals, as released), or 0 for one running mean"
                )
        return self


class DivergenceCallbackConfig(Instantiated):
    builds = ("degen_train.callbacks.divergence.DivergenceGuard",)
    on_nonfinite: Annotated[Literal["stop", "skip"], protection(DIVERGENCE, keeps=("stop",))]
    max_skips: Annotated[int, protection(DIVERGENCE, at_most=10)] = Field(ge=0)
    # a handed-over spike guard, off (null) or within 2–10 σ over 8–10,000 steps: "tighter" has a floor too, since a
    # guard that skips every step stops a run as surely as none protects it (issue 72.6)
    spike_sigma: Annotated[float | None, protection(DIVERGENCE, keeps=(None,), at_least=2, at_most=10)] = Field(
        default=None, gt=0)
    spike_window: Annotated[int, protection(DIVERGENCE, at_least=8, at_most=10_000)] = Field(ge=2)


class CallbacksConfig(Section):
    model_config = Open
    checkpoint: CheckpointCallbackConfig | None = None
    isotropy: IsotropyCallbackConfig | None = None
    divergence: DivergenceCallbackConfig | None = None
    preemption: PreemptionCallbackConfig | None = given_only()
    throughput: ThroughputCallbackConfig | None = given_only()
    progress_bar: ProgressBarCallbackConfig | None = given_only()
    lr_monitor: LearningRateMonitorConfig | None = given_only()
    cadence: CadenceCallbackConfig | None = given_only()
    best_by_sts: BestBySTSCallbackConfig | None = given_only()
    weight_averaging: WeightAveragingCallbackConfig | None = given_only()
