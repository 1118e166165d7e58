"""One pretraining run from a composed config: ``train(cfg)`` in six stages, check (run/checks.py: the config
alone), read (run/inputs.py: the files it names), prepare, build, fit and finish (the degen-train command, the sweeps,
make reproduce and the benchmarks all call it)."""

from __future__ import annotations

import logging
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hydra  # noqa: E402
import torch  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from degen_train.callbacks.best_sts import BestBySTS  # noqa: E402
from degen_train.callbacks.cadence import ClockCadence  # noqa: E402
from degen_train.callbacks.isotropy_monitor import IsotropyMonitor  # noqa: E402
from degen_train.callbacks.preemption import deferring_until_training, stopping_before_training  # noqa: E402
from degen_train.callbacks.throughput import Throughput  # noqa: E402
from degen_train.callbacks.weight_averaging import AVERAGE_PREFIX, WeightAverage  # noqa: E402
from degen_train.config.schema import TrainConfig  # noqa: E402
from degen_train.core.io import atomic_directory, atomic_write_json, atomic_write_text  # noqa: E402
from degen_train.core.own_runs import remember as remember_own_run  # noqa: E402
from degen_train.core.quiet import silence_known_noise  # noqa: E402
from degen_train.data.datamodule import (  # noqa: E402
    PreparedData,
    PretrainDataModule,
    describe_prepared,
    loader_workers,
    make_collator,
    prefetch_depth,
    prepare_data,
    tokenize_node_part,
)
from degen_train.data.mixture import mixture_seen  # noqa: E402
from degen_train.devices.threads import local_process_count  # noqa: E402
from degen_train.evaluation.export_probes import evaluate  # noqa: E402
from degen_train.finetune.grid import finetune_export  # noqa: E402
from degen_train.losses.accumulation import accumulation_warnings  # noqa: E402
from degen_train.losses.catalog import setup_terms  # noqa: E402
from degen_train.losses.contract import TermContext, WeightedSum, perplexity_source  # noqa: E402
from degen_train.models.backbone import Backbone, build_hf_model, shape_signature  # noqa: E402
from degen_train.run.build import build_trainer, on_gpu  # noqa: E402
from degen_train.run.checks import RunPlan, check  # noqa: E402
from degen_train.run.end_of_run_table import end_of_run_table, human, parameter_counts  # noqa: E402
from degen_train.run.export import export_pretrained  # noqa: E402
from degen_train.run.hub import push_export  # noqa: E402
from degen_train.run.inputs import check_w8a8_text, read_inputs  # noqa: E402
from degen_train.run.loggers import ClosingLogger, ResumingLogger  # noqa: E402
from degen_train.run.memory_plan import check_plan  # noqa: E402
from degen_train.run.module import PretrainModule  # noqa: E402
from degen_train.run.parallel import full_state_dict  # noqa: E402
from degen_train.run.provenance import run_provenance  # noqa: E402
from degen_train.run.resume import check_signature, check_tokenizer  # noqa: E402
from degen_train.run.startup_clock import StartupClock  # noqa: E402
from degen_train.run.sweep import swept_overrides  # noqa: E402
from degen_train.storage.runlock import is_launching_process, run_dir_lock  # noqa: E402

log = logging.getLogger("degen_train")


def train(cfg: DictConfig, *, alone: TrainConfig | None = None) -> dict[str, Any]:
    """Run one pretraining job; returns the summary written to RUN/summary.json. Six stages, each a function: check
    (the config alone: no file read, nothing written), read (the inputs it names, the run folder, what it resumes
    from), prepare (the data, cached), build (model, terms, trainer, the run's record), fit (train, then validate once
    more) and finish (summary, export, probes). ``alone``: the command's own check of the config
    (run/config_alone.py), done before the frameworks loaded."""
    silence_known_noise()  # also when train() is called from Python (tests, notebooks, benchmarks)
    clock = StartupClock()  # the log's "time to first step", by stage
    plan = check(cfg, model_choice=_choice("model"), alone=alone)  # 1. check
    read_inputs(plan)  # 2. read
    clock.mark("the check and the inputs read")
    if plan.config.plan.only:  # debug=plan: one step on fake tensors, printed; nothing prepared or written
        return check_plan(plan.config, plan.build_terms(), plan.weights, data_format=plan.data_format)
    if plan.config.prepare_only:
        with stopping_before_training(str(plan.config.data.cache_dir)):
            return prepare_only(plan)
    if plan.finished is not None:
        log.info("%s finished at step %d before: nothing to do (summary.json is kept)", plan.run_dir,
                 plan.finished["final_step"])  # fmt: skip
        return plan.finished
    with run_dir_lock(plan.run_dir) if is_launching_process() else nullcontext():
        with stopping_before_training(str(plan.config.data.cache_dir)):  # a signal while preparing: exit 75, say so
            data = prepare(plan)  # 3. prepare
            clock.mark("the data (tokenizer and examples, from the cache where built before)")
            built = build(plan, data)  # 4. build
            if built.trainer.is_global_zero:
                _write_run_record(plan, built)
            clock.mark("the build (model, terms, trainer, the run's record)")
            built.trainer.callbacks.append(clock)
            built.clock = clock
        train_metrics, val_metrics = fit(plan, built)  # 5. fit
        return finish(plan, built, train_metrics, val_metrics)  # 6. finish


def prepare_only(plan: RunPlan) -> dict[str, Any]:
    """Tokenizer and examples into data.cache_dir, then stop: a job prepares once (one node, or several waiting on
    the build lock), and every later run of the same data settings, each rank of each node, only memory-maps.
    With data.tokenize_part=K: this node's share of the documents only (node_parts.py)."""
    data_config, family, data_format = plan.config.data, plan.family, plan.data_format
    if data_config.tokenize_part is not None:
        return {"tokenized_part": _prepare_node_part(data_config, family=family, data_format=data_format)}
    data = prepare_data(data_config, family=family, data_format=data_format, seed=plan.config.seed)
    prepared = describe_prepared(data)
    shape = f"{family}, {data_format}, block {data_config.block_size}"
    lines = [f"prepared ({shape}); tokenizer: {prepared['tokenizer']}"]
    for split in ("train", "validation"):
        table = prepared[split]
        lines.append(
            f"  {split}: {table['examples']} examples, {table['tokens']} tokens, {table['bytes'] / 2**20:.1f} MiB in "
            f"{table['folder']}"
        )
    lines.append("runs with the same data settings, seed (for NSP pairs) and data.cache_dir read this cache")
    print("\n".join(lines))
    return {"prepared": prepared}


def _prepare_node_part(data_config: Any, *, family: str, data_format: str) -> dict[str, Any]:
    done = tokenize_node_part(data_config, family=family, data_format=data_format)
    shape = f"{family}, {data_format}"
    lines = [f"tokenized part {done['part']} of {done['parts']} ({shape}); tokenizer {done['tokenizer']}"]
    for split in ("train", "validation"):
        missing = done[split]["missing_parts"]
        waiting = f"parts still to come: {missing}" if missing else "all parts are in the cache"
        lines.append(f"  {split}: {done[split]['documents']} documents in {done[split]['part']} ({waiting})")
    lines.append("once every part is there, a run (or prepare_only=true without data.tokenize_part) packs the examples "
                 "from them")  # fmt: skip
    print("\n".join(lines))
    return done


@dataclass
class Built:
    """What phase 2 builds for the others: the data, the model with its terms, the trainer, the run's record."""

    data: Any
    module: PretrainModule
    datamodule: PretrainDataModule
    trainer: Any
    record: dict[str, Any]
    clock: StartupClock | None = None


def prepare(plan: RunPlan) -> PreparedData:
    """3. The data (corpus, tokenizer, examples: cached). A resumed run keeps the tokenizer it trained with."""
    own = plan.run_dir / "tokenizer"
    reuse = plan.checkpoint is not None and not plan.config.data.tokenizer.path and (own / "tokenizer.json").is_file()
    data = prepare_data(plan.config.data, family=plan.family, data_format=plan.data_format, seed=plan.config.seed,
                        run_tokenizer=own if reuse else None)  # fmt: skip
    if plan.config.eval.w8a8:  # its length needs the tokenizer: checked now, not after training
        check_w8a8_text(plan.config, data.tokenizer, plan.family)
    return data


def build(plan: RunPlan, data: PreparedData) -> Built:
    """4. The model and its terms, the loader, the trainer, and the run's record."""
    config = plan.config
    module = build_module(config, data, plan.build_terms(), plan.weights, family=plan.family,
                          with_nsp_head=plan.data_format == "mlm_nsp")  # fmt: skip
    for warning in accumulation_warnings(module.loss.terms, plan.weights, config.trainer.accumulate_grad_batches):
        log.warning(warning)  # what accumulation cannot give a term that mixes samples, said before the first step
    if plan.checkpoint is not None:  # only the built model knows its vocabulary size
        check_signature(plan.checkpoint, plan.saved.get("signature"), module.checkpoint_identity["signature"],
                        branch_from=plan.starting_branch)  # fmt: skip
        check_tokenizer(plan.checkpoint, plan.saved, data.tokenizer, branch_from=plan.starting_branch)
    collator = make_collator(
        data.tokenizer, data_format=plan.data_format, masking=config.masking, vocab_size=len(data.tokenizer)
    )
    gpu, local_processes = on_gpu(config.trainer), local_process_count(config.trainer)
    workers = loader_workers(config.data.num_workers, on_gpu=gpu, local_processes=local_processes)
    prefetch = prefetch_depth(config.data.prefetch, on_gpu=gpu, training_threads=torch.get_num_threads(),
                              local_processes=local_processes)  # fmt: skip
    if workers == 0:
        log.info("data.prefetch=%s: %s", config.data.prefetch, f"{prefetch} training batches made ahead on a "
                 "background thread" if prefetch else "batches collated on the training thread")  # fmt: skip
    datamodule = PretrainDataModule(
        data,
        collator,
        batch_size=config.data.batch_size,
        num_workers=workers,
        seed=config.seed,
        pin_memory=gpu,
        overfit_batches=config.data.overfit_batches,
        window_counter=module.loss.window_counts,
        prefetch=prefetch,
    )
    trainer = build_trainer(config)
    settings = config.plain_settings()  # what the run records: the typed config's plain values
    record = run_provenance(settings, corpus=data.corpus, tokenizer=data.tokenizer, world_size=trainer.world_size)
    module.provenance = record
    module.source_labels = [t.label for t in data.sources]
    for logger in trainer.loggers:  # the resolved config and the swept values, e.g. as wandb run config
        logger.log_hyperparams({"config": settings, "swept": swept_overrides()})
    return Built(data, module, datamodule, trainer, record)


def finish(plan: RunPlan, built: Built, train_metrics: dict, val_metrics: dict) -> dict[str, Any]:
    """6. The summary; rank 0: the export, its upload, the probes and GLUE, summary.json and the end-of-run table."""
    config = plan.config
    summary = _summary(config, built.trainer, train_metrics, val_metrics, terms=built.module.loss.terms,
                       weights=plan.weights)  # fmt: skip
    _add_run_facts(config, summary, built, plan.branch)
    summary["time_to_first_step_s"] = built.clock.time_to_first_step if built.clock is not None else None
    if summary["val_perplexity"] is not None:  # every process: the record gathers their batches
        validation = built.module.validation_items.record()
        if validation is not None:
            summary["items"] = {"val_perplexity": validation}
    gathered_weights = full_state_dict(built.module.backbone.model) if config.export_hf else None  # FSDP2: all ranks
    if built.trainer.is_global_zero:
        if config.export_hf:
            _export_and_probe(config, plan.run_dir, plan.family, built, summary, plan.glue_tasks, gathered_weights)
        _finish(plan.run_dir, built.trainer, summary)
    return summary


def _write_run_record(plan: RunPlan, built: Built) -> None:
    """The run folder's tokenizer (degen-convert --hf reads it), resolved config and this segment's config."""
    run_dir, settings = plan.run_dir, plan.config.plain_settings()
    with atomic_directory(run_dir / "tokenizer", replace=True) as staging:
        built.data.tokenizer.save_pretrained(str(staging))
    atomic_write_json(run_dir / "config.json", settings)
    atomic_write_json(run_dir / "overrides.json", swept_overrides())
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(settings))  # the latest segment's
    remember_own_run(run_dir, built.record["run_id"])  # degen-report trusts this config.yaml, by its hash (own_runs.py)
    history = run_dir / "config_history" / f"from_step_{int(plan.saved.get('global_step', 0)):08d}.yaml"
    history.parent.mkdir(exist_ok=True)
    atomic_write_text(history, OmegaConf.to_yaml(settings))  # every segment's, never overwritten


def fit(plan: RunPlan, built: Built) -> tuple[dict, dict]:
    """5. Train, then validate once more; (the last train metrics, the final validation's)."""
    config, checkpoint = plan.config, plan.checkpoint
    trainer, module = built.trainer, built.module
    if plan.branch is not None and checkpoint == Path(plan.branch["checkpoint"]):  # a new branch: where it starts
        plan.branch["validation"] = _validated_start(built, checkpoint)
    with deferring_until_training():  # a signal before the first update: kept for the Preemption callback
        trainer.fit(module, datamodule=built.datamodule, ckpt_path=str(checkpoint) if checkpoint else None)
    train_metrics = {**module.last_train_metrics, **trainer.callback_metrics}
    train_metrics = {k: float(v) for k, v in train_metrics.items()}
    val_metrics = {}
    changed = [type(c).__name__ for c in trainer.callbacks if getattr(c, "changed_weights", False)]
    if config.final_validation and module.validated_at == trainer.global_step and not changed:
        # the last periodic validation scored these very weights at this very step: its numbers are the final ones
        # (issue 67.5: the final validation repeated it, 20% of a researcher's 300-step run)
        val_metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(VALIDATION_KEYS)}
        for logger in trainer.loggers:  # its row, stamped as the final validation's (the report's curves read it)
            if isinstance(logger, ResumingLogger):
                logger.drop_validation_rows_from(trainer.global_step)
            logger.log_metrics({**val_metrics, "epoch": trainer.current_epoch}, step=trainer.global_step)
            logger.save()
        shown = ", ".join(f"{k} {v:.4f}" for k, v in sorted(val_metrics.items()) if k.count("/") == 1)
        log.info("final validation at step %d: %s (the periodic validation's: these weights, unchanged since)",
                 trainer.global_step, shown)  # fmt: skip
    elif config.final_validation:
        for logger in trainer.loggers:  # a run killed after its final validation logged it once already
            if isinstance(logger, ResumingLogger):
                logger.drop_validation_rows_from(trainer.global_step)
        # Lightning stamps validation rows with this counter; a checkpoint taken at the last step holds it one
        # short, so a run resumed there would log its final validation a step early (tests/faults/test_kills.py).
        trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step
        val_metrics = trainer.validate(module, datamodule=built.datamodule, verbose=False)[0]
    return train_metrics, val_metrics


VALIDATION_KEYS = ("val/", "val_average/")  # what a validation logs (val_average: a weight average beside the model)


def _validated_start(built: Built, checkpoint: Path) -> dict[str, float]:
    """The parent's weights at the branch step, validated as the branch validates (its loggers left out: the branch's
    curve starts at its own first validation): the branch table's parent row, whatever the parent's own cadence."""
    trainer = built.trainer
    loggers, trainer.loggers = trainer.loggers, []
    try:
        metrics = trainer.validate(built.module, datamodule=built.datamodule, ckpt_path=str(checkpoint), verbose=False)
    finally:
        trainer.loggers = loggers
    return {key: float(value) for key, value in (metrics[0] if metrics else {}).items()}


def _add_run_facts(config: TrainConfig, summary: dict, built: Built, branch: dict[str, Any] | None) -> None:
    """What the summary adds beyond the metrics: sizes, a mixture's shares, the branch and the provenance."""
    trainer = built.trainer
    summary["parameters"] = parameter_counts(built.module.backbone.model)
    backbone = built.module.backbone
    summary["vocabulary"] = backbone.model.get_input_embeddings().num_embeddings  # the model's rows (padding too)
    summary["tokenizer_vocabulary"] = backbone.vocabulary  # the entries it predicts
    for callback in trainer.callbacks:  # callbacks.cadence: the updates its minutes became in this segment
        if isinstance(callback, ClockCadence) and callback.chosen:
            summary["cadence"] = callback.chosen
    if built.data.sources:  # the proportions the run's batches held, beside the weights asked for
        summary["data_mixture"] = mixture_seen(built.data.sources, config.data.batch_size * trainer.world_size,
                                               config.seed, trainer.global_step * trainer.accumulate_grad_batches)
    if branch is not None:  # provenance: the parent run and the step it was branched at
        summary["branched_from"] = branch
    summary["provenance"] = {k: v for k, v in built.record.items() if k != "config"}  # the config: summary["config"]


def _export_and_probe(
    config: TrainConfig, run_dir: Path, family: str, built: Built, summary: dict, glue_tasks: list,
    gathered_weights: dict | None,
) -> None:  # fmt: skip
    """Rank 0: RUN/hf, its upload when asked, the probes (STS, WiC, W8A8) and GLUE after fine-tuning."""
    hf = run_dir / "hf"
    export_pretrained(built.module.backbone.model, built.data.tokenizer, hf, record=built.record,
                      state_dict=gathered_weights)  # fmt: skip
    if config.push_to_hub.repo_id:
        summary["push_to_hub"] = push_export(hf, config.push_to_hub)
    probes = family == "encoder" and (config.eval.sts or config.eval.wic)
    from degen_train.metrics.decoding import DecodingSettings

    generation = {"text": config.eval.generate, "limit": int(config.eval.generate_prompts),
                  "prefix_tokens": int(config.eval.generate_prefix_tokens),
                  "new_tokens": int(config.eval.generate_new_tokens), "decodings": list(config.eval.generate_decodings),
                  "settings": DecodingSettings(end_of_text=str(config.eval.generate_end_of_text)),
                  "featurizer": config.eval.featurizer, "coherence_encoder": config.eval.coherence_encoder,
                  "coherence_model": config.eval.coherence_model} if config.eval.generate else None  # fmt: skip
    lm_eval = {"tasks": list(config.eval.lm_eval), "include_path": config.eval.lm_eval_include,
               "limit": config.eval.lm_eval_limit} if config.eval.lm_eval else None  # fmt: skip
    if probes or config.eval.w8a8 or generation or lm_eval:
        summary["eval"] = evaluate(
            hf,
            sts=list(config.eval.sts) if probes else [],
            wic=config.eval.wic if probes else None,
            wic_fit=config.eval.wic_fit if probes else None,
            sts_whitening_fit=list(config.eval.sts_whitening_fit) if probes else [],
            out=run_dir / "eval",
            layer=config.eval.layer,
            pooling=config.eval.pooling,
            w8a8=config.eval.w8a8,
            generation=generation,
            lm_eval=lm_eval,
        )
    if glue_tasks:  # fine-tuned copies of the export, scored on GLUE dev (RUN/glue/, resumable)
        settings = config.eval.finetune.model_dump(by_alias=True, mode="json")
        summary["glue"] = finetune_export(hf, glue_tasks, settings, run_dir / "glue")


def _finish(run_dir: Path, trainer: Any, summary: dict) -> None:
    """Rank 0: summary.json, the loggers closed with it (wandb: an offline run is closed and syncable), the table."""
    atomic_write_json(run_dir / "summary.json", summary)
    for logger in trainer.loggers:
        if isinstance(logger, ClosingLogger):
            logger.close_run(summary)
    log.info("run finished:\n%s", end_of_run_table(summary, run_dir, swept_overrides()))


def build_module(
    config: TrainConfig, data: Any, terms: dict, weights: dict, *, family: str, with_nsp_head: bool
) -> PretrainModule:
    """The HF model (seeded), its terms set up against it, and the LightningModule around both, from the typed
    sections the check stage validated (config.model goes to the model's build as it is, never validated again)."""
    torch.manual_seed(config.seed)
    hf_model = build_hf_model(
        config.model, tokenizer=data.tokenizer, with_nsp_head=with_nsp_head, sequence_length=config.data.block_size
    )
    backbone = Backbone(hf_model)
    setup_terms(
        terms,
        TermContext(
            hidden_size=hf_model.config.hidden_size,
            vocab_size=backbone.vocabulary,  # the tokenizer's V: a term's per-token tables leave padding out
            batch_size=config.data.batch_size,
            backbone=backbone,
            block_size=config.data.block_size,
        ),
    )
    counts = parameter_counts(hf_model)
    log.info(
        "model: %s, %s parameters (%s embedding, %s non-embedding)",
        type(hf_model).__name__,
        *(human(counts[k]) for k in ("total", "embeddings", "non_embedding")),
    )
    head = hf_model.get_output_embeddings()
    if head is not None and head.weight.numel() > counts["total"] / 2:  # issue 65.6: 3.9M of a 4.4M-parameter model
        entries = head.weight.shape[0]
        smaller = "; conf/reproduce.yaml trains the tiny models at 8,000" if entries > 8000 else ""
        log.warning(
            "the output head holds %s of the model's %s parameters (%.0f%%): at this size the vocabulary "
            "(data.tokenizer.vocab_size, %d entries) sets the step's cost more than the model does%s",
            human(head.weight.numel()), human(counts["total"]), 100 * head.weight.numel() / counts["total"], entries,
            smaller)  # fmt: skip
    settings = config.plain_settings()
    identity = {
        "model": config.model.model_dump(by_alias=True, mode="json"),
        "terms": list(terms),
        "signature": shape_signature(hf_model),
        # What degen-convert needs to rebuild the HF model from the weights alone (plain values, no code).
        "hf_class": type(hf_model).__name__,
        "hf_config": hf_model.config.to_diff_dict() | {"model_type": hf_model.config.model_type},
    }
    return PretrainModule(
        backbone,
        WeightedSum(terms, weights),
        optimizer_factory=hydra.utils.instantiate(settings["optimizer"]),  # the given keys: the constructor's
        scheduler_factory=hydra.utils.instantiate(settings["scheduler"]),
        seed=config.seed,
        checkpoint_identity=identity,
        compile_model=config.model.compile,  # applied with FSDP2 in configure_model (parallel.parallelize)
        activation_checkpointing=config.model.activation_checkpointing,  # applied there too, first
    )


def _summary(
    config: TrainConfig, trainer: Any, train_metrics: dict, val_metrics: dict, *, terms: dict, weights: dict
) -> dict:
    """What the run measured, each number named for what it is."""
    throughput = next((c for c in trainer.callbacks if isinstance(c, Throughput)), None)
    isotropy = next((c.latest for c in trainer.callbacks if isinstance(c, IsotropyMonitor)), {})
    selection = next((c.summary() for c in trainer.callbacks if isinstance(c, BestBySTS)), None)
    averaging = next((c.summary() for c in trainer.callbacks if isinstance(c, WeightAverage)), None)
    source = perplexity_source(terms)
    token_loss = val_metrics.get(f"val/{source}") if source else None
    if averaging and f"{AVERAGE_PREFIX}/loss" in val_metrics:  # validated beside the trained model
        average_token_loss = val_metrics.get(f"{AVERAGE_PREFIX}/{source}") if source else None
        averaging["val_loss"] = val_metrics[f"{AVERAGE_PREFIX}/loss"]
        averaging["val_perplexity"] = (math.exp(average_token_loss) if average_token_loss is not None
                                       and average_token_loss < 50 else None)  # fmt: skip
    return {
        "final_step": trainer.global_step,
        "train_loss": train_metrics.get("train/loss"),
        "val_loss": val_metrics.get("val/loss"),
        "val_loss_is": " + ".join(f"{weights[k]:g}·{k}" for k in terms if weights[k]),
        # exp of one term's token loss (named here), never of val_loss, which adds the regularizers.
        "val_perplexity": math.exp(token_loss) if token_loss is not None and token_loss < 50 else None,
        "val_perplexity_of": source,
        "val_terms": {k: val_metrics.get(f"val/{k}/loss") for k in terms},
        "train_terms": {k: train_metrics.get(f"train/{k}/loss") for k in terms},  # the last step's, unweighted
        "paper_metrics": {
            f"{k}/{m}": val_metrics.get(f"val/{k}/{m}") for k, t in terms.items() for m in t.paper_metrics
        },
        "val_metrics": {k: float(v) for k, v in val_metrics.items()},
        **(throughput.summary(trainer.world_size) if throughput else {"tokens_per_s": None}),
        "isotropy": isotropy,
        **({"best_by_sts": selection} if selection else {}),
        **({"weight_averaging": averaging} if averaging else {}),
        "config": config.plain_settings(),
    }


def _choice(group: str) -> str:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return str(HydraConfig.get().runtime.choices.get(group, group))
    return group
