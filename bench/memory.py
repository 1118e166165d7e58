"""Activation checkpointing on the CPU, and the plan held against a measured peak (issue 52.3/52.4).

    python bench/run.py memory            (writes bench/results/memory.json)

Each configuration runs in a fresh subprocess: the plan's step on fake tensors (which allocates no tensor memory),
the resident memory read (psutil), then the same model, optimizer and two steps built and run on real CPU tensors
(run/memory_plan.fake_step_memory with fake=False, three times); the process's resident high-water mark (ru_maxrss)
less the reading before is an independent measure of the step's peak, weights and optimizer states included, held
beside the plan's. Time per step: the fastest of the three calls, halved (each takes two steps).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.common import REPO, RESULTS

SETTINGS = ("none", "full", "2")
CASES = {  # what a CPU can hold whose activations dominate: 4-layer models at 16 x 256 tokens
    "gpt2_mini": ["recipe=gpt2_mle", "model=gpt2_mini", "data.batch_size=16", "data.block_size=256"],
    "bert_mini": ["recipe=bert_mlm", "model=mini", "data.batch_size=16", "data.block_size=256"],
}
CHILD = """
import json, resource, sys, time
import psutil
from degen_train.config import load_config
from degen_train.run.checks import check
from degen_train.run.memory_plan import fake_step_memory
overrides = json.loads(sys.argv[1])
plan = check(load_config([*overrides, "data.tokenizer.vocab_size=8000", "model.max_position=512", "plan.only=true"],
                         run_dir="/tmp/degen-bench-memory"))
common = dict(data_format=plan.data_format, activation_checkpointing=plan.config.model.activation_checkpointing)
planned = fake_step_memory(plan.config, plan.build_terms(), plan.weights, **common)
baseline = psutil.Process().memory_info().rss
times = []
for _ in range(3):
    start = time.perf_counter()
    measured = fake_step_memory(plan.config, plan.build_terms(), plan.weights, **common, fake=False)
    times.append(time.perf_counter() - start)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rss_added": peak - baseline, "planned_peak": planned.peak, "tracked_peak": measured.peak,
                  "step_s": min(times) / 2}))
"""
# glibc returns a freed block of 128 KiB or more to the system at once with a fixed threshold (by default the threshold
# grows with what was freed, and a second step then reuses memory the process keeps resident): the high-water mark is
# then the live tensors' peak plus the allocator's own small pieces.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def measure(overrides: list[str], setting: str) -> dict:
    command = [sys.executable, "-c", CHILD, json.dumps([*overrides, f"model.activation_checkpointing={setting}"])]
    env = {**os.environ, **ALLOCATOR}
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=900, check=True, env=env)
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
            print(f"{name:10s} checkpointing {setting:4s}: resident peak {row['rss_added'] / 2**20:7.1f} MiB above the "
                  f"imports ({row['rss_ratio']:.2f}x); planned {row['planned_peak'] / 2**20:7.1f} MiB "
                  f"({row['plan_over_rss']:.2f}x the resident); {row['step_s']:.2f} s/step ({row['time_ratio']:.2f}x)")
        results[name] = {"overrides": overrides, **rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "memory.json").write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
