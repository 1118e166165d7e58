"""fsdp: model=small MLM 128 × 128 at the defaults on one device, against strategy=fsdp on the same card, with fp32
and with bf16 parameters: what FSDP2's sharding machinery costs where there is nothing to shard."""

from __future__ import annotations

from typing import Any

from bench.gpu.plan import Run
from bench.gpu.runs import Context, ours, plain_shapes, steady
from degen_train.metrics.steady import WARMUP_STEPS

VARIANTS = {"single_device": [], "fsdp2": ["strategy=fsdp"],
            "fsdp2_bf16_params": ["strategy=fsdp", "strategy.mixed_precision=bf16"]}  # fmt: skip


def runs(ctx: Context) -> list[Run]:
    shapes = plain_shapes()
    _, batch, length = shapes["bert"]
    base = ["recipe=bert_mlm", *steady(shapes["small"], batch, length, ctx.steps)]
    return [Run("fsdp", name, "bert", False, WARMUP_STEPS + ctx.steps,
                lambda n=name, e=extra: ours(ctx.scratch / f"fsdp_{n}", *base, *e), 0.5)
            for name, extra in VARIANTS.items()]  # fmt: skip


def compare(rows: dict[str, Any], results: dict[str, Any]) -> None:
    base = rows.get("single_device", {})
    for name, row in rows.items():
        if name != "single_device" and row.get("tokens_per_s") and base.get("tokens_per_s"):
            row["vs"] = f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}× the single-device run's tokens/s"
