"""The sections of what run/ builds or decides itself, each beside the module that reads it:

- trainer: lightning.pytorch.Trainer's arguments (conf/trainer/ gives the house's), built by build.py;
- strategy and logger: how the run spreads over devices (parallel.py) and what it logs to (loggers.py);
- push_to_hub: where the export is uploaded (hub.py);
- search: what a hyper-parameter search minimises (sweep.py's search_objective);
- plan: debug=plan's memory and time plan (memory_plan.py).

``trainer.KEY=VALUE`` opens any Trainer argument on the command line (config/overrides.py); the ones declared here are
those a run's record or a handed-over file may hold, typed as Lightning takes them. What degen-train decides itself
(the callbacks, loggers, strategy and plugins it builds) is passed by build.py, never read from here. Imports no
framework (run/__init__.py imports nothing): the command line checks these before torch loads.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator

from degen_train.core.roles import (
    CODE,
    HOUSE_VALIDATION_STEPS,
    LAUNCH,
    OUTPUT,
    PRESENTATION,
    TRAINS,
    VALIDATION,
    Declared,
    Role,
    checkpoints,
    measures,
    protection,
)
from degen_train.core.section import MAX_ITEMS, Instantiated, Open, Section, given_only
from degen_train.core.source_reading import module_literal_choices

Count = int | float | None  # Lightning's limits: a count of batches or a fraction of them
# where Lightning declares the precisions it takes (as Literals), read from its source: torch would load on import
LIGHTNING_PRECISIONS = ("lightning.fabric.plugins.precision.precision",
                        ("_PRECISION_INPUT_STR", "_PRECISION_INPUT_STR_ALIAS", "_PRECISION_INPUT_INT"))  # fmt: skip


@functools.cache
def lightning_precisions() -> tuple[Any, ...]:
    """Every trainer.precision Lightning takes; () where its source no longer says (Lightning's own check then)."""
    module, names = LIGHTNING_PRECISIONS
    try:
        return tuple(value for name in names for value in module_literal_choices(module, name))
    except (KeyError, ModuleNotFoundError, SyntaxError, ValueError):
        return ()


class TrainerConfig(Instantiated):
    builds = ("lightning.pytorch.Trainer",)
    max_steps: Annotated[int, TRAINS] = Field(ge=1)
    accumulate_grad_batches: Annotated[int, TRAINS] = Field(ge=1)
    log_every_n_steps: Annotated[int, PRESENTATION] = Field(ge=1)
    gradient_clip_val: Annotated[float | None, TRAINS] = Field(default=None, ge=0)
    val_check_interval: Annotated[
        Annotated[int | float, Field(gt=0)] | Literal["auto"] | None,
        # a file may keep "auto" or validate every N ≤ 100 updates; null (periodic validation off) and a float (a
        # fraction of an epoch the endless loader never ends) are no such cadence (issue 72.6)
        protection(VALIDATION, keeps=("auto",), at_most=HOUSE_VALIDATION_STEPS, whole=True),
    ] = None
    # what the run trains
    precision: Annotated[int | str | None, TRAINS] = given_only()
    deterministic: Annotated[bool | Literal["warn"] | None, TRAINS] = given_only()
    benchmark: Annotated[bool | None, TRAINS] = given_only()
    min_steps: Annotated[int | None, TRAINS] = given_only()
    gradient_clip_algorithm: Annotated[Literal["norm", "value"] | None, TRAINS] = given_only()
    use_distributed_sampler: Annotated[bool | None, TRAINS] = given_only()
    sync_batchnorm: Annotated[bool | None, TRAINS] = given_only()
    inference_mode: Annotated[bool | None, TRAINS] = given_only()
    detect_anomaly: Annotated[bool | None, TRAINS] = given_only()
    reload_dataloaders_every_n_epochs: Annotated[int | None, TRAINS] = given_only()
    # how and where it starts
    accelerator: Annotated[str | None, LAUNCH] = given_only()
    devices: Annotated[int | str | list[int] | None, LAUNCH] = given_only()
    num_nodes: Annotated[int | str | None, LAUNCH] = given_only()
    strategy: Annotated[Any, LAUNCH] = given_only()
    plugins: Annotated[Any, LAUNCH] = given_only()
    num_sanity_val_steps: Annotated[int | None, LAUNCH] = given_only()
    barebones: Annotated[bool | None, LAUNCH] = given_only()
    # where it writes
    default_root_dir: Annotated[str | None, OUTPUT] = given_only()
    logger: Annotated[Any, OUTPUT] = given_only()
    profiler: Annotated[Any, OUTPUT] = given_only()  # a name or a section (trainer.profiler._target_, ...)
    model_registry: Annotated[str | None, OUTPUT] = given_only()
    callbacks: Annotated[Any, CODE] = given_only()
    # how it is shown
    enable_progress_bar: Annotated[bool | None, PRESENTATION] = given_only()
    enable_model_summary: Annotated[bool | None, PRESENTATION] = given_only()
    # what it protects: validation, and the switches that change what the run is (only the value that leaves the run
    # as it is)
    limit_val_batches: Annotated[Count, protection(VALIDATION, above=0)] = given_only()
    check_val_every_n_epoch: Annotated[int | None, protection(VALIDATION, keeps=(None,))] = given_only()
    fast_dev_run: Annotated[bool | int | None, protection("the run's steps and checkpoints", keeps=(False, 0))] = (
        given_only())  # fmt: skip
    limit_train_batches: Annotated[Count, protection("the run's steps", keeps=(None, 1.0, 1))] = given_only()
    overfit_batches: Annotated[Count, protection("the run's data", keeps=(0, 0.0))] = given_only()
    enable_checkpointing: Annotated[bool | None, checkpoints(keeps=(None, True))] = given_only()
    max_epochs: Annotated[int | None, protection("the run's steps (degen-train counts steps: -1)",
                                                 keeps=(None, -1))] = given_only()  # fmt: skip
    min_epochs: Annotated[int | None, protection("the run's steps", keeps=(None,))] = given_only()
    max_time: Annotated[str | dict[str, Any] | None, protection("the run's steps (a clock would end it early)",
                                                               keeps=(None,))] = given_only()  # fmt: skip
    # what it measures
    limit_test_batches: Annotated[Count, measures(at_most=MAX_ITEMS)] = given_only()
    limit_predict_batches: Annotated[Count, measures(at_most=MAX_ITEMS)] = given_only()

    @field_validator("precision")
    @classmethod
    def a_precision_lightning_takes(cls, value: int | str | None) -> int | str | None:
        choices = lightning_precisions()
        if value is not None and choices and value not in choices:
            raise ValueError(f"not one of Lightning's precisions ({', '.join(dict.fromkeys(map(str, choices)))})")
        return value

    @field_validator("devices")
    @classmethod
    def a_count_indices_or_auto(cls, value: int | str | list[int] | None) -> int | str | list[int] | None:
        if value == [] or (isinstance(value, int) and not isinstance(value, bool) and (value == 0 or value < -1)):
            raise ValueError("give a count of devices (1 or more), -1 for every device, a list of device indices, or "
                             "auto")  # fmt: skip
        return value


class StrategyConfig(Instantiated):
    """strategy: how a run spreads over devices (conf/strategy/, run/parallel.py), built by run/build.py: a class
    Hydra builds, or the name Lightning knows a strategy by. Open: any other keyword of the class goes to it."""

    builds = ("degen_train.run.parallel.FSDP2Strategy", "lightning.pytorch.strategies.DDPStrategy",
              "degen_train.run.parallel.deepspeed_strategy")  # fmt: skip
    name: Annotated[str | None, LAUNCH] = given_only()  # a strategy by Lightning's name (auto, ddp, ...)
    # FSDP2: bf16 parameters in forward and backward, gradients reduced in bf16; null: fp32
    mixed_precision: Annotated[Literal["bf16", "fp32"] | None, LAUNCH] = given_only()
    cpu_offload: Annotated[bool | None, LAUNCH] = given_only()  # FSDP2: shards kept on the CPU between uses
    reshard_after_forward: Annotated[bool | None, LAUNCH] = given_only()
    sharded_checkpoint: Annotated[bool | None, LAUNCH] = given_only()  # a folder of shards, or one gathered file
    find_unused_parameters: Annotated[bool | None, LAUNCH] = given_only()  # DDP
    process_group_backend: Annotated[str | None, LAUNCH] = given_only()
    stage: Annotated[Literal[1, 2, 3] | None, LAUNCH] = given_only()  # DeepSpeed's ZeRO stage
    offload_optimizer: Annotated[bool | None, LAUNCH] = given_only()


class CSVLoggerConfig(Instantiated):
    """logger.csv: RUN/logs/metrics.csv, its rows before a resumed step kept (run/loggers.py)."""

    builds = ("degen_train.run.loggers.ResumableCSVLogger",)
    save_dir: Annotated[str | None, OUTPUT] = given_only()
    name: Annotated[str | None, OUTPUT] = given_only()
    version: Annotated[str | int | None, OUTPUT] = given_only()


class TensorBoardLoggerConfig(CSVLoggerConfig):
    """logger.tensorboard: Lightning's TensorBoardLogger in RUN/tensorboard."""

    builds = ("lightning.pytorch.loggers.TensorBoardLogger",)


class WandbLoggerConfig(Instantiated):
    """logger.wandb: Weights & Biases, never prompting (run/loggers.wandb_logger)."""

    builds = ("degen_train.run.loggers.wandb_logger",)
    # auto: online only where an API key is configured, else offline
    mode: Annotated[Literal["auto", "online", "offline", "disabled"] | None, OUTPUT] = given_only()
    project: Annotated[str | None, OUTPUT] = given_only()
    entity: Annotated[str | None, OUTPUT] = given_only()
    group: Annotated[str | None, OUTPUT] = given_only()  # null: the sweep's folder
    name: Annotated[str | None, OUTPUT] = given_only()  # null: the run folder's name
    save_dir: Annotated[str | None, OUTPUT] = given_only()


class LoggersConfig(Section):
    """logger: the loggers a run writes to (conf/logger/; several at once: logger=[csv,wandb]). Open: a logger of
    your own is a section with its ``_target_``."""

    model_config = Open
    csv: CSVLoggerConfig | None = given_only()
    tensorboard: TensorBoardLoggerConfig | None = given_only()
    wandb: WandbLoggerConfig | None = given_only()


class PushToHubConfig(Section):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    repo_id: Annotated[str | None, OUTPUT] = None
    private: Annotated[bool, OUTPUT] = True
    message: Annotated[str, OUTPUT] = "degen_train export"
    dry_run: Annotated[bool, OUTPUT] = False

    @field_validator("repo_id")
    @classmethod
    def owner_and_name(cls, value: str | None) -> str | None:
        if value is not None and len(value.split("/")) != 2:
            raise ValueError("must be OWNER/NAME, e.g. my-lab/bert-tiny-cosreg")
        return value


SEARCHES = Declared(Role.MEASURES, same_result=True)  # what a search compares runs by: nothing a run computes


class SearchConfig(Section):
    """search: what a hyper-parameter search minimises (sweep.search_objective)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    metric: Annotated[str, SEARCHES] = "val_loss"  # a summary.json key, or a val/... key of its val_metrics
    cosine_weight: Annotated[float, SEARCHES] = Field(default=0.0, ge=0)
    cosine_bound: Annotated[float | None, SEARCHES] = Field(default=None, ge=-1, le=1)


class PlanConfig(Section):
    """plan: debug=plan's question, does this run fit a card and how long will it take (run/memory_plan.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # true (debug=plan): print the plan and stop, nothing built on a device, nothing written
    only: Annotated[bool, LAUNCH] = False
    card: Annotated[Literal["h100", "h200", "a100"], LAUNCH] = "h100"
    # the model FLOPs utilisation the step time is quoted at
    mfu: Annotated[float, LAUNCH] = Field(default=0.4, gt=0, le=1)
    devices: Annotated[int | None, LAUNCH] = Field(default=None, ge=1)  # null: trainer.devices x trainer.num_nodes
    # tokens to train: the plan gives the hours
    token_budget: Annotated[float | None, LAUNCH] = Field(default=None, gt=0)
    # the share of the card's memory a plan may fill
    headroom: Annotated[float, LAUNCH] = Field(default=0.9, gt=0, le=1)
    # another memory size for the card (a 40 GB A100, ...)
    memory_gib: Annotated[float | None, LAUNCH] = Field(default=None, gt=0)
