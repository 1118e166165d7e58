"""The fine-tuning grid: tasks × learning rates × seeds, one result file per cell, and the summary papers report.

Per task the learning rate whose median dev score over seeds is highest is chosen (ties: the smaller rate), and
that rate's mean ± standard deviation over seeds is reported (the protocol of BERT/RoBERTa-era GLUE dev tables).
Each cell writes ``OUT/TASK/lr=LR/seed=S/result.json`` atomically when it ends; a rerun skips every cell that has
one (a cell killed midway starts again: cells are short), and refuses an OUT made with other settings.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from degen_train.finetune.cell import STOP_ASKED, CellsInterrupted, Processes, Protocol, finetune_cell
from degen_train.finetune.metrics import glue_average
from degen_train.finetune.tasks import Task
from degen_train.io import atomic_write_json, atomic_write_text

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
    settings = {"model": str(model_dir), "protocol": asdict(protocol)}
    _check_same_settings(out, settings, write=processes.rank == 0)
    cells = [(t, lr, s) for t in tasks for lr in learning_rates for s in seeds]
    results: dict[str, list[dict[str, Any]]] = {t.layout.name: [] for t in tasks}
    for index, (task, lr, seed) in enumerate(cells, 1):
        path = cell_file(out, task.layout.name, lr, seed)
        if path.exists():
            results[task.layout.name].append(json.loads(path.read_text()))
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
    summary = summarize(results, settings)
    if processes.rank == 0:
        atomic_write_json(out / "glue.json", summary)
        atomic_write_text(out / "glue.md", format_summary(summary))
    return summary


def _check_same_settings(out: Path, settings: dict[str, Any], *, write: bool) -> None:
    record = out / "settings.json"
    if record.exists():
        before = json.loads(record.read_text())
        if before != settings:
            changed = sorted(k for k in set(before["protocol"]) | set(settings["protocol"])
                             if before["protocol"].get(k) != settings["protocol"].get(k))  # fmt: skip
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
        }
    average = glue_average({k: v["mean"] for k, v in tasks.items()}) if tasks else None
    return {"tasks": tasks, "average": average, **settings}


def format_summary(summary: dict[str, Any]) -> str:
    """A markdown table: one row per task, the chosen rate, mean ± std of its score and of each metric."""
    lines = ["| task | lr | score (mean ± std) | metrics | seeds |", "| --- | --- | --- | --- | --- |"]
    for name, task in summary["tasks"].items():
        metrics = ", ".join(f"{k.split('/', 1)[1] if k.startswith('dev/') else k} {v['mean']:.1f} ± {v['std']:.1f}"
                            for k, v in task["metrics"].items())  # fmt: skip
        lines.append(f"| {name} | {task['chosen_lr']:g} | {task['mean']:.1f} ± {task['std']:.1f} | {metrics} | "
                     f"{task['seeds']} |")  # fmt: skip
    if summary["average"] is not None:
        lines.append(f"| **average** | | **{summary['average']:.1f}** | | |")
    cap = (summary.get("protocol") or {}).get("max_train_examples")
    if cap:  # a capped grid's scores are not the full task's: said under its table
        lines += ["", f"Each task trained on the first {cap} rows of its training split only (--max-train-examples "
                      f"{cap}); the dev splits are whole."]  # fmt: skip
    return "\n".join(lines) + "\n"


def protocol_from(settings: dict[str, Any]) -> tuple[Protocol, list[float], list[int]]:
    """conf/finetune.yaml's protocol with ``settings`` over it; (protocol, learning rates, seeds). Unknown keys are
    refused, naming the known ones."""
    from omegaconf import OmegaConf

    from degen_train.paths import config_dir

    defaults = OmegaConf.to_container(OmegaConf.load(config_dir() / "finetune.yaml"))
    unknown = sorted(set(settings) - set(defaults))
    if unknown:
        known = ", ".join(defaults)
        raise ValueError(f"eval.finetune.{unknown[0]} is not a fine-tuning setting; the settings: {known}")
    merged = {**defaults, **settings}
    protocol = Protocol(**{k: merged[k] for k in Protocol.__dataclass_fields__})
    protocol.check()
    return protocol, [float(x) for x in merged["learning_rates"]], list(range(1, int(merged["seeds"]) + 1))


def finetune_export(model_dir: Path, tasks: Sequence[Task], settings: dict[str, Any], out: Path) -> dict[str, Any]:
    """GLUE of a run's export at the end of training (eval.glue): the grid into ``out``; per task its mean score,
    and the average, for summary.json. It runs in the calling process alone (rank 0 of a pretraining run)."""
    protocol, rates, seeds = protocol_from(settings)
    summary = run_grid(model_dir, tasks, learning_rates=rates, seeds=seeds, protocol=protocol, out=out,
                       processes=Processes())  # fmt: skip
    scores = {name: {"mean": t["mean"], "std": t["std"], "lr": t["chosen_lr"]} for name, t in summary["tasks"].items()}
    return {"tasks": scores, "average": summary["average"], "seeds": len(seeds), "folder": str(out)}
