"""best: degen-train at its best (the speed preset: every lever the CPU tests show exact on) beside a careful
compiled hand loop (hand_loop.py) on the same model, batch, dropout 0 and vocabulary: GPT-2 small at GPT-2's own
vocabulary (50,257 entries of random tokens, padded to 50,304) 64 × 1024, and BERT-base MLM 256 × 128 (a 30,522-entry
WordPiece on WikiText-2); tokens/s, MFU, their ratio, and the card's peak memory beside debug=plan's."""

from __future__ import annotations

from typing import Any

import torch

from bench.common import corpus_overrides
from bench.gpu.hand_loop import hand_loop
from bench.gpu.plan import Run
from bench.gpu.runs import ON_CPU, Context, Workload, device_peak
from degen_train.config import load_config
from degen_train.metrics.steady import WARMUP_STEPS


def hand_model(work: Workload, overrides: list[str]) -> Any:
    """The HF model the run with ``overrides`` builds (same config and tokenizer), fresh from seed 0."""
    from degen_train.data.datamodule import prepare_data
    from degen_train.models.backbone import build_hf_model

    cfg = load_config([*corpus_overrides(), *overrides])
    family, data_format = ("decoder", "causal") if work.kind == "gpt2" else ("encoder", "mlm")
    data = prepare_data(cfg.data, family=family, data_format=data_format, seed=0)
    torch.manual_seed(0)
    return build_hf_model(cfg.model, tokenizer=data.tokenizer, with_nsp_head=False, sequence_length=work.length)


def careful_loop(work: Workload, overrides: list[str], steps: int, mode: str | None = None) -> dict[str, Any]:
    """The careful hand loop (BERT: the head at the labelled rows; GPT-2: at every position, as a decoder's is in
    both), the whole model compiled on a card, on the model the best row builds."""
    device = torch.device("cpu" if ON_CPU else "cuda")
    mode = mode or ("careful" if work.kind == "bert" else "hf_default")
    return hand_loop(hand_model(work, overrides), kind=work.kind, mode=mode, batch=work.batch, length=work.length,
                     steps=steps, device=device, compiled=not ON_CPU, peak=device_peak(device))  # fmt: skip


def runs(ctx: Context) -> list[Run]:
    out = []
    for kind, work in ctx.work.items():
        out.append(Run("best", f"{kind}_careful_loop", kind, not ON_CPU, WARMUP_STEPS + ctx.steps,
                       lambda w=work, k=kind: careful_loop(w, ctx.best[k], ctx.steps)))  # fmt: skip
        out.append(ctx.ours_run("best", f"{kind}_ours", kind, with_plan=True))
    return out


def notes(rows: dict[str, Any]) -> list[str]:
    """Each workload's ratio to the careful loop, and the memory plan held against the card."""
    lines = []
    for kind in ("gpt2", "bert"):
        ours, loop = rows.get(f"{kind}_ours", {}), rows.get(f"{kind}_careful_loop", {})
        if ours.get("tokens_per_s") and loop.get("tokens_per_s"):
            ratio = ours["tokens_per_s"] / loop["tokens_per_s"]
            lines.append(f"{kind}: degen-train at its best ÷ the careful compiled loop = {ratio:.2f}×.")
        if ours.get("max_memory_allocated_gib") and ours.get("planned_peak_gib"):
            lines.append(f"{kind}: torch.cuda.max_memory_allocated {ours['max_memory_allocated_gib']:.2f} GiB, "
                         f"debug=plan's peak {ours['planned_peak_gib']:.2f} GiB (the plan's fake step is eager).")
    return lines
