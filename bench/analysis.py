"""Where degen-analyze's time goes: the default analysis (1,000 sentences) of the default run's tiny model.

Trains the default run (`degen-train`, 300 steps of the tiny encoder) into a scratch folder if none is
given, then times each phase of `degen-analyze` three times (the phases are recorded by analyze itself,
in metrics.json's timings_s) and reports the median of each.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import corpus_overrides, save
from degen_train.evaluation.model_analysis import analyze


def main(run_dir: str | None = None, rounds: int = 3) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    run = Path(run_dir) if run_dir else scratch / "run"
    if not (run / "hf" / "config.json").exists():
        command = [str(Path(sys.executable).parent / "degen-train"), *corpus_overrides(), f"hydra.run.dir={run}"]
        subprocess.run([*command, "trainer.enable_progress_bar=false"], check=True, capture_output=True)
    phases: dict[str, list[float]] = {}
    for index in range(rounds):
        result = analyze(run, out=scratch / f"analysis-{index}", trust_config=True)  # the run it just trained
        for phase, seconds in result["timings_s"].items():
            phases.setdefault(phase, []).append(seconds)
    medians = {phase: statistics.median(values) for phase, values in phases.items()}
    payload = {
        "run": str(run),
        "sentences": result["sentences"],
        "seconds_by_phase": medians,
        "total_seconds": sum(medians.values()),
        "rounds": rounds,
    }
    save("analysis", payload)
    print(f"degen-analyze, {result['sentences']} sentences: {payload['total_seconds']:.1f} s", medians)
    return payload


if __name__ == "__main__":
    main(*sys.argv[1:2])
