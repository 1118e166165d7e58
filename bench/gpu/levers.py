"""levers: each lever of the speed preset switched off from the best row alone, no checkpoint inside any window:
blocks compiled, head + loss compiled, vocabulary padding; on GPT-2 also dropout 0 and tokens per step (half the
batch). The ratio is each run's tokens/s over its best row's."""

from __future__ import annotations

from typing import Any

from bench.gpu.plan import Run
from bench.gpu.runs import Context


def runs(ctx: Context) -> list[Run]:
    out = []
    for kind, work in ctx.work.items():
        out.append(ctx.ours_run("levers", f"{kind}_blocks_eager", kind, "model.compile=false", scale=2.0,
                                compiles=False))  # fmt: skip
        out.append(ctx.ours_run("levers", f"{kind}_head_eager", kind, "model.compile_head=false", scale=1.1))
        out.append(ctx.ours_run("levers", f"{kind}_vocabulary_unpadded", kind, "model.pad_vocab_to_multiple_of=1"))
        if kind == "bert":  # dropout and tokens per step are priced on GPT-2; BERT's budget goes to the terms
            continue
        out.append(ctx.ours_run("levers", f"{kind}_dropout_0.1", kind, "model.dropout=0.1",
                                "model.attention_dropout=0.1", scale=1.1))  # fmt: skip
        out.append(ctx.ours_run("levers", f"{kind}_half_batch", kind, f"data.batch_size={max(work.batch // 2, 1)}",
                                scale=0.55))  # fmt: skip
    return out


def compare(rows: dict[str, Any], results: dict[str, Any]) -> None:
    best = results.get("rows", {}).get("best", {})
    for name, row in rows.items():
        base = best.get(f"{name.split('_')[0]}_ours", {})
        if row.get("tokens_per_s") and base.get("tokens_per_s"):
            row["vs"] = f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}× the best row's tokens/s"
