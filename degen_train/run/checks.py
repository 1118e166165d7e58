"""Stage 1 of a run: everything the config alone can tell, before any data, weights or file is touched.

``check(cfg)`` validates the config against the typed schema once (config/schema.py), then asks each section the
questions only its component can answer, in the order a user meets them: the losses (each term's spec, none built),
the hardware, the schedule and the data's mixture. It returns a ``RunPlan``: the checked config, typed (the one form
below the command line: the DictConfig Hydra composed ends here), and every fact the later stages need. It reads no
file and writes nothing: the inputs the config names (fields whose role is ``input``) are read by the next stage
(run/inputs.py). A failure is one message naming the key and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from degen_train.callbacks.sections import AVERAGING_FSDP2_REFUSAL, BEST_BY_STS_FSDP2_REFUSAL
from degen_train.config.schema import TrainConfig
from degen_train.data.mixture import mixture_sources
from degen_train.devices.determinism import deterministic_environment
from degen_train.devices.precision import check_precision
from degen_train.devices.threads import local_process_count, use_threads
from degen_train.losses.catalog import TermSpec, build_specs, data_format_of, term_specs, with_compiled_heads
from degen_train.losses.contract import LossTerm
from degen_train.models.backbone import model_family
from degen_train.models.compile import check_compile_available
from degen_train.optim.schedule import steps_past_the_schedule
from degen_train.run.config_alone import check_config_alone
from degen_train.run.sections import TrainerConfig
from degen_train.run.sweep import jobs_side_by_side


@dataclass
class RunPlan:
    """What the check stage found: the run's settings, checked, and what the later stages start from."""

    # the checked config, typed: the one form below the command line. Its sections go to the components as they are
    # (config.data, config.model, ...); what Hydra instantiates and the run records is its plain_settings()
    config: TrainConfig
    run_dir: Path
    terms: dict[str, TermSpec]  # the loss terms, checked and not built (``build_terms``)
    # encoder | decoder, and mlm | mlm_nsp | causal: told by the config's architecture, or ("") by the config.json of
    # the weights a model starts from (model.init_from), read at stage 2
    family: str
    data_format: str
    model_choice: str = "model"  # the model group's choice, named where a term does not fit the family
    # read by stage 2 (run/inputs.py: read_inputs)
    glue_tasks: list[Any] = field(default_factory=list)  # eval.glue's tasks, read
    branch: dict[str, Any] | None = None  # branch_from's parent and step
    checkpoint: Path | None = None  # what the run resumes from
    saved: dict[str, Any] = field(default_factory=dict)  # the checkpoint's own record
    finished: dict[str, Any] | None = None  # the summary of a run that finished before: nothing to do

    @property
    def weights(self) -> dict[str, float]:
        return {key: spec.weight for key, spec in self.terms.items()}

    def build_terms(self) -> dict[str, LossTerm]:
        """The loss terms, built afresh from their checked specs (stage 4, or a memory plan's fake step)."""
        return build_specs(self.terms)[0]

    @property
    def starting_branch(self) -> str | None:
        """branch_from's value when the run starts a new branch from its parent's checkpoint (its refusals then name
        the parent's file and say what a branch may change), None for a fresh run or a resume (a branch's own too)."""
        if self.branch is None or self.checkpoint != Path(self.branch["checkpoint"]):
            return None
        return str(self.config.branch_from)


def check(cfg: DictConfig, *, model_choice: str = "model",
          alone: TrainConfig | None = None) -> RunPlan:  # fmt: skip
    """Stage 1: the checked config and every fact the other stages need; raises naming the first problem found.
    ``alone``: what the command checked before the frameworks loaded (run/config_alone.py), taken as it is."""
    # checked once: from here on every listed key is present with its checked value (schema.py), and the typed
    # sections go down the stages (plan.config), never validated again
    # the DictConfig Hydra composed ends here: the stages below read the typed config, and its plain values where a
    # helper asks the settings as a mapping
    config = alone if alone is not None else check_config_alone(cfg)
    settings = config.plain_settings()
    run_dir = Path(str(config.run_dir))
    deterministic_environment(config.trainer.deterministic)  # before any CUDA work
    use_threads(config.threads, local_process_count(config.trainer) * jobs_side_by_side())  # a joblib sweep: N at once
    objective = with_compiled_heads(settings["objective"]) if config.model.compile_head else settings["objective"]
    # each term's options are checked here, the inputs they name read at stage 2; no term is built (stage 4)
    terms = term_specs({"objective": objective, "regularizer": settings.get("regularizer")}, checked=True)
    family = "" if config.model.init_from else model_family(config.model)  # init_from: its config.json, at stage 2
    data_format = data_format_of(terms, family) if family else ""  # the families: checked by the config alone
    plan = RunPlan(config, run_dir, terms, family, data_format, model_choice)
    if config.prepare_only or config.plan.only:  # the cache only, or nothing: no device to run on
        return plan
    check_hardware(config)
    check_schedule_and_data(config)
    return plan


def check_hardware(config: TrainConfig) -> None:
    """trainer.accelerator, model.compile, trainer.precision, the whole-model callbacks × strategy: what this
    machine can run."""
    check_accelerator_present(config.trainer, sizing_only=config.plan.only or config.prepare_only)
    if config.model.compile:
        check_compile_available("cuda" if config.trainer.accelerator in ("gpu", "cuda") else "cpu")
    settings = config.plain_settings()
    check_precision(settings)  # a precision this hardware emulates is refused here, not after hours of slow steps
    check_whole_model_callbacks(settings)


def check_whole_model_callbacks(settings: dict[str, Any]) -> None:
    """callbacks × strategy: the weight average keeps a whole copy of the model and the STS selection scores it
    whole between steps, where FSDP2 keeps it sharded (each callback's setup says so of a strategy built in Python)."""
    if "FSDP2" not in str((settings.get("strategy") or {}).get("_target_", "")):
        return
    callbacks = settings.get("callbacks") or {}
    if (callbacks.get("weight_averaging") or {}).get("kind"):
        raise ValueError(AVERAGING_FSDP2_REFUSAL)
    if (callbacks.get("best_by_sts") or {}).get("sts"):
        raise ValueError(BEST_BY_STS_FSDP2_REFUSAL)


def check_accelerator_present(trainer: TrainerConfig, *, sizing_only: bool) -> None:
    """trainer.accelerator names one of Lightning's accelerators, and (for a run, not a plan or a data-only job) one
    this machine has: refused in one line before the tokenizer, the data or the model are built (Lightning would say
    so after them, a GPU's as 'No supported gpu backend found!', a TPU's as a missing torch_xla)."""
    import torch
    from lightning.pytorch.accelerators import AcceleratorRegistry

    accelerator = str(trainer.accelerator or "auto")
    known = sorted({*AcceleratorRegistry.available_accelerators(), "gpu", "auto"})
    if accelerator not in known:
        raise ValueError(f"trainer.accelerator={accelerator!r} is not one of {', '.join(known)}")
    name = "cuda" if accelerator == "gpu" else accelerator
    if accelerator == "auto" or sizing_only or AcceleratorRegistry[name]["accelerator"].is_available():
        return
    if name != "cuda":
        raise ValueError(f"trainer.accelerator={accelerator}: this machine has no {accelerator} device that Lightning "
                         f"can use. Choose trainer=cpu (or trainer.accelerator=auto)")  # fmt: skip
    build = f"torch {torch.__version__}, " + (f"built for CUDA {torch.version.cuda}" if torch.version.cuda else
                                              "a CPU-only build")  # fmt: skip
    raise ValueError(
        f"trainer.accelerator={accelerator}: this machine has no CUDA device ({build}; torch.cuda.is_available() is "
        f"False). Choose trainer=cpu (or trainer.accelerator=auto), or run on a GPU node; debug=plan sizes a GPU run "
        f"here without one"
    )


def check_schedule_and_data(config: TrainConfig) -> None:
    """scheduler × trainer.max_steps, data.sources: a run past its schedule, a mixture's weights and labels."""
    past = steps_past_the_schedule(config.scheduler.model_dump(), config.trainer.max_steps)
    if past:  # e.g. a finished run resumed with a larger trainer.max_steps: it would train at rate 0
        raise ValueError(past)
    if config.data.sources:
        mixture_sources(config.data)  # weights, labels and keys checked before any corpus is read
        if config.data.overfit_batches:
            raise ValueError("data.overfit_batches overfits the batches of one corpus: not with data.sources")


