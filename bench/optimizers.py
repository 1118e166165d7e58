"""Muon against AdamW: seconds per training step of bert_mlm (model=mini) and gpt2_mle (model=gpt2_mini) at their
recipes' batches, the optimizers taking turns.

Each configuration runs 4 and 16 steps into fresh folders, twice, the configurations interleaved; the step time is
the difference over 12 steps (start-up and caches cancel), the median of the two rounds. Muon runs with torch's
bfloat16 Newton–Schulz (the default) and with muon_ns_dtype=float32."""

from __future__ import annotations

from bench.common import REPO, save
from bench.recipes import interleaved_step_times, ratio_rows

OPTIMIZERS = {
    "adamw": ["optimizer=adamw"],
    "muon": ["optimizer=muon"],
    "muon_float32": ["optimizer=muon", "optimizer.muon_ns_dtype=float32"],
}
RECIPES = ["bert_mlm", "gpt2_mle"]


def main(rounds: int = 2) -> None:
    times = interleaved_step_times({recipe: [f"recipe={recipe}"] for recipe in RECIPES}, OPTIMIZERS, rounds=rounds)
    rows = ratio_rows(times, kind="optimizer", against="adamw", said="AdamW")
    save("optimizers", {"rows": rows, "method": __doc__.split("\n\n")[1].replace("\n", " ")})
    print(f"written to {REPO / 'bench' / 'results' / 'optimizers.json'}")


if __name__ == "__main__":
    main()
