"""Activation checkpointing on the CPU, and the plan held against a measured peak (issue 52.3/52.4).

    python bench/run.py memory            (writes bench/results/memory.json)

Each configuration runs in a fresh subprocess, so its peak resident memory is its own: after the imports and the
plan (the step on fake tensors, which allocates nothing) the resident high-water mark is read (ru_maxrss), then 4
real training steps run (each builds the model, its terms and optimizer and takes one step: run/memory_plan's
fake_step_memory with fake=False) and the mark is read again; the difference is what one real step needs, model
and optimizer included, which is what the plan's peak counts. Time per step: the median of steps 2-4.
"""

from __future__ import annotations

import json
import subprocess
import sys

from bench.common import REPO, RESULTS

SETTINGS = ("none", "full", "2")
CASES = {  # what a CPU can hold whose activations dominate: 4-layer models at 16 x 256 tokens
    "gpt2_mini": ["recipe=gpt2_mle", "model=gpt2_mini", "data.batch_size=16", "data.block_size=256"],
    "bert_mini": ["recipe=bert_mlm", "model=mini", "data.batch_size=16", "data.block_size=256"],
}
CHILD = """
import json, resource, statistics, sys, time
from degen_train.config import load_config
from degen_train.run.checks import check
from degen_train.run.memory_plan import fake_step_memory
overrides = json.loads(sys.argv[1])
plan = check(load_config([*overrides, "data.tokenizer.vocab_size=8000", "model.max_position=512", "plan.only=true"],
                         run_dir="/tmp/degen-bench-memory"))
setting = plan.cfg.model.activation_checkpointing
planned = fake_step_memory(plan.cfg, plan.terms, plan.weights, data_format=plan.data_format,
                           activation_checkpointing=setting)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
times = []
for _ in range(4):
    start = time.perf_counter()
    measured = fake_step_memory(plan.cfg, plan.terms, plan.weights, data_format=plan.data_format,
                                activation_checkpointing=setting, fake=False)
    times.append(time.perf_counter() - start)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rss_added": after - before, "planned_peak": planned.peak, "planned_parameters": planned.parameters,
                  "tracked_peak": measured.peak, "step_s": statistics.median(times[1:])}))
"""


def measure(overrides: list[str], setting: str) -> dict:
    command = [sys.executable, "-c", CHILD, json.dumps([*overrides, f"model.activation_checkpointing={setting}"])]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=900, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> dict:
    results: dict[str, dict] = {}
    for name, overrides in CASES.items():
        rows = {setting: measure(overrides, setting) for setting in SETTINGS}
        base = rows["none"]
        for setting, row in rows.items():
            row["rss_ratio"] = row["rss_added"] / base["rss_added"]
            row["time_ratio"] = row["step_s"] / base["step_s"]
            row["plan_over_rss"] = row["planned_peak"] / row["rss_added"]
            print(f"{name:10s} checkpointing {setting:4s}: steps added {row['rss_added'] / 2**20:7.1f} MiB resident "
                  f"({row['rss_ratio']:.2f}x), planned {row['planned_peak'] / 2**20:7.1f} MiB peak "
                  f"({row['plan_over_rss']:.2f}x the resident), {row['step_s']:.2f} s/step "
                  f"({row['time_ratio']:.2f}x)")  # fmt: skip
        results[name] = {"overrides": overrides, **rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "memory.json").write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
