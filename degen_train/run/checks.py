"""Stage 1 of a run: everything the config alone can tell, before any data, weights or file is touched.

``check(cfg)`` validates the config against the typed schema once (config/schema.py), then asks each section the
questions only its component can answer, in the order a user meets them: the losses, the hardware, the inputs the
run reads, the schedule, the folders it writes, and what it resumes or branches from. It returns a ``RunPlan``: the
checked config, typed (the one form below the command line: the DictConfig Hydra composed ends here), and every fact
the later stages need. Nothing is written; a failure is one message naming the key and what to do.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from degen_train.callbacks.weight_averaging import check_weight_averaging_fits
from degen_train.config.role_lookup import inputs_named
from degen_train.config.schema import TrainConfig
from degen_train.core.handed_files import printable
from degen_train.core.paths import check_output_folder, refuse_links_in
from degen_train.data.mixture import mixture_sources
from degen_train.devices.determinism import deterministic_environment
from degen_train.devices.precision import check_precision
from degen_train.devices.threads import local_process_count, use_threads
from degen_train.finetune.grid import protocol_from
from degen_train.finetune.tasks import load_glue_task
from degen_train.losses.catalog import TermSpec, build_specs, data_format_for, term_specs, with_compiled_heads
from degen_train.losses.contract import LossTerm
from degen_train.metrics.perplexity import read_documents
from degen_train.metrics.probes import read_sts, read_wic
from degen_train.models.backbone import model_family
from degen_train.models.compile import check_compile_available
from degen_train.optim.schedule import steps_past_the_schedule
from degen_train.run.branching import BRANCH_MAY_CHANGE, branch_changes, start_branch
from degen_train.run.config_alone import check_config_alone
from degen_train.run.hub import check_push
from degen_train.run.resume import (
    RESUME_CHOICES,
    check_checkpoint_matches,
    check_resume,
    finished_summary,
    resolve_checkpoint,
)
from degen_train.run.sections import TrainerConfig
from degen_train.run.sweep import jobs_side_by_side
from degen_train.storage.checkpoints import refuse_lightning_hpc_checkpoints
from degen_train.storage.runlock import refuse_writes_into_other_runs

log = logging.getLogger("degen_train")


@dataclass
class RunPlan:
    """What the check stage found: the run's settings, checked, and what the later stages start from."""

    # the checked config, typed: the one form below the command line. Its sections go to the components as they are
    # (config.data, config.model, ...); what Hydra instantiates and the run records is its plain_settings()
    config: TrainConfig
    run_dir: Path
    terms: dict[str, TermSpec]  # the loss terms, checked and not built (``build_terms``)
    family: str  # encoder | decoder
    data_format: str  # mlm | mlm_nsp | causal
    glue_tasks: list[Any] = field(default_factory=list)  # eval.glue's tasks, read
    branch: dict[str, Any] | None = None  # branch_from's parent and step
    checkpoint: Path | None = None  # what the run resumes from
    saved: dict[str, Any] = field(default_factory=dict)  # the checkpoint's own record
    finished: dict[str, Any] | None = None  # the summary of a run that finished before: nothing to do

    @property
    def weights(self) -> dict[str, float]:
        return {key: spec.weight for key, spec in self.terms.items()}

    def build_terms(self) -> dict[str, LossTerm]:
        """The loss terms, built afresh from their checked specs (stage 3, or a memory plan's fake step)."""
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
    # each term's options and the inputs they name are checked here; no term is built (stage 3 builds them)
    terms = term_specs({"objective": objective, "regularizer": settings.get("regularizer")}, checked=True)
    family = model_family(config.model)
    data_format = data_format_for(terms, family, model_choice)
    plan = RunPlan(config, run_dir, terms, family, data_format)
    if config.prepare_only or config.plan.only:  # the cache only, or nothing: no run folder to check
        return plan
    check_hardware(config)
    plan.glue_tasks = check_inputs(config, family)
    check_schedule_and_data(config)
    check_folders(config, run_dir)
    check_resume_or_branch(plan)
    return plan


def check_hardware(config: TrainConfig) -> None:
    """trainer.accelerator, model.compile, trainer.precision, callbacks.weight_averaging × strategy: what this
    machine can run."""
    check_accelerator_present(config.trainer, sizing_only=config.plan.only or config.prepare_only)
    if config.model.compile:
        check_compile_available("cuda" if config.trainer.accelerator in ("gpu", "cuda") else "cpu")
    settings = config.plain_settings()
    check_precision(settings)  # a precision this hardware emulates is refused here, not after hours of slow steps
    check_weight_averaging_fits(settings.get("callbacks"), settings.get("strategy"))


def check_accelerator_present(trainer: TrainerConfig, *, sizing_only: bool) -> None:
    """trainer.accelerator=gpu (trainer=gpu) on a machine without a CUDA device is refused in one line, before the
    tokenizer, the data or the model are built (Lightning would say 'No supported gpu backend found!' after them).
    A plan (debug=plan) and a data-only job (prepare_only=true) need no device and pass."""
    import torch

    accelerator = str(trainer.accelerator or "auto")
    if accelerator not in ("gpu", "cuda") or torch.cuda.is_available():
        return
    if sizing_only:
        return
    build = f"torch {torch.__version__}, " + (f"built for CUDA {torch.version.cuda}" if torch.version.cuda else
                                              "a CPU-only build")  # fmt: skip
    raise ValueError(
        f"trainer.accelerator={accelerator}: this machine has no CUDA device ({build}; torch.cuda.is_available() is "
        f"False). Choose trainer=cpu (or trainer.accelerator=auto), or run on a GPU node; debug=plan sizes a GPU run "
        f"here without one"
    )


def check_inputs(config: TrainConfig, family: str) -> list[Any]:
    """eval, push_to_hub: the files the run will read at its end, read now (a typo fails before training, not
    after); returns eval.glue's tasks, read and checked."""
    for path in config.eval.sts:
        read_sts(path)
    for path in config.eval.sts_whitening_fit:
        read_sts(path, scored=False)
    for wic in (config.eval.wic, config.eval.wic_fit):
        if wic:
            read_wic(wic)
    if config.eval.w8a8:  # too short for any tokenizer (a token covers at least a character): refused before data
        check_w8a8_text(config, None, family)
    generates = {"eval.generate": config.eval.generate, "eval.lm_eval": list(config.eval.lm_eval)}
    asked = [key for key, value in generates.items() if value]
    if asked and family != "decoder":
        raise ValueError(f"{' and '.join(asked)} measure a decoder's generations; this run's model is an {family}: "
                         f"leave them out, or train a decoder (model=gpt2_tiny, objective=mle)")  # fmt: skip
    if config.eval.generate:
        from degen_train.metrics.perplexity import read_documents

        read_documents(config.eval.generate, "line", what="eval.generate text")
        length = config.eval.generate_prefix_tokens + config.eval.generate_new_tokens
        if length > config.model.max_position:
            raise ValueError(f"eval.generate_prefix_tokens + eval.generate_new_tokens = {length} tokens is longer than "
                             f"model.max_position={config.model.max_position}: give fewer, e.g. "
                             f"eval.generate_new_tokens={max(1, config.model.max_position - 32)}")  # fmt: skip
    if config.eval.lm_eval:  # the harness's task index read now: a misspelt task fails before training
        from degen_train.evaluation.lm_eval_tasks import checked_tasks

        checked_tasks(list(config.eval.lm_eval), config.eval.lm_eval_include, key="eval.lm_eval",
                      include_key="eval.lm_eval_include")  # fmt: skip
    check_push(config.push_to_hub)
    if not config.eval.glue:  # needs export_hf and eval.glue_dir: checked in schema.py
        return []
    protocol_from(config.eval.finetune.model_dump(by_alias=True, mode="json"))
    return [load_glue_task(name, config.eval.glue_dir) for name in config.eval.glue]


def check_schedule_and_data(config: TrainConfig) -> None:
    """scheduler × trainer.max_steps, data.sources: a run past its schedule, a mixture's weights and labels."""
    past = steps_past_the_schedule(config.scheduler.model_dump(), config.trainer.max_steps)
    if past:  # e.g. a finished run resumed with a larger trainer.max_steps: it would train at rate 0
        raise ValueError(past)
    if config.data.sources:
        mixture_sources(config.data)  # weights, labels and keys checked before any corpus is read
        if config.data.overfit_batches:
            raise ValueError("data.overfit_batches overfits the batches of one corpus: not with data.sources")


def check_folders(config: TrainConfig, run_dir: Path) -> None:
    """run_dir and where the run writes: a folder that can be one, holding no links, not inside another run."""
    check_output_folder(run_dir, "run_dir")
    refuse_links_in(run_dir)  # a resumed folder is written and appended to: only its own regular files
    refuse_writes_into_other_runs(config.plain_settings(), run_dir)
    refuse_lightning_hpc_checkpoints(run_dir)


def check_resume_or_branch(plan: RunPlan) -> None:
    """ckpt_path, branch_from: what the run starts from, and that its settings continue that run."""
    config = plan.config
    plan.branch = start_branch(config, plan.run_dir)  # branch_from=RUN@STEP: the parent's checkpoint and tokenizer
    settings = config.plain_settings()  # after the branch pointed the config at its parent
    plan.finished = finished_summary(plan.run_dir, settings) if config.ckpt_path in RESUME_CHOICES else None
    if plan.finished is not None:
        return
    plan.checkpoint = resolve_checkpoint(config.ckpt_path, plan.run_dir)
    if plan.checkpoint is None:
        return
    branch_from = plan.starting_branch
    header = check_checkpoint_matches(plan.checkpoint, config.model, list(plan.terms), branch_from=branch_from)
    plan.saved = {**header["degen_train"], "global_step": header.get("global_step", 0)}
    recorded = (plan.saved.get("provenance") or {}).get("config")
    free = BRANCH_MAY_CHANGE if plan.branch else ()
    changes = check_resume(recorded, settings, plan.checkpoint, also_free=free, branch_from=branch_from)
    if branch_from is not None:  # its parent plus these
        inputs = inputs_named(settings)
        log.info("branch of %s@%s reads: %s", plan.branch["run"], plan.branch["step"], printable("; ".join(inputs)))
        changes = branch_changes(changes)
        what = f"branch of {plan.branch['run']}@{plan.branch['step']}: the parent's settings"
        log.info("%s, with %s", what, f"{len(changes)} change(s):\n  " + "\n  ".join(changes) if changes else
                 "no change")  # fmt: skip
    else:
        for change in changes:
            log.warning("resume changes %s (recorded in config_history/)", change)


def check_w8a8_text(config: TrainConfig, tokenizer: Any, family: str) -> None:
    """eval.w8a8's text holds enough blocks for the probe the export will get (degen-eval --w8a8's settings)."""
    import dataclasses

    from degen_train.metrics.quantization import SETTINGS
    from degen_train.metrics.w8a8_probe import enough_blocks, enough_tokens

    documents = read_documents(config.eval.w8a8, what="eval.w8a8 text file")
    settings = SETTINGS["decoder" if family == "decoder" else "encoder"]
    settings = dataclasses.replace(settings, block=min(settings.block, config.model.max_position))
    try:
        if tokenizer is None:  # at most one token per character, plus one per document: an upper bound
            enough_tokens(sum(map(len, documents)) + len(documents), settings=settings)
        else:
            enough_blocks(tokenizer, documents, decoder=family == "decoder", settings=settings)
    except ValueError as error:
        raise ValueError(f"eval.w8a8={config.eval.w8a8}: {error}") from None
