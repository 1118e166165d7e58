"""make bench's host row: what the training thread does besides training, per step, read from Lightning's
SimpleProfiler on the tiny encoder at 128 × 128 (issue 67.3: 6.0 ms, of which the loader's next() 3.9 and the
divergence guard 1.6; the goal ≤ 3 ms).

Host time per step = every action the profiler times once per training step, less the model's own work (the forward
in training_step, the backward, and the optimizer step around them, whose hooks inside it are counted on their own).
Two configurations side by side in one run: the defaults, and the ones before issue 67 (batches collated on the
training thread, data.prefetch=0; torch's default AdamW on a CPU, whose divergence check reads its verdict at once,
optimizer.fused=false). Writes bench/results/host.json.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from bench.common import save

STEPS = 40
SHAPE = ["data.batch_size=128", "data.block_size=128"]
QUIET = ["export_hf=false", "trainer.enable_progress_bar=false", "callbacks.isotropy.at_end=false",
         "trainer.val_check_interval=1000", "callbacks.isotropy.every_n_steps=1000",
         "callbacks.checkpoint.every_n_train_steps=1000", f"trainer.max_steps={STEPS}"]  # fmt: skip
CONFIGURATIONS = {"defaults": [], "before issue 67": ["data.prefetch=0", "optimizer.fused=false"]}
# The model's own work: these contain the forward, the backward and the update (hooks inside are timed apart).
COMPUTE = ("run_training_batch", "optimizer_step", "training_step", "backward")
ROW = re.compile(r"^\|\s+(\S.*?)\s+\|\s+([0-9][0-9.e+-]*)\s+\|\s+(\d+)\s+\|\s+([0-9][0-9.e+-]*)\s+\|")


def profiled(overrides: list[str]) -> dict[str, tuple[float, int]]:
    """{action: (mean seconds, calls)} of one run under Lightning's SimpleProfiler."""
    from degen_train.config import load_config
    from degen_train.run.pretrain import train

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        profiler = ("+trainer.profiler={_target_:lightning.pytorch.profilers.SimpleProfiler,"
                    f"dirpath:'{folder}',filename:profile}}")  # fmt: skip
        summary = train(load_config([*SHAPE, *QUIET, *overrides, profiler], run_dir=folder / "run"))
        text = next(folder.glob("*profile*.txt")).read_text()
    actions: dict[str, tuple[float, int]] = {}
    for line in text.splitlines():
        found = ROW.match(line)
        if found:
            actions[found.group(1)] = (float(found.group(2)), int(found.group(3)))
    actions["__step_seconds__"] = (float(summary["seconds_per_batch"] or 0.0), STEPS)
    return actions


def host_time(actions: dict[str, tuple[float, int]]) -> tuple[float, dict[str, float]]:
    """(host seconds per step, the largest parts), over the actions timed once per step."""
    parts = {name: mean for name, (mean, calls) in actions.items()
             if abs(calls - STEPS) <= 1 and not name.endswith(COMPUTE) and name != "__step_seconds__"}  # fmt: skip
    top = dict(sorted(parts.items(), key=lambda kv: -kv[1])[:6])
    return sum(parts.values()), top


def main(rounds: int = 2) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results: dict[str, dict] = {}
    for _ in range(rounds):  # the configurations take turns, so the machine's drift falls on both alike
        for name, overrides in CONFIGURATIONS.items():
            actions = profiled(overrides)
            host, top = host_time(actions)
            best = results.get(name)
            if best is None or host < best["host_ms_per_step"] / 1e3:
                results[name] = {"host_ms_per_step": host * 1e3, "step_ms": actions["__step_seconds__"][0] * 1e3,
                                 "largest_parts_ms": {k: v * 1e3 for k, v in top.items()}}  # fmt: skip
    print("\nhost time per step, tiny encoder at 128 × 128 (Lightning's SimpleProfiler; less of two runs each):")
    for name, row in results.items():
        print(f"  {name:<16} host {row['host_ms_per_step']:5.2f} ms of a {row['step_ms']:7.1f} ms step; largest: "
              + ", ".join(f"{k.split(']')[-1] or k} {v:.2f}" for k, v in list(row["largest_parts_ms"].items())[:3]))
    save("host", {"steps": STEPS, "shape": SHAPE, "configurations": CONFIGURATIONS, "results": results})
    return results


if __name__ == "__main__":
    main()
