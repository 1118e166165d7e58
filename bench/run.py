"""make bench: every benchmark, side by side in one run; results in bench/results/*.json. `python bench/run.py gpu
[ROW ...]` is make bench-gpu, one lent card's sitting (bench/gpu/)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

# The CPU parts, each bench/NAME.py with a main(), in the order they run
PARTS = ("command_line", "spine", "host", "losses", "metrics", "reliability", "analysis", "data", "chunked_ce",
         "parallel", "methods", "finetune", "recipes", "optimizers", "attention", "memory")  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["gpu"]:  # its own rows and exit status
        from bench.gpu import sitting

        sys.exit(sitting.main(sys.argv[2:]))
    wanted = set(sys.argv[1:]) or set(PARTS)
    if unknown := sorted(wanted - set(PARTS)):
        print(f"bench: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}, or gpu", file=sys.stderr)
        sys.exit(2)
    import datasets

    from degen_train.devices.precision import cpu_description

    datasets.disable_progress_bars()
    machine = cpu_description()
    bf16 = f"yes ({', '.join(machine['bf16_flags'])})" if machine["native_bf16"] else "no: bf16 rows are emulated"
    print(f"measured on: {machine['cpu']}, {machine['threads']} threads; native bf16: {bf16}")
    for name in PARTS:
        if name in wanted:
            importlib.import_module(f"bench.{name}").main()


if __name__ == "__main__":
    main()
