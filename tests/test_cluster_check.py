"""degen-cluster check on the sbatch template as users run it (issue 66): 2 simulated nodes × 2 tasks over gloo,
SIGUSR1 mid-update, the requeue with the same job id, the job left alone, one process holding the global batch; every
line holds and the command exits 0. Its broken copies are judged line by line in tests/unit/test_cluster_check.py
(on what their jobs' logs hold) and run in full in the closing note of issue 66."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1] / "conf" / "cluster" / "degen-train.sbatch"


def test_the_template_passes_every_check(tmp_path: Path) -> None:
    command = [str(Path(sys.executable).parent / "degen-cluster"), "check", str(TEMPLATE), "--nodes", "2",
               "--ntasks-per-node", "2", "--work", str(tmp_path)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said[-4000:]
    lines = [line for line in result.stdout.splitlines() if line[:1] in "✔✘"]
    assert len(lines) == 9 and all(line.startswith("✔") for line in lines), said[-4000:]
    assert "rank 3 of 4 on node 1; strategy DDPStrategy" in said
    assert "the run folder is the same across the requeue" in said and "scontrol requeue" in said
    assert "equal to one process holding the global batch (dropout 0): max |Δw|" in said
    assert "9 of 9 checks hold" in said
