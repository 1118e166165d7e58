"""terms: each regularizer at the best row (CosReg; TaCL, its teacher compiled; COCO-LM, its generator compiled;
SimCTG; SimCSE last, the one the budget leaves out first): its step time over the plain row's, beside its total FLOPs
over model FLOPs, so that a term's cost reads against the work it adds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import corpus_overrides
from bench.gpu.plan import Run
from bench.gpu.runs import ON_CPU, Context, Workload, step_time, trainer_overrides
from degen_train.config import load_config


def teacher_run(folder: Path, work: Workload, data: list[str]) -> dict[str, Any]:
    """TaCL's teacher and SimCSE's start: a BERT-base MLM+NSP of two steps at the best row's shape and vocabulary
    (its speed only)."""
    from degen_train.run.pretrain import train

    model = ["model=tiny"] if ON_CPU else []
    cfg = load_config([*corpus_overrides(), "recipe=bert_mlm_nsp", f"speed={work.speed}", *model,
                       *trainer_overrides(), *data, "model.compile=false", "model.compile_head=false",
                       "trainer.max_steps=2", f"data.block_size={work.length}", f"data.batch_size={work.batch}",
                       "logger=csv", "trainer.enable_progress_bar=false"], run_dir=folder)  # fmt: skip
    train(cfg)
    return {"teacher": str(folder)}


def runs(ctx: Context) -> list[Run]:
    teacher = ctx.scratch / "teacher"
    return [
        Run("terms", "tacl_teacher", "bert", False, 2,
            lambda: teacher_run(teacher, ctx.work["bert"], ctx.data["bert"])),  # fmt: skip
        ctx.ours_run("terms", "cosreg", "bert", "regularizer=cosreg"),
        ctx.ours_run("terms", "tacl", "bert", "recipe=tacl", f"teacher={teacher}", scale=2.2),
        ctx.ours_run("terms", "coco_lm", "bert", "recipe=coco_lm", scale=2.2),
        ctx.ours_run("terms", "simctg", "gpt2", "recipe=simctg", scale=1.3),
        ctx.ours_run("terms", "simcse", "bert", "recipe=simcse", f"start={teacher}", scale=8.0),  # 7.93× on 2026-11-26
    ]


def compare(rows: dict[str, Any], results: dict[str, Any]) -> None:
    best = results.get("rows", {}).get("best", {})
    for name, row in rows.items():
        base = best.get("gpt2_ours" if name == "simctg" else "bert_ours", {})
        if step_time(row) and step_time(base) and row.get("total_flops_over_model_flops"):
            flops = row["total_flops_over_model_flops"] / (base.get("total_flops_over_model_flops") or 1.0)
            row["vs"] = f"{step_time(row) / step_time(base):.2f}× the step time at {flops:.2f}× the FLOPs"
