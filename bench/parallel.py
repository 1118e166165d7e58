"""Past one process: FSDP2 against DDP, CosReg shard-wise against whole, torch.compile against eager.

- fsdp_vs_ddp: whole degen-train runs on 2 CPU processes (gloo), gpt2_mini MLE with and without CosReg at the
  same global batch, taking turns; tokens/s from each run's summary. CosReg's cost is the extra seconds per
  token it adds; under DDP every process regularises the whole matrix, under FSDP2 its own rows.
- compile: the degen-train step (backbone -> WeightedSum -> AdamW) on mini MLM, blocks compiled in place or
  eager, fp32 and bf16 autocast, taking turns step by step after the compile warm-up.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import corpus_overrides, interleaved, save
from bench.spine import batches, our_step
from degen_train.config import load_config
from degen_train.losses.catalog import build_terms, data_format_for
from degen_train.models.backbone import build_hf_model
from degen_train.models.compile import compile_blocks

QUIET = ["trainer.enable_progress_bar=false", "export_hf=false", "final_validation=false",
         "trainer.limit_val_batches=0", "~callbacks.checkpoint", "logger=none", "~callbacks.isotropy",
         "eval.sts=[]", "eval.wic=null"]  # fmt: skip


def two_process_run(overrides: list[str], steps: int) -> float:
    """tokens/s of a whole 2-process degen-train run (its summary's mean after the first step)."""
    command = [str(Path(sys.executable).parent / "degen-train"), *overrides, *QUIET, f"trainer.max_steps={steps}"]
    with tempfile.TemporaryDirectory() as run_dir:
        result = subprocess.run(
            [*command, f"hydra.run.dir={run_dir}"], capture_output=True, text=True, env={**os.environ}, timeout=3600
        )
        if result.returncode:
            raise RuntimeError(result.stderr[-3000:])
        return float(json.loads((Path(run_dir) / "summary.json").read_text())["tokens_per_s"])


def fsdp_vs_ddp(rounds: int = 2, steps: int = 30) -> dict[str, Any]:
    base = [*corpus_overrides(), "recipe=gpt2_mle", "model=gpt2_mini", "data.batch_size=8", "data.block_size=128",
            "trainer.devices=2", "trainer.accelerator=cpu"]  # fmt: skip
    configs = {
        "ddp": ["strategy=ddp"],
        "fsdp2": ["strategy=fsdp"],
        "ddp_cosreg": ["strategy=ddp", "regularizer=cosreg"],
        "fsdp2_cosreg": ["strategy=fsdp", "regularizer=cosreg"],
    }
    rates: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(rounds):  # configurations take turns, so a drift hits them alike
        for name, extra in configs.items():
            rates[name].append(two_process_run([*base, *extra], steps))
    mean = {name: sum(v) / len(v) for name, v in rates.items()}
    cosreg_cost = {s: 1 / mean[f"{s}_cosreg"] - 1 / mean[s] for s in ("ddp", "fsdp2")}  # seconds per token
    result = {
        "tokens_per_s": mean,
        "each_round": rates,
        "fsdp2_over_ddp": mean["fsdp2"] / mean["ddp"],
        "cosreg_seconds_per_1k_tokens": {k: 1000 * v for k, v in cosreg_cost.items()},
        "cosreg_cost_fsdp2_over_whole": cosreg_cost["fsdp2"] / cosreg_cost["ddp"],
        "global_batch": 16,
        "steps": steps,
    }
    print("fsdp2 vs ddp:", {k: f"{v:,.0f} tok/s" for k, v in mean.items()},
          f"FSDP2/DDP {result['fsdp2_over_ddp']:.2f}x, CosReg cost FSDP2/whole "
          f"{result['cosreg_cost_fsdp2_over_whole']:.2f}")  # fmt: skip
    return result


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product", "mkldnn",
              "onednn", "aten::linear", "aten::matmul", "cpp_fused_mm", "extern_kernels.mm")  # fmt: skip


def where_time_goes(step: Any, index: int = 3) -> dict[str, float]:
    """Shares of one step's self CPU time: matrix products (which compile leaves to the same BLAS / oneDNN
    kernels) against everything else (elementwise, norms, softmax, optimizer: what fusion can shorten)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(index)
    totals = {"matmul": 0.0, "optimizer": 0.0, "other": 0.0}
    for event in prof.key_averages():
        name = event.key
        kind = "matmul" if any(op in name for op in MATMUL_OPS) else "optimizer" if "_foreach" in name else "other"
        totals[kind] += event.self_cpu_time_total
    whole = sum(totals.values()) or 1.0
    return {kind: value / whole for kind, value in totals.items()}


def _cosreg_on_one_rank(rank: int, port: int, shape: tuple[int, int], rounds: int, results: Any) -> None:
    import statistics

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from degen_train.losses.cosreg import cosine_regularizer, sharded_cosine_regularizer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)  # two processes on two cores, as the FSDP2 runs
    weights = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    whole = torch.nn.Parameter(weights.clone())
    # The FSDP2 path: a row-sharded DTensor parameter, its local rows taken inside the step, the gradient
    # accumulated onto the DTensor as FSDP2's own reduce-scatter then finds it.
    sharded = torch.nn.Parameter(distribute_tensor(weights, init_device_mesh("cpu", (2,)), [Shard(0)]))

    def whole_step() -> None:
        cosine_regularizer(whole).backward()
        whole.grad = None

    def sharded_step() -> None:
        sharded_cosine_regularizer(sharded.to_local(), shape[0]).backward()
        sharded.grad = None

    times: dict[str, list[float]] = {"whole": [], "sharded": []}
    for i in range(rounds + 1):
        for name, step in (("whole", whole_step), ("sharded", sharded_step)):
            dist.barrier()
            start = time.perf_counter()
            step()
            if i:
                times[name].append(time.perf_counter() - start)
    results[rank] = {name: statistics.median(v) for name, v in times.items()}
    dist.destroy_process_group()


def cosreg_sharded_vs_whole(shape: tuple[int, int] = (50257, 768), rounds: int = 10) -> dict[str, Any]:
    """CosReg's own forward + backward on 2 processes: each on the whole matrix (DDP: every process
    regularises all V rows) against each on its half (FSDP2: shard-wise, one all-reduce of Σŵ)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_cosreg_on_one_rank, args=(port, shape, rounds, results), nprocs=2)
    seconds = {name: max(results[r][name] for r in (0, 1)) for name in ("whole", "sharded")}  # the slower rank
    result = {"shape": list(shape), "seconds": seconds, "sharded_over_whole": seconds["sharded"] / seconds["whole"]}
    print(f"cosreg {shape}: whole {seconds['whole'] * 1e3:.1f} ms, shard-wise {seconds['sharded'] * 1e3:.1f} ms "
          f"({result['sharded_over_whole']:.2f}x)")  # fmt: skip
    return result


def compiled_vs_eager(rounds: int = 8) -> dict[str, Any]:
    overrides = [*corpus_overrides(), "model=mini", "objective=mlm", "data.batch_size=32", "data.block_size=128",
                 "model.dropout=0", "model.attention_dropout=0"]  # fmt: skip
    cfg = load_config(overrides)
    terms, _ = build_terms({"objective": cfg.objective})
    data, tokenizer = batches(cfg, "encoder", data_format_for(terms, "encoder", "mini"), 6)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    tokens = sum(int(b["attention_mask"].sum()) for b in data) / len(data)
    steps, warmup_s = {}, {}
    for precision in ("fp32", "bf16"):
        bf16 = precision == "bf16"
        steps[f"eager_{precision}"] = our_step(cfg.objective, copy.deepcopy(model), data, bf16=bf16, fused=bf16)
        compiled = copy.deepcopy(model)
        compile_blocks(compiled)
        step = our_step(cfg.objective, compiled, data, bf16=bf16, fused=bf16)
        start = time.perf_counter()
        step(0)  # the compilation itself, timed apart
        warmup_s[f"compiled_{precision}"] = time.perf_counter() - start
        steps[f"compiled_{precision}"] = step
    seconds = interleaved(steps, rounds=rounds, warmup=2)
    rates = {name: tokens / s for name, s in seconds.items()}
    profiles = {name: where_time_goes(steps[name]) for name in steps}
    result = {
        "self_cpu_time_shares": profiles,
        "tokens_per_s": rates,
        "compiled_over_eager": {p: rates[f"compiled_{p}"] / rates[f"eager_{p}"] for p in ("fp32", "bf16")},
        "compiled_bf16_over_eager_bf16": rates["compiled_bf16"] / rates["eager_bf16"],
        "first_step_seconds": warmup_s,
        "rounds": rounds,
    }
    print("compile:", {k: f"{v:,.0f} tok/s" for k, v in rates.items()}, result["compiled_over_eager"])
    print("self CPU time shares:", {k: {c: f"{x:.0%}" for c, x in v.items()} for k, v in profiles.items()})
    return result


def main() -> dict:
    results = {
        "cosreg_sharded_vs_whole": cosreg_sharded_vs_whole(),
        "compile": compiled_vs_eager(),
        "fsdp_vs_ddp": fsdp_vs_ddp(),
    }
    save("parallel", results)
    return results


if __name__ == "__main__":
    main()
