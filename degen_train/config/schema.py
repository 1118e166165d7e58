"""The run's typed config, ``TrainConfig``: the composition of every component's own section, checked once before
any data, model or file is touched.

Each component declares its section beside its code, every field with its type, range, default and role:
data/section.py (data.*, data.tokenizer.*, masking.*), models/section.py (model.*), optim/section.py (optimizer.*,
scheduler.*), callbacks/sections.py (callbacks.*), finetune/section.py (eval.finetune.*), losses/section.py (a loss
term's options), evaluation/section.py (eval.*), run/sections.py (trainer.*, strategy.*, logger.*, push_to_hub.*,
search.*, plan.*). A section imports only core/ and other sections, so this file may compose a section of a package
above it. It holds the run's top-level keys and the rules that span sections (``sections_agree``).

Every problem is reported at once, each naming the key, the value and what is allowed. ``validate_config``'s
``TrainConfig`` is the config that runs: the layers below the CLI receive its typed sections (run/checks.py's
``RunPlan``), read each listed key as an attribute, and never check or default it again; its ``plain_settings()``
are what Hydra instantiates and the run records.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, ClassVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue
from pydantic import Field, ValidationError, field_validator, model_validator

from degen_train.callbacks.sections import CallbacksConfig
from degen_train.core.roles import (
    INPUT,
    LAUNCH,
    LAUNCH_ALONE,
    OUTPUT,
    TRAINS,
    VALIDATION,
    Declared,
    group,
    protection,
)
from degen_train.core.section import Closed, Section, describe_errors, given_only
from degen_train.data.section import DataConfig, MaskingConfig
from degen_train.evaluation.section import EvalConfig
from degen_train.losses.section import TermSection
from degen_train.models.section import ModelConfig
from degen_train.optim.section import OptimizerConfig, SchedulerConfig
from degen_train.run.sections import (
    LoggersConfig,
    PlanConfig,
    PushToHubConfig,
    SearchConfig,
    StrategyConfig,
    TrainerConfig,
)


class TrainConfig(Section):
    # Closed: a top-level key no section declares (+sed=3 for seed) is refused, naming the nearest
    model_config = Closed
    seed: Annotated[int, TRAINS] = Field(ge=0)
    ckpt_path: Annotated[str | None, LAUNCH_ALONE] = None  # a resume continues the run exactly
    branch_from: Annotated[str | None, INPUT] = None
    allow_slow_precision: Annotated[bool, LAUNCH_ALONE] = False
    prepare_only: Annotated[bool, LAUNCH] = False
    export_hf: Annotated[bool, OUTPUT] = True
    final_validation: Annotated[bool, protection(VALIDATION, keeps=(True,))] = True
    threads: Annotated[Any, LAUNCH_ALONE] = "auto"
    eval: EvalConfig = Field(default_factory=EvalConfig)
    push_to_hub: PushToHubConfig = Field(default_factory=PushToHubConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    plan: PlanConfig = Field(default_factory=PlanConfig)
    masking: MaskingConfig
    data: Annotated[DataConfig, group(TRAINS)]
    model: Annotated[ModelConfig, group(TRAINS)]
    trainer: Annotated[TrainerConfig, group(LAUNCH)]
    optimizer: Annotated[OptimizerConfig, group(TRAINS)]
    scheduler: Annotated[SchedulerConfig, group(TRAINS)]
    callbacks: Annotated[CallbacksConfig | None, group(protection("every callback", keeps=("default",)))] = None
    objective: Annotated[dict[str, TermSection], TRAINS, group(TRAINS)] = Field(default_factory=dict)
    regularizer: Annotated[dict[str, TermSection] | None, TRAINS, group(TRAINS)] = given_only()
    # where the run writes, and how it is launched: this run's own, never a handed-over file's
    run_dir: Annotated[str | None, OUTPUT] = given_only()
    logger: Annotated[LoggersConfig | None, OUTPUT, group(OUTPUT)] = given_only()
    strategy: Annotated[StrategyConfig | None, LAUNCH, group(LAUNCH)] = given_only()
    hydra: Annotated[dict[str, Any] | None, LAUNCH, group(LAUNCH)] = given_only()
    defaults: Annotated[list[Any] | None, LAUNCH] = given_only()  # a config file's own defaults list: its composition
    # a recipe's own inputs, interpolated into the keys that read them (recipes/tacl.yaml: teacher, simcse: start)
    teacher: Annotated[str | None, INPUT] = given_only()
    start: Annotated[str | None, INPUT] = given_only()
    # Groups whose files set keys across sections (``# @package _global_``): the role of choosing one of their files
    GLOBAL_GROUPS: ClassVar[dict[str, Declared]] = {
        "recipe": TRAINS, "method": TRAINS, "speed": TRAINS, "cluster": LAUNCH,
        "debug": protection("the run's steps, checkpoints and validation", keeps=(None,)),  # no choice keeps them
    }  # fmt: skip

    def plain_settings(self) -> dict[str, Any]:
        """The config that runs, as plain values: every listed key with its checked value or the schema's default,
        except that a section Hydra builds (``_target_``: the optimizer, the scheduler, each callback, the trainer)
        keeps only the keys given, as its constructor receives them. What run/build.py instantiates from and what
        the run records (config.json, config.yaml); derived from this typed config, never carried beside it."""
        # JSON's types (a tuple as a list), as OmegaConf held them and every recorded config.json has them
        return _filled(self.model_dump(by_alias=True, mode="json"),
                       self.model_dump(exclude_unset=True, by_alias=True, mode="json"))  # fmt: skip

    @field_validator("threads")
    @classmethod
    def threads_is_auto_or_a_count(cls, value: Any) -> Any:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError("must be auto (the CPUs this process may use) or a thread count >= 1, e.g. threads=1")

    @model_validator(mode="after")
    def sections_agree(self) -> TrainConfig:
        if self.push_to_hub.repo_id and not self.export_hf:
            raise ValueError(
                f"push_to_hub.repo_id={self.push_to_hub.repo_id} needs export_hf=true: the export is what is pushed"
            )
        if self.eval.glue and not self.export_hf:
            raise ValueError("eval.glue fine-tunes the export: it needs export_hf=true")
        if self.eval.glue and not self.eval.glue_dir:
            raise ValueError(
                "eval.glue needs eval.glue_dir: the folder GLUE's download wrote (holding RTE/, SST-2/, ...)"
            )
        if self.data.tokenize_part is not None and not self.prepare_only:
            raise ValueError(
                f"data.tokenize_part={self.data.tokenize_part} tokenizes one node's share of the corpus and stops: "
                f"give prepare_only=true with it, then train without it once every part is in the cache"
            )
        nsp = [key for key, term in self.objective.items()
               if key == "nsp" or ((term.model_extra or {}) if term else {}).get("term") == "nsp"]
        if self.data.examples == "sentences" and nsp:
            raise ValueError("data.examples=sentences cannot make NSP pairs: use data.examples=packed with NSP")
        if self.model.init_from is None and self.data.block_size > self.model.max_position:
            raise ValueError(
                f"data.block_size={self.data.block_size} is longer than model.max_position={self.model.max_position}: "
                f"lower data.block_size or raise model.max_position"
            )
        return self


def validate_config(cfg: DictConfig) -> TrainConfig:
    """Check ``cfg`` against the schema; raise one ValueError naming every bad key, value and what is allowed."""
    try:
        raw: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    except (MissingMandatoryValue, InterpolationToMissingValueError) as error:  # a recipe's ??? (teacher=, start=)
        missing = str(error).split("Missing mandatory value:")[-1].split("\n")[0].strip()
        raise ValueError(
            f"{missing} has no value, and {error.full_key} needs it: give {missing}=... on the command line "
            f"(the recipe's header says what it is)"
        ) from None
    try:
        checked = TrainConfig.model_validate(raw)
    except ValidationError as error:
        lines = describe_errors(error, raw, TrainConfig)
        raise ValueError("invalid config:\n" + "\n".join(lines)) from None
    scheduler = checked.scheduler
    if scheduler.warmup_steps >= scheduler.total_steps:
        # A log line as every other caution of a run (train.log keeps it), not a Python warning.
        logging.getLogger("degen_train").warning(
            "scheduler.warmup_steps=%s >= scheduler.total_steps=%s: the learning rate never reaches optimizer.lr=%s "
            "in this run", scheduler.warmup_steps, scheduler.total_steps, checked.optimizer.lr)  # fmt: skip
    return checked


def _filled(full: Any, given: Any) -> Any:
    """``full`` (defaults filled), except that a section Hydra instantiates (``_target_``: the optimizer, the
    scheduler, each callback) keeps only the keys given: its constructor receives them as arguments."""
    if not isinstance(full, dict):
        return full
    if isinstance(given, dict) and "_target_" in given:
        return given
    return {key: _filled(value, given.get(key) if isinstance(given, dict) else None) for key, value in full.items()}
