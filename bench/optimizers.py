"""Muon against AdamW: seconds per training step of bert_mlm (model=mini) and gpt2_mle (model=gpt2_mini) at their
recipes' batches, the optimizers taking turns.

Each configuration runs 4 and 16 steps into fresh folders, twice, the configurations interleaved; the step time is
the difference over 12 steps (start-up and caches cancel), the median of the two rounds. Muon runs with torch's
bfloat16 Newton–Schulz (the default) and with muon_ns_dtype=float32."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from bench.common import REPO, save
from bench.recipes import timed_run

OPTIMIZERS = {
    "adamw": ["optimizer=adamw"],
    "muon": ["optimizer=muon"],
    "muon_float32": ["optimizer=muon", "optimizer.muon_ns_dtype=float32"],
}
RECIPES = ["bert_mlm", "gpt2_mle"]


def main(rounds: int = 2) -> None:
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for recipe in RECIPES:
            timed_run(root / recipe / "warm", [f"recipe={recipe}"], 2)  # tokenizer and example caches
        for turn in range(rounds):
            for recipe in RECIPES:
                for name, settings in OPTIMIZERS.items():
                    overrides = [f"recipe={recipe}", *settings]
                    short, _ = timed_run(root / f"{recipe}-{name}-{turn}-short", overrides, 4)
                    long, _ = timed_run(root / f"{recipe}-{name}-{turn}-long", overrides, 16)
                    times.setdefault((recipe, name), []).append((long - short) / 12)
    rows = []
    for recipe in RECIPES:
        adamw = statistics.median(times[(recipe, "adamw")])
        for name in OPTIMIZERS:
            per_step = statistics.median(times[(recipe, name)])
            rows.append({"recipe": recipe, "optimizer": name, "seconds_per_step": round(per_step, 3),
                         "vs_adamw": round(per_step / adamw, 2)})  # fmt: skip
            print(f"{recipe:<9} {name:<13} {per_step:6.3f} s/step  ×{per_step / adamw:.2f} of AdamW")
    save("optimizers", {"rows": rows, "method": __doc__.split("\n\n")[1].replace("\n", " ")})
    print(f"written to {REPO / 'bench' / 'results' / 'optimizers.json'}")


if __name__ == "__main__":
    main()
