"""The branches of a sweep made with ``branch_from=RUN@STEP``: each parent at its branch step beside its cooldowns."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from degen_train.config.records import Summary, read_metrics_csv, read_record
from degen_train.core.handed_files import HandedOverFileError
from degen_train.core.own_runs import is_own
from degen_train.report.runs_table import SWEPT

COMPARED = ("val_objective_loss", "val_loss", "val_perplexity", "isotropy/embedding/mean_cosine",
            "isotropy/embedding/isoscore")  # fmt: skip


def branch_of(run: Path) -> dict | None:
    """summary.json's ``branched_from`` (parent run folder, step), or None for a run that was not branched."""
    path = run / "summary.json"
    if not os.path.lexists(path):
        return None
    try:  # the run's row already named a summary that does not fit its schema
        branch = read_record(path, Summary, what="run summary").branched_from
    except HandedOverFileError:
        return None
    return branch.model_dump() if branch else None


def parent_at(parent: Path, step: int) -> dict[str, float]:
    """The parent's logged validation numbers at its last validation at or before update ``step``
    (RUN/logs/metrics.csv), with that update: what each cooldown started from, in the columns the branches have
    (val_objective_loss: its objective terms' own losses, unweighted; val_perplexity of the term its summary names).
    A validation during training is stamped with the 0-based index of the update it follows (after update 6:
    step 5)."""
    path = parent / "logs" / "metrics.csv"
    if not os.path.lexists(path):
        return {}
    try:  # the parent's files are handed over like the branch's: typed, bounded, never through a link
        logged = read_metrics_csv(path)
        has_summary = os.path.lexists(parent / "summary.json")
        summary = read_record(parent / "summary.json", Summary, what="run summary").model_dump() if has_summary else {}
    except HandedOverFileError:
        return {}
    objective = list((summary.get("config") or {}).get("objective") or {})
    perplexity_of = summary.get("val_perplexity_of")
    found: dict[str, float] = {}
    numbers = logged.apply(pd.to_numeric, errors="coerce")  # a cell that is no number is no value
    rows = [{k: v for k, v in row.items() if pd.notna(v)} for row in numbers.to_dict("records")]
    for row in rows:
        if "val/loss" in row and "step" in row and int(row["step"]) + 1 <= step:
            found = {"validated_at": int(row["step"]) + 1, "val_loss": float(row["val/loss"])}
            own = [row.get(f"val/{term}/loss") for term in objective]
            if objective and None not in own:
                found["val_objective_loss"] = sum(float(v) for v in own)
            if perplexity_of and row.get(f"val/{perplexity_of}") is not None and row[f"val/{perplexity_of}"] < 50:
                found["val_perplexity"] = math.exp(float(row[f"val/{perplexity_of}"]))
            found |= {k: float(v) for k, v in row.items() if k.startswith("isotropy/embedding/")}
    return found


def readable_parent(parent: Path, given: Sequence[Path]) -> bool:
    """Whether a report may read a branch's parent: a folder the report was given (or inside one), or a run of this
    user's own. A handed-over summary.json names its parent by path: that path is not read on its word."""
    resolved = parent.resolve()
    inside = any(resolved == g.resolve() or g.resolve() in resolved.parents for g in given)
    return inside or is_own(parent)


def recorded_start(record: dict, step: int) -> dict[str, float]:
    """What a branch recorded of its start (summary.json's branched_from.validation: the parent's weights at the branch
    step, validated as the branch validates), in the branch table's columns; {} for a branch made before it did."""
    validation = (branch_of(Path(record["path"])) or {}).get("validation") or {}
    if "val/loss" not in validation:
        return {}
    found = {"validated_at": step, "val_loss": validation["val/loss"]}
    objective = str(record.get("objective") or "").split("+") if record.get("objective") else []
    own = [validation.get(f"val/{term}/loss") for term in objective]
    if objective and None not in own:
        found["val_objective_loss"] = sum(own)
    perplexity_of = record.get("val_perplexity_of")
    if perplexity_of and validation.get(f"val/{perplexity_of}") is not None and validation[f"val/{perplexity_of}"] < 50:
        found["val_perplexity"] = math.exp(validation[f"val/{perplexity_of}"])
    return found


def branch_table(table: pd.DataFrame, given: Sequence[Path] = ()) -> list[tuple[str, pd.DataFrame]]:
    """One (heading, table) per parent@step: the parent's row at the branch step, then each branch's final row,
    its swept values and the change of its objective's own validation loss from the parent's. A parent outside the
    folders ``given`` that is no run of this user's is named, not read (readable_parent)."""
    if "path" not in table:
        return []
    groups: dict[tuple[str, int], list[dict]] = {}
    for record in table.to_dict("records"):
        branch = branch_of(Path(record["path"]))
        if branch:
            groups.setdefault((branch["run"], int(branch["step"])), []).append(record)
    sections = []
    for (parent, step), branches in sorted(groups.items()):
        readable = readable_parent(Path(parent), given)
        start = parent_at(Path(parent), step) if readable else {}
        recorded = recorded_start(branches[0], step)  # the branch's own validation of where it started
        start = {**start, **recorded}
        said = (f"validated after update {start['validated_at']}" if "validated_at" in start else
                "no validation at or before the branch step" if readable else
                "not read: outside the folders given and not a run of yours")  # fmt: skip
        rows = [{"run": f"{Path(parent).name} (parent, {said})", **{k: start[k] for k in COMPARED if k in start}}]
        for record in branches:
            row = {"run": record["run"], **{k: v for k, v in record.items() if str(k).startswith(SWEPT)}}
            row |= {k: record.get(k) for k in COMPARED if k in record}
            # Like with like: the objective's own loss (val_loss adds each run's weighted regularizers, which a
            # cooldown that switches one on would count against itself).
            if start.get("val_objective_loss") is not None and record.get("val_objective_loss") is not None:
                row["val_objective_loss change"] = record["val_objective_loss"] - start["val_objective_loss"]
            rows.append(row)
        sections.append((f"{parent} at step {step}: {len(branches)} branches", pd.DataFrame(rows)))
    return sections
