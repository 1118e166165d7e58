"""The fine-tuning grid: tasks × learning rates × seeds, one result file per cell, and the summary papers report.

Per task the learning rate whose median dev score over seeds is highest is chosen (ties: the smaller rate), and
that rate's mean ± standard deviation over seeds is reported (the protocol of BERT/RoBERTa-era GLUE dev tables).
Each cell writes ``OUT/TASK/lr=LR/seed=S/result.json`` atomically when it ends; a rerun skips every cell that has
one (a cell killed midway starts again: cells are short), and refuses an OUT made with other settings.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from degen_train.core.handed_files import HandedOverFileError, json_record
from degen_train.core.io import atomic_write_json, atomic_write_text, file_sha256
from degen_train.finetune.baselines import one_class_note
from degen_train.finetune.cell import STOP_ASKED, CellsInterrupted, Processes, Protocol, finetune_cell
from degen_train.finetune.metrics import average_of
from degen_train.finetune.tasks import Task

log = logging.getLogger("degen_train.finetune")


def cell_file(out: Path, task: str, lr: float, seed: int) -> Path:
    return out / task / f"lr={lr:g}" / f"seed={seed}" / "result.json"


def run_grid(
    model_dir: Path, tasks: Sequence[Task], *, learning_rates: Sequence[float], seeds: Sequence[int],
    protocol: Protocol, out: Path, save_models: bool = False, processes: Processes | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Every cell not yet done, then the summary (OUT/glue.json, OUT/glue.md); returns the summary.
    ``save_models``: each cell also keeps its fine-tuned model in CELL/model/ (degen-analyze reads it).
    ``processes``: as fit_classifier's (None: a launcher's environment)."""
    processes = processes or Processes.from_environment()
    if not learning_rates:
        raise ValueError("the learning-rate grid is empty: give at least one (--lr 2e-5)")
    if not seeds:
        raise ValueError("no seeds: give --seeds 1 or more")
    settings = {"model": str(model_dir), "weights": weights_sha256(model_dir), "protocol": asdict(protocol)}
    _check_same_settings(out, settings, write=processes.rank == 0)
    cells = [(t, lr, s) for t in tasks for lr in learning_rates for s in seeds]
    results: dict[str, list[dict[str, Any]]] = {t.layout.name: [] for t in tasks}
    for index, (task, lr, seed) in enumerate(cells, 1):
        path = cell_file(out, task.layout.name, lr, seed)
        if os.path.lexists(path):
            results[task.layout.name].append(finished_cell(path))
            continue
        if STOP_ASKED.is_set():
            raise CellsInterrupted(f"stopped before cell {index} of {len(cells)}")
        log.info("[%d/%d] %s lr=%g seed=%d", index, len(cells), task.layout.name, lr, seed)
        writer = processes.rank == 0  # under a launcher, every process trains; one writes
        result = finetune_cell(model_dir, task, lr=lr, seed=seed, protocol=protocol, processes=processes,
                               save_to=path.parent / "model" if save_models and writer else None)  # fmt: skip
        if writer:
            atomic_write_json(path, result)
        log.info("  %s dev score %.2f (%.0f examples/s)", task.layout.name, result["score"],
                 result["examples_per_second"])  # fmt: skip
        results[task.layout.name].append(result)
    if any(t.layout.name == "wnli" for t in tasks):
        log.warning("WNLI's dev set is adversarial (its sentences reappear in train with the other label; the "
                    "majority class scores 56.3): it is scored, and left out of the GLUE average as GLUE does")
    summary = summarize(finished_cells(out, results), settings)
    if processes.rank == 0:
        atomic_write_json(out / "glue.json", summary)
        atomic_write_text(out / "glue.md", format_summary(summary))
    return summary


def finished_cells(out: Path, results: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Every finished cell in ``out`` (earlier invocations' tasks, rates and seeds too: settings.json makes them one
    protocol) with this invocation's, one per (task, rate, seed)."""
    cells: dict[str, dict[tuple[float, int], dict[str, Any]]] = {}
    for path in sorted(out.glob("*/lr=*/seed=*/result.json")):
        cell = finished_cell(path)
        cells.setdefault(cell["task"], {})[(float(cell["lr"]), int(cell["seed"]))] = cell
    for task, done in results.items():
        for cell in done:
            cells.setdefault(task, {})[(float(cell["lr"]), int(cell["seed"]))] = cell
    return {task: list(by_cell.values()) for task, by_cell in cells.items()}


def weights_sha256(model_dir: Path) -> str:
    """One sha256 over the model folder's weight files (name and bytes, in name order): what the grid's cells were
    fine-tuned from, so that a folder whose weights were swapped at the same path is not averaged with them."""
    digest = hashlib.sha256()
    for path in sorted([*model_dir.glob("*.safetensors"), *model_dir.glob("*.bin")]):
        digest.update(f"{path.name}:{file_sha256(path)}\n".encode())
    return digest.hexdigest()


CELL_FIELDS = {"task": str, "lr": (int, float), "seed": int, "score": (int, float)}


def finished_cell(path: Path) -> dict[str, Any]:
    """A finished cell's result.json, read as a handed-over record: a plain bounded JSON file holding at least the
    task, rate, seed and score with their types, else one line naming the file and what to do."""
    cell = json_record(path, what="fine-tuning result")
    if not isinstance(cell, dict):
        cell, wrong = {}, list(CELL_FIELDS)
    else:
        wrong = [key for key, kind in CELL_FIELDS.items()
                 if not isinstance(cell.get(key), kind) or isinstance(cell.get(key), bool)
                 or (isinstance(cell.get(key), float) and not math.isfinite(cell[key]))]  # fmt: skip
    if wrong:
        raise HandedOverFileError(
            f"{path}: not a fine-tuning result as degen-finetune writes it ({', '.join(wrong)} missing, of another "
            f"type or not a finite number); remove the file and the same command fine-tunes that cell again"
        )
    return cell


def _check_same_settings(out: Path, settings: dict[str, Any], *, write: bool) -> None:
    record = out / "settings.json"
    if os.path.lexists(record):
        before = json_record(record, what="fine-tuning settings")
        if not isinstance(before, dict):
            raise ValueError(f"{record} is not a JSON mapping, as degen-finetune writes it: give another --out")
        # A key added to the protocol since the folder was made counts as its default (padding: dynamic); a folder
        # made before the weights were recorded is bound to them from now on only where it names the same model.
        before["protocol"] = {**asdict(Protocol()), **(before.get("protocol") or {})}
        before.setdefault("weights", settings["weights"])
        if before != settings:
            changed = sorted(k for k in set(before["protocol"]) | set(settings["protocol"])
                             if before["protocol"].get(k) != settings["protocol"].get(k))  # fmt: skip
            if before.get("weights") != settings["weights"]:
                changed.insert(0, f"the model's weights (sha256 {str(before.get('weights'))[:12]} then, "
                                  f"{settings['weights'][:12]} now: its files were replaced)")  # fmt: skip
            if before.get("model") != settings["model"]:
                changed.insert(0, "model")
            raise ValueError(
                f"{out} holds fine-tuning results made with other settings ({', '.join(changed)} differ): give "
                f"another --out, or the same settings to resume it"
            )
        return
    if write:
        atomic_write_json(record, settings)


def summarize(results: dict[str, list[dict[str, Any]]], settings: dict[str, Any]) -> dict[str, Any]:
    """Per task: each rate's scores, the chosen rate (best median over seeds), its mean ± std; the GLUE average."""
    tasks: dict[str, Any] = {}
    for name, cells in results.items():
        by_lr: dict[float, list[dict[str, Any]]] = {}
        for cell in cells:
            by_lr.setdefault(float(cell["lr"]), []).append(cell)
        rates = {lr: [c["score"] for c in group] for lr, group in sorted(by_lr.items())}
        chosen = max(sorted(rates), key=lambda lr: statistics.median(rates[lr]))  # max keeps the first (smaller) tie
        group = by_lr[chosen]
        metrics = {f"{split}/{metric}": [c["dev"][split][metric] for c in group]
                   for split in group[0]["dev"] for metric in group[0]["dev"][split]}  # fmt: skip
        tasks[name] = {
            "chosen_lr": chosen,
            "mean": statistics.fmean(rates[chosen]),
            "std": statistics.stdev(rates[chosen]) if len(rates[chosen]) > 1 else 0.0,
            "median": statistics.median(rates[chosen]),
            "seeds": len(rates[chosen]),
            "metrics": {k: {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0}
                        for k, v in metrics.items()},  # fmt: skip
            "scores_by_lr": {f"{lr:g}": scores for lr, scores in rates.items()},
            "examples_per_second": statistics.fmean(c["examples_per_second"] for c in cells),
            "baselines": next((c["baselines"] for c in cells if "baselines" in c), None),  # the task's, whatever cell
            "one_class": one_class_note(group),  # the chosen rate's cells that predicted one class, or None
        }
    averaged = average_of({k: v["mean"] for k, v in tasks.items()})
    grid = {name: {"learning_rates": sorted({float(c["lr"]) for c in cells}),
                   "seeds": sorted({int(c["seed"]) for c in cells}), "cells": len(cells)}
            for name, cells in results.items()}  # fmt: skip
    return {"tasks": tasks, "average": averaged.pop("average"), "average_label": averaged["label"],
            "average_info": averaged, "grid": grid, **settings}  # fmt: skip


def format_summary(summary: dict[str, Any]) -> str:
    """A markdown table: one row per task, the chosen rate, mean ± std of its score and of each metric."""
    lines = ["| task | lr | score (mean ± std) | majority class | chance | metrics | seeds |",
             "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, task in summary["tasks"].items():
        metrics = ", ".join(f"{k.split('/', 1)[1] if k.startswith('dev/') else k} {v['mean']:.1f} ± {v['std']:.1f}"
                            for k, v in task["metrics"].items())  # fmt: skip
        base = task.get("baselines") or {}
        majority = f"{base['majority']:.1f} ({base['majority_label']})" if base else "–"
        chance = f"{base['chance']:.1f}" if base else "–"
        flag = f" ⚑ {task['one_class']}" if task.get("one_class") else ""
        lines.append(f"| {name} | {task['chosen_lr']:g} | {task['mean']:.1f} ± {task['std']:.1f}{flag} | {majority} | "
                     f"{chance} | {metrics} | {task['seeds']} |")  # fmt: skip
    if summary["average"] is not None:
        label = summary.get("average_label", "average")
        lines.append(f"| **{label}** | | **{summary['average']:.1f}** | | | | |")
    lines += ["", "Majority class: the training split's most frequent label predicted for every dev row (a "
                  "regression task: the training mean, correlation 0); chance: labels drawn uniformly at random. A "
                  "score at or near them is a model that learned nothing; ⚑ marks cells whose predictions were one "
                  "class for every dev row."]  # fmt: skip
    lines += ["", "Covers every finished cell in this folder: " + "; ".join(
        f"{name} {len(g['learning_rates'])} rate(s) × seeds {','.join(map(str, g['seeds']))} ({g['cells']} cells)"
        for name, g in (summary.get("grid") or {}).items()) + "."] if summary.get("grid") else []  # fmt: skip
    if "wnli" in summary["tasks"]:
        lines += ["", "WNLI is scored but left out of the average: its dev set is adversarial (GLUE's convention)."]
    cap = (summary.get("protocol") or {}).get("max_train_examples")
    if cap:  # a capped grid's scores are not the full task's: said under its table
        lines += ["", f"Each task trained on the first {cap} rows of its training split only (--max-train-examples "
                      f"{cap}); the dev splits are whole."]  # fmt: skip
    return "\n".join(lines) + "\n"


def protocol_from(settings: dict[str, Any]) -> tuple[Protocol, list[float], list[int]]:
    """conf/finetune.yaml's protocol (``protocol: papers`` or ``run_glue``) with ``settings`` over it; (protocol,
    learning rates, seeds). Unknown keys are refused, naming the known ones."""
    from degen_train.finetune.settings import resolve

    protocol, rates, seeds, _ = resolve(settings)
    return protocol, rates, seeds


def finetune_export(model_dir: Path, tasks: Sequence[Task], settings: dict[str, Any], out: Path) -> dict[str, Any]:
    """GLUE of a run's export at the end of training (eval.glue): the grid into ``out``; per task its mean score,
    and the average, for summary.json. It runs in the calling process alone (rank 0 of a pretraining run)."""
    protocol, rates, seeds = protocol_from(settings)
    summary = run_grid(model_dir, tasks, learning_rates=rates, seeds=seeds, protocol=protocol, out=out,
                       processes=Processes())  # fmt: skip
    scores = {name: {"mean": t["mean"], "std": t["std"], "lr": t["chosen_lr"], "baselines": t.get("baselines"),
                     "one_class": t.get("one_class")} for name, t in summary["tasks"].items()}  # fmt: skip
    return {"tasks": scores, "average": summary["average"], "seeds": len(seeds), "folder": str(out)}
