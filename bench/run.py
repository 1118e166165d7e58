"""make bench: every benchmark, side by side in one run; results in bench/results/*.json."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import datasets  # noqa: E402

from bench import (  # noqa: E402
    analysis,
    attention,
    chunked_ce,
    data,
    finetune,
    host,
    losses,
    memory,
    methods,
    metrics,
    optimizers,
    parallel,
    recipes,
    reliability,
    spine,
)
from degen_train.devices.precision import cpu_description  # noqa: E402

datasets.disable_progress_bars()


def main() -> None:
    if sys.argv[1:2] == ["gpu"]:  # make bench-gpu: its own parts and exit status (bench/gpu.py)
        from bench import gpu

        sys.exit(gpu.main(sys.argv[2:]))
    if sys.argv[1:2] == ["sitting"]:  # make gpu-sitting: one lent card's sitting (bench/sitting.py)
        from bench import sitting

        sys.exit(sitting.main(sys.argv[2:]))
    wanted = set(sys.argv[1:]) or {
        "spine",
        "host",
        "losses",
        "metrics",
        "reliability",
        "analysis",
        "chunked_ce",
        "parallel",
        "methods",
        "finetune",
        "recipes",
        "optimizers",
        "data",
        "attention",
        "memory",
    }
    machine = cpu_description()
    bf16 = f"yes ({', '.join(machine['bf16_flags'])})" if machine["native_bf16"] else "no: bf16 rows are emulated"
    print(f"measured on: {machine['cpu']}, {machine['threads']} threads; native bf16: {bf16}")
    if "spine" in wanted:
        spine.main()
    if "host" in wanted:
        host.main()
    if "losses" in wanted:
        losses.main()
    if "metrics" in wanted:
        metrics.main()
    if "reliability" in wanted:
        reliability.main()
    if "analysis" in wanted:
        analysis.main()
    if "data" in wanted:
        data.main()
    if "chunked_ce" in wanted:
        chunked_ce.main()
    if "parallel" in wanted:
        parallel.main()
    if "methods" in wanted:
        methods.main()
    if "finetune" in wanted:
        finetune.main()
    if "recipes" in wanted:
        recipes.main()
    if "optimizers" in wanted:
        optimizers.main()
    if "attention" in wanted:
        attention.main()
    if "memory" in wanted:
        memory.main()


if __name__ == "__main__":
    main()
