"""Attention variants against plain softmax: seconds per training step of bert_mlm (model=mini) and gpt2_mle
(model=gpt2_mini) at their recipes' batches, the variants taking turns.

Each configuration runs 4 and 16 steps into fresh folders, twice, the configurations interleaved; the step time is
the difference over 12 steps (start-up and caches cancel), the median of the two rounds. Clipped softmax needs the
score matrix, so it runs on the eager attention path: it is compared with plain softmax on that path too (the cost
of the path and the cost of the clip, apart)."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from bench.common import REPO, save
from bench.recipes import timed_run

VARIANTS = {
    "softmax_sdpa": [],
    "softmax_eager": ["model.attention=eager"],
    "clipped_softmax": ["model.attention=eager", "model.attention_variant.name=clipped_softmax"],
    "gated": ["model.attention_variant.name=gated"],
    "output_gate": ["model.attention_variant.name=output_gate"],
}
RECIPES = {"bert_mlm": "model=mini", "gpt2_mle": "model=gpt2_mini"}


def main(rounds: int = 2) -> None:
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for recipe, model in RECIPES.items():
            timed_run(root / recipe / "warm", [f"recipe={recipe}", model], 2)  # tokenizer and example caches
        for turn in range(rounds):
            for recipe, model in RECIPES.items():
                for name, settings in VARIANTS.items():
                    overrides = [f"recipe={recipe}", model, *settings]
                    short, _ = timed_run(root / f"{recipe}-{name}-{turn}-short", overrides, 4)
                    long, _ = timed_run(root / f"{recipe}-{name}-{turn}-long", overrides, 16)
                    times.setdefault((recipe, name), []).append((long - short) / 12)
    rows = []
    for recipe in RECIPES:
        plain = statistics.median(times[(recipe, "softmax_sdpa")])
        for name in VARIANTS:
            per_step = statistics.median(times[(recipe, name)])
            rows.append({"recipe": recipe, "variant": name, "seconds_per_step": round(per_step, 3),
                         "vs_softmax_sdpa": round(per_step / plain, 2)})  # fmt: skip
            print(f"{recipe:<9} {name:<16} {per_step:6.3f} s/step  ×{per_step / plain:.2f} of softmax (SDPA)")
    save("attention", {"rows": rows, "method": __doc__.split("\n\n")[1].replace("\n", " ")})
    print(f"written to {REPO / 'bench' / 'results' / 'attention.json'}")


if __name__ == "__main__":
    main()
