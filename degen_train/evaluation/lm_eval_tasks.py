"""degen-eval MODEL --lm-eval TASKS: EleutherAI's lm-evaluation-harness on an export, through its own Hugging Face
model class (``lm_eval.models.huggingface.HFLM``), so a task's numbers are the harness's own (LAMBADA, HellaSwag,
...; Gao et al. 2023, the harness). Tasks of your own are YAML files in a folder given by --lm-eval-include. The
harness downloads its public tasks' data from the Hub: offline, only tasks whose data is on disk run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("degen_train.eval")


def run_lm_eval(
    model_dir: Path,
    tasks: Sequence[str],
    *,
    include_path: str | Path | None = None,
    limit: int | None = None,
    num_fewshot: int | None = None,
    batch_size: int = 8,
    device: str | None = None,
) -> dict[str, Any]:
    """The harness's results for ``tasks`` on the decoder export in ``model_dir``: per task its metrics (and their
    standard errors, as the harness computes them), the harness's version, the few-shot count and the limit."""
    from degen_train.evaluation.generation import require_decoder

    require_decoder(model_dir, "lm-eval")  # before the harness loads it (an encoder ended in its traceback)
    lm_eval, manager = checked_tasks(tasks, include_path)
    import torch
    from lm_eval.models.huggingface import HFLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    log.info("degen-eval: lm-eval %s on %s (%s)", lm_eval.__version__, ", ".join(tasks), device)
    model = HFLM(pretrained=str(model_dir), batch_size=batch_size, device=device, trust_remote_code=False)
    results = lm_eval.simple_evaluate(model=model, tasks=list(tasks), task_manager=manager, limit=limit,
                                      num_fewshot=num_fewshot, log_samples=False, bootstrap_iters=1000)  # fmt: skip
    if results is None:
        raise ValueError("lm-eval returned no results")
    return {
        "lm_eval_version": lm_eval.__version__,
        "tasks": {task: _plain(values) for task, values in results["results"].items()},
        "n_shot": _plain(results.get("n-shot", {})),
        "limit": limit,
        "include_path": str(include_path) if include_path is not None else None,
    }


def checked_tasks(tasks: Sequence[str], include_path: str | Path | None = None, *, key: str = "--lm-eval",
                  include_key: str = "--lm-eval-include") -> tuple[Any, Any]:
    """(the lm_eval module, its TaskManager) once every name in ``tasks`` is one the harness knows (with the task
    YAML files under ``include_path``); else a ValueError naming the unknown ones, before any model is loaded.
    ``key`` and ``include_key`` name the option in the message (degen-eval's flags, or a run's eval.* keys)."""
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise ValueError(f"{key} needs the lm-eval package: pip install 'degen-train[lm-eval]'") from None
    if include_path is not None and not Path(include_path).is_dir():
        raise FileNotFoundError(f"{include_key} {include_path}: no such folder of task YAML files")
    manager = None
    if include_path is not None:  # the harness's own index is 53,000 YAML files (about 19 s): read it only if needed
        own = TaskManager(include_path=str(include_path), include_defaults=False)
        # each a task of the folder (a group or tag may list the harness's tasks); the folder's win over the harness's
        # anyway (TaskManager: include_path takes precedence)
        manager = own if set(tasks) <= set(own.all_subtasks) else None
    if manager is None:
        manager = TaskManager(include_path=str(include_path)) if include_path is not None else TaskManager()
    known = set(manager.all_tasks)
    unknown = [task for task in tasks if task not in known]
    if unknown:
        raise ValueError(f"{key}: task(s) {', '.join(unknown)} not known to lm-eval {lm_eval.__version__}; its tasks "
                         f"are listed by `lm-eval ls tasks`, and a task of your own is a YAML file in a folder given "
                         f"by {include_key}")  # fmt: skip
    return lm_eval, manager


def _plain(values: Any) -> Any:
    """The harness's values as JSON: numbers as floats, "N/A" and names kept."""
    if isinstance(values, dict):
        return {str(k): _plain(v) for k, v in values.items()}
    if isinstance(values, int | float | str | bool) or values is None:
        return values
    return str(values)


def format_lm_eval(result: dict[str, Any]) -> list[str]:
    """One line per task: its metrics beside their standard errors."""
    lines = [f"lm-eval {result['lm_eval_version']}" + (f" (first {result['limit']} items of each task)"
                                                         if result.get("limit") else "")]  # fmt: skip
    for task, values in result["tasks"].items():
        shown = []
        for key, value in values.items():
            metric, comma, _ = key.partition(",")  # the harness's metrics are "name,filter"
            if not comma or metric.endswith("_stderr") or not isinstance(value, int | float):
                continue
            error = values.get(key.replace(metric, f"{metric}_stderr", 1))
            shown.append(f"{metric} {value:.4g}" + (f" ± {error:.2g}" if isinstance(error, int | float) else ""))
        lines.append(f"  {task}: {', '.join(shown)}")
    return lines
