"""Where the house's modules moved. A config recorded before a move names its ``_target_``s by the old path; the
readers of recorded configs (handed_over.py, a resume's and a finished run's comparison) rewrite them to the one
name each module has now. No old name is importable: a module has one name.
"""

from __future__ import annotations

from typing import Any

# Old module path -> its path now (the layout of 019c1f3, and the losses package and the renames of issue 46).
RENAMED_MODULES = {
    **{f"degen_train.{old}": f"degen_train.{new}" for old, new in {
        "accumulation": "losses.accumulation", "analyze": "evaluation.model_analysis", "branching": "run.branching",
        "build": "run.build", "catalog": "losses.catalog", "checkpoints": "storage.checkpoints",
        "collectives": "devices.collectives", "device_reads": "devices.device_reads",
        "evaluate": "evaluation.export_probes", "export": "run.export", "hub": "run.hub", "io": "core.io",
        "loggers": "run.loggers", "module": "run.module", "muon": "optim.muon", "overrides": "config.overrides",
        "own_runs": "core.own_runs", "storage.own_runs": "core.own_runs", "parallel": "run.parallel",
        "paths": "core.paths",
        "precision": "devices.precision", "pretrain": "run.pretrain", "provenance": "run.provenance",
        "quiet": "core.quiet", "resume": "run.resume", "rng": "core.rng", "run_table": "run.end_of_run_table",
        "runlock": "storage.runlock", "schema": "config.schema", "sharded_io": "storage.sharded_io",
        "step_check": "run.step_check", "sweep": "run.sweep", "term_options": "losses.options",
        "threads": "devices.threads", "types": "models.output",
        "terms.accumulation": "losses.accumulation", "terms.catalog": "losses.catalog",
        "terms.options": "losses.options", "terms.types": "models.output", "terms": "losses.contract",
        "evaluation.analyze": "evaluation.model_analysis", "evaluation.evaluate": "evaluation.export_probes",
        "callbacks.isotropy": "callbacks.isotropy_monitor", "run.table": "run.end_of_run_table",
        "report.table": "report.runs_table",
    }.items()},
    **{f"degen_train.{package}.{name}": f"degen_train.losses.{name}" for package, names in {
        "objectives": ("agg", "chunked_ce", "coco_clm", "corruption", "electra", "mle", "mlm", "nsp"),
        "regularizers": ("coco_scl", "cosreg", "istar", "simcse", "simctg", "spectrum", "tacl", "unlikelihood"),
    }.items() for name in names},
}  # fmt: skip


# A name that moved out of a package's __init__ into a module of it (issue 70: optim's own typed sections beside it).
RENAMED_TARGETS = {
    "degen_train.optim.build_optimizer": "degen_train.optim.optimizer.build_optimizer",
    "degen_train.optim.build_scheduler": "degen_train.optim.schedule.build_scheduler",
}


def current_target(target: str) -> str:
    """``target`` (``module.attribute``) with its module's path as it is now; unchanged when it never moved."""
    if target in RENAMED_TARGETS:
        return RENAMED_TARGETS[target]
    for old in sorted(RENAMED_MODULES, key=len, reverse=True):
        if target.startswith(old + "."):
            return RENAMED_MODULES[old] + target[len(old) :]
    return target


def current_targets(tree: Any) -> Any:
    """``tree`` (a recorded config as plain containers) with every ``_target_`` as ``current_target`` names it."""
    if isinstance(tree, dict):
        return {k: current_target(v) if k == "_target_" and isinstance(v, str) else current_targets(v)
                for k, v in tree.items()}  # fmt: skip
    if isinstance(tree, list):
        return [current_targets(item) for item in tree]
    return tree
