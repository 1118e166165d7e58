"""exactness: in the default mode and with trainer.deterministic=true, BERT-base MLM 128 × 128 at the defaults:
max |Δw| between two repeats and between a 20 + 20 resume and a straight 40-step run, and the deterministic mode's
cost in tokens/s (a question only a card answers: the CPU tests hold both to their tolerances)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bench.gpu.plan import Run
from bench.gpu.runs import Context, ours, plain_shapes, steady
from degen_train.metrics.steady import WARMUP_STEPS
from degen_train.storage.checkpoints import load_checkpoint_file

MODES = ("default", "deterministic")


def weight_difference(a: Path, b: Path) -> float:
    first = load_checkpoint_file(a / "checkpoints" / "last.ckpt")["state_dict"]
    second = load_checkpoint_file(b / "checkpoints" / "last.ckpt")["state_dict"]
    return max(float((first[k].float() - second[k].float()).abs().max()) for k in first if first[k].is_floating_point())


def measured(scratch: Path, mode: str) -> dict[str, Any]:
    model, batch, length = plain_shapes()["bert"]
    base = ["recipe=bert_mlm", *steady(model, batch, length, 40), "callbacks.checkpoint.every_n_train_steps=20",
            f"trainer.deterministic={'true' if mode == 'deterministic' else 'false'}"]  # fmt: skip
    folders = {run: scratch / f"{mode}_{run}" for run in ("a", "b", "resumed")}
    first = ours(folders["a"], *base, keep=True)
    ours(folders["b"], *base, keep=True)
    ours(folders["resumed"], *base, "trainer.max_steps=20", f"scheduler.total_steps={WARMUP_STEPS + 40}", keep=True)
    ours(folders["resumed"], *base, "ckpt_path=last", keep=True)
    result = {**first, "repeat_max_abs_diff": weight_difference(folders["a"], folders["b"]),
              "resume_max_abs_diff": weight_difference(folders["a"], folders["resumed"])}  # fmt: skip
    for folder in folders.values():
        shutil.rmtree(folder, ignore_errors=True)
    return result


def runs(ctx: Context) -> list[Run]:
    steps = 3 * (WARMUP_STEPS + 40)  # two whole runs and a resume in two halves
    return [Run("exactness", mode, "bert", False, steps, lambda m=mode: measured(ctx.scratch / "exactness", m),
                starts=4) for mode in MODES]  # fmt: skip


def compare(rows: dict[str, Any], results: dict[str, Any]) -> None:
    base = rows.get("default", {})
    for name, row in rows.items():
        if name != "default" and row.get("tokens_per_s") and base.get("tokens_per_s"):
            row["vs"] = f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}× the default mode's tokens/s"


def notes(rows: dict[str, Any]) -> list[str]:
    return [f"exactness, {mode} mode: two repeats differ by {row['repeat_max_abs_diff']:.1e}, a 20 + 20 resume from "
            f"a straight run by {row['resume_max_abs_diff']:.1e}." for mode, row in rows.items()
            if "repeat_max_abs_diff" in row]  # fmt: skip
