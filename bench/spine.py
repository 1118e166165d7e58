"""Spine benchmark: degen-train's step against a plain PyTorch loop over the same HF model and batches.

Side by side in one process, same data and batch, configurations taking turns step by step: the
ratios are what counts, not the absolute rates.
"""

from __future__ import annotations

import copy
import itertools
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from transformers import BertForMaskedLM, GPT2LMHeadModel

from bench.common import corpus_overrides, interleaved, matmul_peak, save
from degen_train.config import load_config
from degen_train.data.datamodule import PretrainDataModule, make_collator, prepare_data
from degen_train.devices.matmul_peak import measured_matmul_peak
from degen_train.losses.catalog import build_terms, data_format_for
from degen_train.losses.contract import WeightedSum
from degen_train.metrics.flops import body_and_head_parameters, model_flops
from degen_train.models.backbone import Backbone, build_hf_model
from degen_train.optim.optimizer import build_optimizer
from degen_train.run.pretrain import train


def batches(cfg: Any, family: str, fmt: str, count: int) -> tuple[list[dict], Any]:
    data = prepare_data(cfg.data, family=family, data_format=fmt, seed=0)
    collator = make_collator(data.tokenizer, data_format=fmt, masking=cfg.masking, vocab_size=len(data.tokenizer))
    module = PretrainDataModule(data, collator, batch_size=int(cfg.data.batch_size), num_workers=0, seed=0)
    return list(itertools.islice(iter(module.train_dataloader()), count)), data.tokenizer


def model_flops_per_token(model: Any, seq: int, predicted_share: float) -> float:
    """Useful FLOPs per token, as every run counts them (degen_train.metrics.flops.model_flops)."""
    body, head = body_and_head_parameters(model, model.get_output_embeddings())
    layers, hidden = model.config.num_hidden_layers, model.config.hidden_size
    flops = model_flops(body=body, head=head, layers=layers, hidden=hidden, batch=1, length=seq, predicted=0)
    return flops / seq + 6 * head * predicted_share


def our_step(objective: Any, model: Any, data: list[dict], *, bf16: bool, fused: bool) -> Callable[[int], None]:
    """degen-train's training step: Backbone (logits at labelled positions) -> WeightedSum -> AdamW."""
    terms, weights = build_terms({"objective": objective})
    backbone, loss = Backbone(model), WeightedSum(terms, weights)
    optimizer = build_optimizer([backbone], lr=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8, fused=fused)

    def step(i: int) -> None:
        batch = data[i % len(data)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            total, _ = loss(backbone(batch, requires=loss.requires))
        total.backward()
        torch.nn.utils.clip_grad_norm_(backbone.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def plain_step(model: Any, data: list[dict], *, bf16: bool = False) -> Callable[[int], None]:
    """The HF way: model(**batch, labels=...) computes logits everywhere and its own loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def step(i: int) -> None:
        batch = data[i % len(data)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def full_run(overrides: list[str], steps: int = 12) -> float:
    """The whole degen-train run (Lightning loop, data loading, logging): mean tokens/s after step 1."""
    with tempfile.TemporaryDirectory() as run_dir:
        quiet = [
            "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false",
            "export_hf=false",
            "final_validation=false",
            "trainer.limit_val_batches=0",
            "~callbacks.checkpoint",
            "logger=none",
            "~callbacks.isotropy",
        ]
        summary = train(load_config([*overrides, *quiet, f"trainer.max_steps={steps}"], run_dir=run_dir))
    return summary["tokens_per_s"]


def gpt2_labels(batch: dict) -> dict:
    """HF's GPT-2 shifts labels itself: give it the unshifted ids with padding ignored."""
    labels = batch["original_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return {**batch, "labels": labels}


CLI_PASSES = 2  # each whole-run configuration this many times, in turns


def main(rounds: int = 8) -> dict:
    peak = matmul_peak()
    peak_bf16 = measured_matmul_peak("cpu", torch.bfloat16)  # a bf16 run's MFU is against the bf16 peak
    results: dict[str, Any] = {"matmul_peak_gflops": peak / 1e9, "bf16_matmul_peak_gflops": peak_bf16 / 1e9}
    results["rounds"], results["cli_passes"] = rounds, CLI_PASSES
    for family, model_name, objective, baseline in (
        ("encoder", "mini", "mlm", BertForMaskedLM),
        ("decoder", "gpt2_mini", "mle", GPT2LMHeadModel),
    ):
        overrides = [
            *corpus_overrides(),
            f"model={model_name}",
            f"objective={objective}",
            "data.batch_size=32",
            "data.block_size=128",
        ]
        cfg = load_config(overrides)
        terms, _ = build_terms({"objective": cfg.objective})
        data, tokenizer = batches(cfg, family, data_format_for(terms, family, model_name), 6)
        torch.manual_seed(0)
        model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
        assert type(model) is baseline  # the stock HF class, used as HF intends
        tokens = sum(int(b["attention_mask"].sum()) for b in data) / len(data)
        share = sum(int((b["labels"] != -100).sum()) for b in data) / (tokens * len(data))
        flops = model_flops_per_token(model, 128, share)
        steps = {
            "plain_hf_fp32": plain_step(
                copy.deepcopy(model), data if family == "encoder" else [gpt2_labels(b) for b in data]
            ),
            "degen_train_fp32": our_step(cfg.objective, copy.deepcopy(model), data, bf16=False, fused=False),
        }
        if family == "encoder":
            steps["degen_train_bf16_fused"] = our_step(cfg.objective, copy.deepcopy(model), data, bf16=True, fused=True)
        seconds = interleaved(steps, rounds=rounds)
        rates = {name: tokens / s for name, s in seconds.items()}
        # data.prefetch=auto (the default) beside the collating thread forced on and off (issue 73.2), in turns
        bf16 = ["trainer.precision=bf16-mixed", "optimizer.fused=true"]
        runs = {"degen_train_cli_fp32": overrides}
        if family == "encoder":
            runs |= {"degen_train_cli_bf16_fused": [*overrides, *bf16]}
        for name, given in list(runs.items()):
            runs |= {f"{name}_prefetch_{depth}": [*given, f"data.prefetch={depth}"] for depth in (0, 2)}
        # whole runs in turns, twice over (A B C A B C): one run's drift on a shared machine is ~20%, so each CLI
        # rate is the mean of two runs made apart, and the settings meet the same minutes of the machine
        passes = [{name: full_run(given) for name, given in runs.items()} for _ in range(CLI_PASSES)]
        rates |= {name: sum(p[name] for p in passes) / CLI_PASSES for name in runs}
        entry = {
            "vocab": len(tokenizer),
            "tokens_per_s": rates,
            "model_flops_per_token": flops,
            "ratio_vs_plain": {k: v / rates["plain_hf_fp32"] for k, v in rates.items()},
            "mfu": {k: v * flops / (peak_bf16 if "bf16" in k else peak) for k, v in rates.items()},
        }
        results[model_name] = entry
        print(
            model_name,
            {
                k: f"{v:,.0f} tok/s ({entry['ratio_vs_plain'][k]:.2f}x, MFU {entry['mfu'][k]:.1%})"
                for k, v in rates.items()
            },
        )
    save("spine", results)
    return results


if __name__ == "__main__":
    main()
