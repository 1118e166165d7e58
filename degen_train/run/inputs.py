"""Stage 2 of a run: the files its config names, read before any data is prepared or anything written.

The check stage (run/checks.py) named them without reading any: each field whose role is ``input`` (core/roles.py).
Here each is read in the order a user meets them: each loss term's inputs (TaCL's teacher: its ``check_inputs``), the
weights the model starts from (``model.init_from``'s config.json: the model's family), then for a run (not a plan,
not prepare_only) the evaluations' files at its end (STS, WiC, W8A8 and generation text, the lm-eval tasks, GLUE's
tasks), the run folder it writes, and what it resumes or branches from (a checkpoint, a parent run). A typo fails
here, in one line naming the key, before hours of training.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from degen_train.config.role_lookup import inputs_named
from degen_train.config.schema import TrainConfig
from degen_train.core.handed_files import printable
from degen_train.core.paths import check_output_folder, refuse_links_in
from degen_train.finetune.grid import protocol_from
from degen_train.finetune.tasks import load_glue_task
from degen_train.losses.catalog import data_format_for
from degen_train.metrics.perplexity import read_documents
from degen_train.metrics.probes import read_sts, read_wic
from degen_train.models.backbone import model_family
from degen_train.run.branching import BRANCH_MAY_CHANGE, branch_changes, start_branch
from degen_train.run.checks import RunPlan
from degen_train.run.hub import check_push
from degen_train.run.resume import (
    RESUME_CHOICES,
    check_checkpoint_matches,
    check_resume,
    finished_summary,
    resolve_checkpoint,
)
from degen_train.storage.checkpoints import refuse_lightning_hpc_checkpoints
from degen_train.storage.runlock import refuse_writes_into_other_runs

log = logging.getLogger("degen_train")


def read_inputs(plan: RunPlan) -> None:
    """Stage 2: every input the config names, read and checked; fills the plan's family and data format where the
    model starts from weights, and for a run (not a plan, not prepare_only) its glue_tasks, branch, checkpoint, saved
    and finished. Raises naming the first problem found; writes nothing."""
    config = plan.config
    for spec in plan.terms.values():  # first: a recipe's teacher is also the weights its model starts from
        spec.check_inputs()
    if not plan.family:  # model.init_from: the architecture its config.json names
        plan.family = model_family(config.model)
        plan.data_format = data_format_for(plan.terms, plan.family, plan.model_choice)
    if config.prepare_only or config.plan.only:  # the cache only, or nothing: no run folder to read
        return
    plan.glue_tasks = check_inputs(config, plan.family)
    check_folders(config, plan.run_dir)
    check_resume_or_branch(plan)


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
