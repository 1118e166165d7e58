"""A decoder's output layer: the chunked cross-entropy against the plain GPT-2 loop, at V = 50,257.

gpt2_mini shapes (4 layers, width 256) with GPT-2's vocabulary, batch 32 × 128 of random ids (the cost
does not depend on the text), fp32 and bf16 autocast, the configurations taking turns step by step.
Peak memory: each configuration's two steps in a fresh process, peak RSS above the process after the model
and optimizer are built.
"""

from __future__ import annotations

import multiprocessing
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from bench.common import interleaved, save
from bench.spine import our_step, plain_step

VOCAB, BATCH, LENGTH = 50257, 32, 128


def model() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=256, n_layer=4, n_head=4, n_inner=1024, n_positions=LENGTH)
    return GPT2LMHeadModel(config).train()


def batches(count: int = 4) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=generator)
        shifted = torch.full_like(ids, -100)
        shifted[:, :-1] = ids[:, 1:]  # ours: position t predicts t + 1 (the collator's layout)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": shifted, "hf_labels": ids})
    return out


def hf_batches() -> list[dict[str, torch.Tensor]]:
    """The same batches for GPT2LMHeadModel, which shifts the labels itself."""
    return [{**b, "labels": b["hf_labels"]} for b in batches()]


def ours(bf16: bool, chunk_size: int | None) -> Callable[[int], None]:
    return our_step({"mle": {"chunk_size": chunk_size}}, model(), batches(), bf16=bf16, fused=False)


# The same steps as the spine benchmark (AdamW, gradient clipping at 1), on these shapes.
CONFIGS: dict[str, Callable[[], Callable[[int], None]]] = {
    "plain_hf_fp32": lambda: plain_step(model(), hf_batches()),
    "ours_full_logits_fp32": lambda: ours(False, None),
    "ours_chunked_fp32": lambda: ours(False, 1024),
    "plain_hf_bf16": lambda: plain_step(model(), hf_batches(), bf16=True),
    "ours_chunked_bf16": lambda: ours(True, 1024),
}


def peak_rss_kb() -> int:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a spawned child
    would report its (large) parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _peak(name: str, queue: Any) -> None:
    step = CONFIGS[name]()
    before = peak_rss_kb()
    step(0)
    step(1)
    queue.put((peak_rss_kb() - before) / 2**20)


def peak_growth_gb(name: str) -> float:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_peak, args=(name, queue))
    process.start()
    value = queue.get()
    process.join()
    return value


def main(rounds: int = 5) -> dict[str, Any]:
    seconds = interleaved({name: make() for name, make in CONFIGS.items()}, rounds=rounds)
    tokens = BATCH * LENGTH
    rates = {name: tokens / s for name, s in seconds.items()}
    payload = {
        "vocab": VOCAB,
        "batch": [BATCH, LENGTH],
        "tokens_per_s": rates,
        "ratio_fp32_vs_plain": {k: v / rates["plain_hf_fp32"] for k, v in rates.items() if k.endswith("fp32")},
        "ratio_bf16_vs_plain_bf16": {k: v / rates["plain_hf_bf16"] for k, v in rates.items() if k.endswith("bf16")},
        "peak_rss_growth_gb": {name: peak_growth_gb(name) for name in CONFIGS},
        "rounds": rounds,
    }
    save("chunked_ce", payload)
    print({k: f"{v:,.0f} tok/s" for k, v in rates.items()}, payload["ratio_fp32_vs_plain"])
    print(payload["ratio_bf16_vs_plain_bf16"], payload["peak_rss_growth_gb"])
    return payload


if __name__ == "__main__":
    main()
