"""host: the levers of the defaults that act on the host, each alone on BERT-base MLM 128 × 128 (the defaults, not
the speed preset): loader workers 0 against auto, and with 0 workers the collating thread (data.prefetch=auto)
against none, the divergence check read on the host (optimizer.fused=false) against deferred, checkpoints written in
the step against on a writer thread (one every third of the timed steps); and GPT-2 small 16 × 1024's chunked output
layer (objective.mle.chunk_size=1024, the default) against whole logits. Each ratio is over its own defaults' run,
beside which it runs."""

from __future__ import annotations

from typing import Any

from bench.gpu.plan import Run
from bench.gpu.runs import Context, ours, plain_shapes, steady
from degen_train.metrics.steady import WARMUP_STEPS

VARIANTS = {
    "defaults": [],
    "workers_0": ["data.num_workers=0"],  # data.prefetch=auto: the collating thread makes 2 batches ahead on a GPU
    "workers_0_prefetch_0": ["data.num_workers=0", "data.prefetch=0"],  # and without it (issue 73.2)
    "divergence_check_on_host": ["optimizer.fused=false"],
    "checkpoints_in_step": ["callbacks.checkpoint.background=false"],
}
DECODER = {"gpt2_chunked_output_layer": [], "gpt2_whole_logits": ["objective.mle.chunk_size=null"]}


def runs(ctx: Context) -> list[Run]:
    shapes = plain_shapes()
    model, batch, length = shapes["bert"]
    every = max(ctx.steps // 3, 1)
    bert = ["recipe=bert_mlm", *steady(model, batch, length, ctx.steps),
            f"callbacks.checkpoint.every_n_train_steps={every}"]  # fmt: skip
    decoder, d_batch, d_length = shapes["gpt2"]
    gpt2 = ["recipe=gpt2_mle", *steady(decoder, d_batch, d_length, ctx.steps)]
    out = []
    for name, extra in VARIANTS.items():  # 128 × 128 eager: about the best row's 256 × 128 compiled step
        out.append(Run("host", name, "bert", False, WARMUP_STEPS + ctx.steps,
                       lambda n=name, e=extra: ours(ctx.scratch / f"host_{n}", *bert, *e)))  # fmt: skip
    for name, extra in DECODER.items():  # 16 × 1024 eager: about half the best row's 64 × 1024 compiled step
        out.append(Run("host", name, "gpt2", False, WARMUP_STEPS + ctx.steps,
                       lambda n=name, e=extra: ours(ctx.scratch / f"host_{n}", *gpt2, *e), 0.5))  # fmt: skip
    return out


def compare(rows: dict[str, Any], results: dict[str, Any]) -> None:
    for name, row in rows.items():
        base = rows.get("gpt2_chunked_output_layer" if name.startswith("gpt2") else "defaults", {})
        if row.get("tokens_per_s") and base.get("tokens_per_s"):
            row["vs"] = f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}× its defaults' tokens/s"
