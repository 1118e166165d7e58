"""Attention variants against plain softmax: seconds per training step of bert_mlm (model=mini) and gpt2_mle
(model=gpt2_mini) at their recipes' batches, the variants taking turns.

Each configuration runs 4 and 16 steps into fresh folders, twice, the configurations interleaved; the step time is
the difference over 12 steps (start-up and caches cancel), the median of the two rounds. Clipped softmax needs the
score matrix, so it runs on the eager attention path: it is compared with plain softmax on that path too (the cost
of the path and the cost of the clip, apart)."""

from __future__ import annotations

from bench.common import REPO, save
from bench.recipes import interleaved_step_times, ratio_rows

VARIANTS = {
    "softmax_sdpa": [],
    "softmax_eager": ["model.attention=eager"],
    "clipped_softmax": ["model.attention=eager", "model.attention_variant.name=clipped_softmax"],
    "gated": ["model.attention_variant.name=gated"],
    "output_gate": ["model.attention_variant.name=output_gate"],
    "kv_bias": ["model.attention_variant.name=kv_bias"],
}
RECIPES = {"bert_mlm": ["recipe=bert_mlm", "model=mini"], "gpt2_mle": ["recipe=gpt2_mle", "model=gpt2_mini"]}


def main(rounds: int = 2) -> None:
    times = interleaved_step_times(RECIPES, VARIANTS, rounds=rounds)
    rows = ratio_rows(times, kind="variant", against="softmax_sdpa", said="softmax (SDPA)")
    save("attention", {"rows": rows, "method": __doc__.split("\n\n")[1].replace("\n", " ")})
    print(f"written to {REPO / 'bench' / 'results' / 'attention.json'}")


if __name__ == "__main__":
    main()
