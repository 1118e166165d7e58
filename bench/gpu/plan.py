"""The sitting's plan: each run's estimate, and which runs fit the budget, decided before anything runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RECORD = REPO / "docs" / "gpu" / "sitting.json"  # the last sitting on a card, committed: the next estimate's times
BUDGET_S = 540.0  # nine minutes of command time: a 10-minute call, and 15 minutes of card with its start

# Seconds per run on an H100/H200 before the first step (model build, data from the cache, Lightning's set-up), a
# compile's first and cached cost, and each workload's best step. From the sittings of 2026-11-25/26 (a BERT-base or
# GPT-2 small run of 60 updates took 10-14 s whole; compiling GPT-2's whole model about 30 s) and the FLOPs of a
# step at 35% of a 989.5 TFLOP/s card (GPT-2 64 × 1024 × 854.9M FLOPs: 0.16 s; BERT 256 × 128: 0.07 s).
START_S = 9.0
PREPARE_S = 30.0  # a workload's first run: its tokenizer and examples made once (the cache serves the rest)
COMPILE_S = {"first": 35.0, "cached": 10.0}
STEP_S = {"gpt2": 0.16, "bert": 0.07}


@dataclass
class Run:
    """One run of the sitting: its row, name, what it costs by the estimate, and what it does."""

    row: str
    name: str
    kind: str
    compiles: bool
    steps: int
    action: Any = field(repr=False)  # () -> dict
    step_scale: float = 1.0  # its step against the workload's best (a term's extra work, a lever's, another shape)
    starts: int = 1  # the trainings it holds (exactness: two repeats and a resume in two parts)

    @property
    def compile_key(self) -> str:
        """Runs that compile the same graphs (the inductor caches serve the later ones): the hand loop's whole model
        and degen-train's blocks are different graphs."""
        return f"{self.kind}/{'loop' if self.name.endswith('careful_loop') else 'ours'}"

    def estimate(self, first_compile: bool, first_of_kind: bool, last: dict[str, float]) -> float:
        if f"{self.row}/{self.name}" in last:  # the last sitting's own time for this run
            return last[f"{self.row}/{self.name}"]
        compile_s = COMPILE_S["first" if first_compile else "cached"] if self.compiles else 0.0
        prepare_s = PREPARE_S if first_of_kind else 0.0
        return self.starts * START_S + prepare_s + compile_s + self.steps * STEP_S[self.kind] * self.step_scale


def last_times(record: Path = RECORD) -> dict[str, float]:
    """{row/run: seconds} measured by the last sitting on a card (docs/gpu/sitting.json), or {}."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    seconds = data.get("run_seconds", {}) if isinstance(data, dict) else {}
    return {str(k): float(v) for k, v in seconds.items() if isinstance(v, int | float)}


def plan(runs: list[Run], budget: float, last: dict[str, float]) -> tuple[list[tuple[Run, float]], list[Run]]:
    """(the runs that fit, each with its estimate; the runs left for another sitting), in order: a run is taken when
    its estimate still ends inside the budget, so a cheap run after an expensive one may still be taken."""
    taken, left, spent, compiled, prepared = [], [], 0.0, set(), set()
    for run in runs:
        seconds = run.estimate(run.compile_key not in compiled, run.kind not in prepared, last)
        if spent + seconds <= budget:
            taken.append((run, seconds))
            spent += seconds
            prepared.add(run.kind)
            if run.compiles:
                compiled.add(run.compile_key)
        else:
            left.append(run)
    return taken, left


def gao_scale_estimate() -> float:
    """make reproduce-gao-scale's seconds by the same constants: 6 runs × 3,000 steps of 64 × 256 tokens of a
    23.5M-parameter decoder (6·N·T FLOPs at 35% of the card), each with its start, one compile, per-word perplexity
    and the analysis (about 15 s each)."""
    parameters = 23.5e6  # conf/model/gpt2_gao_scale.yaml's decoder (conf/reproduce/gao_scale.yaml)
    seconds_per_run = 3000 * 6 * parameters * 64 * 256 / (0.35 * 989.5e12)
    return 6 * (START_S + seconds_per_run + 15.0) + COMPILE_S["first"]
