"""make bench's command-line row (issue 73.1): what a researcher waits for a command line the config alone can
refuse, beside what importing the frameworks alone costs, side by side in one run (interleaved rounds, the median).

Each command is a fresh process, as a user's is: ``python -c "import torch, lightning, transformers"`` (the floor any
command that loads them pays), ``degen-train +model.hiden_size=64`` (a misspelt key: the schema), ``degen-train
regularizer=cosreg regularizer.cosreg.rows=rare`` (a term's option: its declaration), ``degen-train
trainer.max_stesp=3`` (a Trainer argument), ``degen-train --list``, and degen-eval, degen-analyze and
degen-convert refusing an argument. The goal: each at most a third of the frameworks' import. Writes
bench/results/command_line.json.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import save

ROUNDS = 3
BIN = Path(sys.executable).parent
COMMANDS = {
    "import torch, lightning, transformers": [sys.executable, "-c", "import torch, lightning, transformers"],
    "degen-train +model.hiden_size=64": [str(BIN / "degen-train"), "+model.hiden_size=64"],
    "degen-train regularizer.cosreg.rows=rare": [str(BIN / "degen-train"), "regularizer=cosreg",
                                                 "regularizer.cosreg.rows=rare"],  # fmt: skip
    "degen-train trainer.max_stesp=3": [str(BIN / "degen-train"), "trainer.max_stesp=3"],
    "degen-train --list": [str(BIN / "degen-train"), "--list"],
    "degen-report --baseline nokey (refused)": [str(BIN / "degen-report"), "/nonexistent", "--baseline", "nokey"],
    "degen-eval RUN --stride 0 (refused)": [str(BIN / "degen-eval"), "run", "--out", "o", "--stride", "0"],
    "degen-analyze RUN --max-sentences 0 (refused)": [str(BIN / "degen-analyze"), "run", "--max-sentences", "0"],
    "degen-convert SRC --bogus (refused)": [str(BIN / "degen-convert"), "src", "--bogus"],
}


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
    return time.perf_counter() - start


def main() -> None:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(ROUNDS):  # interleaved: the machine's load falls on every command alike
        for name, command in COMMANDS.items():
            times[name].append(seconds(command))
    floor = statistics.median(times["import torch, lightning, transformers"])
    rows = {name: {"median_s": statistics.median(t), "ratio_to_framework_import": statistics.median(t) / floor}
            for name, t in times.items()}  # fmt: skip
    print(f"command line ({ROUNDS} interleaved rounds, median; goal ≤ 1/3 of the frameworks' import)")
    for name, row in rows.items():
        print(f"  {name:<45} {row['median_s']:6.2f} s   {row['ratio_to_framework_import']:.2f}×")
    save("command_line", rows)
