"""What every row of the sitting is made of: one degen-train run in this process, the shapes it runs at, and the
overrides that keep its timed steps steady."""

from __future__ import annotations

import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.common import corpus_overrides
from bench.gpu.plan import Run
from degen_train.config import load_config
from degen_train.metrics.steady import WARMUP_STEPS
from degen_train.run.checks import check
from degen_train.run.memory_plan import make_plan
from degen_train.run.pretrain import train

ON_CPU = os.environ.get("DEGEN_BENCH_GPU_ON_CPU") == "1"  # a dry run of the code paths, at toy sizes
TIMED_STEPS = 20  # after WARMUP_STEPS: the median of 20 steps and their quartiles
GPT2_VOCABULARY = 50_257  # GPT-2's own tokenizer (padded to 50,304 by pad_vocab_to_multiple_of=64)


@dataclass(frozen=True)
class Workload:
    kind: str  # bert | gpt2 (hand_loop.py's kinds)
    recipe: str
    speed: str  # conf/speed/NAME.yaml
    batch: int
    length: int


def workloads() -> dict[str, Workload]:
    """The best row's shapes: GPT-2 small 64 × 1024 and BERT-base 256 × 128 (toy sizes on the CPU)."""
    if ON_CPU:
        return {"gpt2": Workload("gpt2", "gpt2_mle", "gpt2_small", 2, 32),
                "bert": Workload("bert", "bert_mlm", "bert_base", 4, 32)}  # fmt: skip
    return {"gpt2": Workload("gpt2", "gpt2_mle", "gpt2_small", 64, 1024),
            "bert": Workload("bert", "bert_mlm", "bert_base", 256, 128)}  # fmt: skip


def plain_shapes() -> dict[str, Any]:
    """The shapes of the rows that answer questions about the defaults, not the speed preset (host, exactness,
    fsdp): BERT-base MLM 128 × 128 and GPT-2 small 16 × 1024, as the sitting of 2026-11-26 measured them."""
    if ON_CPU:
        return {"bert": ("tiny", 8, 32), "gpt2": ("gpt2_tiny", 4, 64), "small": "tiny"}
    return {"bert": ("base", 128, 128), "gpt2": ("gpt2_small", 16, 1024), "small": "small"}


def device_peak(device: torch.device) -> float:
    """The bf16 peak the runs divide by (degen_train.metrics.flops.peak_flops): one definition of MFU for both."""
    from degen_train.metrics.flops import peak_flops

    return peak_flops(device, torch.bfloat16 if device.type == "cuda" else torch.float32, None)[0]


def trainer_overrides() -> list[str]:
    return ["trainer=cpu"] if ON_CPU else ["trainer=gpu"]


def steady(model: str, batch: int, length: int, steps: int) -> list[str]:
    """Overrides of a steady-rate run at the defaults: no periodic checkpoint, monitor or validation inside the timed
    steps. Their period is one past the last step: at the last step itself they would run inside its timed interval
    (the isotropy probe did, 0.6 s eager and 2.9 s compiled on an H200, halving the compiled rate)."""
    return [f"model={model}", f"data.batch_size={batch}", f"data.block_size={length}", f"model.max_position={length}",
            *_nothing_periodic(steps)]  # fmt: skip


def _nothing_periodic(steps: int) -> list[str]:
    """WARMUP_STEPS + ``steps`` updates with validation, checkpoint and probe one past the last (after the timing)."""
    total = WARMUP_STEPS + steps  # the warm-up (start-up, compilation) is left out of the steady window
    beyond = total + 1  # the end-of-training probe and checkpoint still run, after the timing
    return [f"trainer.max_steps={total}", f"trainer.val_check_interval={total}", "trainer.limit_val_batches=1",
            "final_validation=false", f"callbacks.checkpoint.every_n_train_steps={beyond}",
            f"callbacks.isotropy.every_n_steps={beyond}", "scheduler.warmup_steps=1"]  # fmt: skip


def best_overrides(work: Workload, data: list[str], steps: int) -> list[str]:
    """The speed preset at the workload's shape, steady (as ``steady``), blocks and head eager on the CPU."""
    cpu = ["model=gpt2_tiny" if work.kind == "gpt2" else "model=tiny", "model.compile=false",
           "model.compile_head=false"] if ON_CPU else []  # fmt: skip
    return [f"recipe={work.recipe}", f"speed={work.speed}", *data, *cpu, f"data.batch_size={work.batch}",
            f"data.block_size={work.length}", f"model.max_position={max(work.length, 512 if not ON_CPU else 32)}",
            *_nothing_periodic(steps), *trainer_overrides()]  # fmt: skip


def gpt2_vocabulary_data(folder: Path, words: int) -> list[str]:
    """Data overrides for random tokens at GPT-2's own vocabulary: a word-level tokenizer of 50,257 entries (entry 0
    <|endoftext|>, as GPT-2's last) and a text of random words, each one token. Speed does not depend on the text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, GPT2_VOCABULARY)}}
    core = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, model_max_length=1024)
    tokenizer.bos_token = tokenizer.eos_token = tokenizer.unk_token = tokenizer.pad_token = "<|endoftext|>"
    tokenizer.save_pretrained(str(folder / "tokenizer"))
    draw = random.Random(0)
    lines = (" ".join(f"w{draw.randrange(1, GPT2_VOCABULARY)}" for _ in range(1000)) for _ in range(words // 1000))
    (folder / "text.txt").write_text("\n".join(lines) + "\n")
    return ["data.source=text", f"data.path={folder / 'text.txt'}", "data.validation_path=null",
            "data.document_unit=line", f"data.tokenizer.path={folder / 'tokenizer'}"]  # fmt: skip


def ours(run_dir: Path, *overrides: str, keep: bool = False, with_plan: bool = False) -> dict[str, Any]:
    """One degen-train run in this process (data cached first, so its preparation is not timed): the summary's
    steady tokens/s and MFU, its one-clock step times, the wall time of the whole run and the tokens it trained. The
    run folder is deleted afterwards unless ``keep``: BERT-base checkpoints with their optimizer state filled the GPU
    machine's disk. The card's peak allocated memory is on every row; ``with_plan``: debug=plan's figure for the same
    run beside it (issue 52.4: the plan held against a card)."""
    common = [*corpus_overrides(), *trainer_overrides(), "export_hf=false", "logger=csv",
              "trainer.enable_progress_bar=false", "callbacks.throughput.count_total_flops=true"]  # fmt: skip
    train(load_config([*common, *overrides, "prepare_only=true"], run_dir=run_dir / "prepare"))
    planned = None
    if with_plan:
        plan = check(load_config([*common, *overrides, "plan.only=true"], run_dir=run_dir / "plan"))
        planned = make_plan(plan.config, plan.build_terms(), plan.weights, data_format=plan.data_format)["peak_gib"]
    cfg = load_config([*common, *overrides], run_dir=run_dir)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    summary = train(cfg)
    wall = time.perf_counter() - start
    allocated = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    tokens = summary["final_step"] * int(cfg.data.batch_size) * int(cfg.data.block_size)
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    mean_rate = summary.get("tokens_per_s")  # null where the throughput window never filled (issue 67.4)
    steady_rate = summary.get("steady_tokens_per_s") or mean_rate
    measured = summary.get("mfu") and steady_rate and mean_rate
    return {"tokens_per_s": steady_rate, "mean_tokens_per_s": mean_rate,
            "seconds_per_batch": summary["seconds_per_batch"], "wall_s": wall,
            "step_seconds": summary.get("step_seconds"),
            "mfu": summary["mfu"] * steady_rate / mean_rate if measured else None,
            "model_flops_per_token": summary["model_flops_per_token"], "warmup_seconds": summary.get("warmup_seconds"),
            "vocabulary": summary.get("vocabulary"), "periodic": summary.get("periodic") or {},
            "tokens_per_batch": int(cfg.data.batch_size) * int(cfg.data.block_size),
            "seconds_to_first_batch": summary.get("seconds_to_first_batch"),
            "end_to_end_tokens_per_s": tokens / wall, "max_memory_allocated_gib": allocated,
            "planned_peak_gib": planned,
            "total_flops_over_model_flops": summary["total_flops_over_model_flops"]}  # fmt: skip


@dataclass
class Context:
    """What a row builds its runs from: the scratch folder, the timed steps, the workloads and their best overrides
    (the speed preset at each shape, bench.gpu.runs.best_overrides)."""

    scratch: Path
    steps: int
    work: dict[str, Workload]
    data: dict[str, list[str]]
    best: dict[str, list[str]]

    def ours_run(self, row: str, name: str, kind: str, *extra: str, scale: float = 1.0, compiles: bool = True,
                 with_plan: bool = False) -> Run:  # fmt: skip
        """A degen-train run at the workload's best row with ``extra`` overrides on top."""
        return Run(row, name, kind, compiles and not ON_CPU, WARMUP_STEPS + self.steps,
                   lambda: ours(self.scratch / f"{row}_{name}", *self.best[kind], *extra, with_plan=with_plan),
                   scale)  # fmt: skip


def context(scratch: Path) -> Context:
    steps = TIMED_STEPS if not ON_CPU else 3
    work = workloads()
    (scratch / "gpt2_vocabulary").mkdir(parents=True, exist_ok=True)
    data = {"gpt2": gpt2_vocabulary_data(scratch / "gpt2_vocabulary", 1_200_000 if not ON_CPU else 4000),
            "bert": ["data.tokenizer.vocab_size=30522"]}  # fmt: skip
    best = {kind: best_overrides(w, data[kind], steps) for kind, w in work.items()}
    return Context(scratch, steps, work, data, best)


def step_time(row: dict[str, Any]) -> float | None:
    """A run's median step on the one clock (its mean seconds per batch where the clock read none)."""
    steps = row.get("step_seconds")
    return steps["median"] if isinstance(steps, dict) else row.get("seconds_per_batch")
