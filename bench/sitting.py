"""make gpu-sitting: one lent card's sitting, decided in advance: what it runs, in what order, and how long it takes.

Its rows, in the order a sitting cut short still answers the first questions (issue 55):
  best        degen-train at its best (the speed preset: every lever the CPU tests show exact on) beside a careful
              compiled hand loop (bench/hand_loop.py) on the same model, batch, dropout 0 and vocabulary: GPT-2 small
              at GPT-2's own vocabulary (50,257 entries of random tokens, padded to 50,304) 64 × 1024 and BERT-base
              MLM 256 × 128 (a 30,522-entry WordPiece on WikiText-2); tokens/s, MFU and their ratio
  levers      each lever switched off from that best row alone, no checkpoint inside any window: blocks compiled,
              head + loss compiled, vocabulary padding; on GPT-2 also dropout 0 and tokens per step (half the batch)
  terms       the regularizers at the best row: CosReg, TaCL (its teacher compiled), COCO-LM (its generator
              compiled), SimCTG; step time over the plain row's beside total FLOPs over model FLOPs
  end_to_end  the best GPT-2 row over a default cadence (checkpoint, probe and validation every 100 updates)
Gao at scale is its own command (make reproduce-gao-scale); the sitting prints its estimate beside its own.

Every row times its steps by one clock (degen_train.metrics.step_clock: CUDA events at each step's end, one
synchronise at the window's end) and gives the median and interquartile range of its step times, the steps timed,
the graphs dynamo compiled during it (torch._dynamo's counters) and the peak FLOP/s its MFU divides by.

Before anything runs the sitting prints its plan: each run's estimate (from the last sitting's measured times where
docs/gpu/sitting.json holds them, else from the constants below, which come from the H200 sittings of 2026-11-25/26),
and which runs fit in BUDGET_S; a run that would end past the deadline is not started (it is listed with the command
that runs it). Results are written after every run: bench/results/sitting.{json,md}, and on a card also
docs/gpu/sitting.json and docs/gpu.md's sitting table. The card (nvidia-smi: name, driver, clocks, power limit) and
the versions (torch, CUDA, transformers, lightning) head the record.

DEGEN_BENCH_GPU_ON_CPU=1 runs the same plan on the CPU at toy sizes, blocks and head eager (tests/test_gpu_sitting.py):
the code, not numbers.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS, corpus_overrides
from bench.gpu import device_peak, ours, write_page_table
from bench.hand_loop import hand_loop
from degen_train.config import load_config
from degen_train.metrics.steady import WARMUP_STEPS

ON_CPU = os.environ.get("DEGEN_BENCH_GPU_ON_CPU") == "1"
REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "docs" / "gpu" / "sitting.json"  # the last sitting on a card, committed: the next estimate's times
PAGE = REPO / "docs" / "gpu.md"
TABLE_START, TABLE_END = "<!-- sitting-table:start -->", "<!-- sitting-table:end -->"
BUDGET_S = 540.0  # nine minutes of command time: a 10-minute call, and 15 minutes of card with its start
TIMED_STEPS = 20  # after WARMUP_STEPS: the median of 20 steps and their quartiles
GPT2_VOCABULARY = 50_257  # GPT-2's own tokenizer (padded to 50,304 by pad_vocab_to_multiple_of=64)
ROWS = ("best", "levers", "terms", "end_to_end")


@dataclass(frozen=True)
class Workload:
    kind: str  # bert | gpt2 (bench/hand_loop.py's kinds)
    recipe: str
    speed: str  # conf/speed/NAME.yaml
    batch: int
    length: int


def workloads() -> dict[str, Workload]:
    if ON_CPU:  # toy sizes: the code paths, in seconds
        return {"gpt2": Workload("gpt2", "gpt2_mle", "gpt2_small", 2, 32),
                "bert": Workload("bert", "bert_mlm", "bert_base", 4, 32)}  # fmt: skip
    return {"gpt2": Workload("gpt2", "gpt2_mle", "gpt2_small", 64, 1024),
            "bert": Workload("bert", "bert_mlm", "bert_base", 256, 128)}  # fmt: skip


# --- the estimate -------------------------------------------------------------------------------------------------

# Seconds per run on an H100/H200 before the first step (model build, data from the cache, Lightning's set-up), a
# compile's first and cached cost, and each workload's best step. From the sittings of 2026-11-25/26 (a BERT-base or
# GPT-2 small run of 60 updates took 10-14 s whole; compiling GPT-2's whole model about 30 s) and the FLOPs of a
# step at 35% of a 989.5 TFLOP/s card (GPT-2 64 × 1024 × 854.9M FLOPs: 0.16 s; BERT 256 × 128: 0.07 s).
START_S = 9.0
PREPARE_S = 30.0  # a workload's first run: its tokenizer and examples made once (the cache serves the rest)
COMPILE_S = {"first": 35.0, "cached": 10.0}
STEP_S = {"gpt2": 0.16, "bert": 0.07}


@dataclass
class Run:
    """One run of the sitting: its row, name, what it costs by the estimate, and what it does."""

    row: str
    name: str
    kind: str
    compiles: bool
    steps: int
    action: Any = field(repr=False)  # () -> dict
    step_scale: float = 1.0  # its step against the workload's best (a term's extra work, a lever's)

    @property
    def compile_key(self) -> str:
        """Runs that compile the same graphs (the inductor caches serve the later ones): the hand loop's whole model
        and degen-train's blocks are different graphs."""
        return f"{self.kind}/{'loop' if self.name.endswith('careful_loop') else 'ours'}"

    def estimate(self, first_compile: bool, first_of_kind: bool, last: dict[str, float]) -> float:
        if f"{self.row}/{self.name}" in last:  # the last sitting's own time for this run
            return last[f"{self.row}/{self.name}"]
        compile_s = COMPILE_S["first" if first_compile else "cached"] if self.compiles else 0.0
        prepare_s = PREPARE_S if first_of_kind else 0.0
        return START_S + prepare_s + compile_s + self.steps * STEP_S[self.kind] * self.step_scale


def last_times(record: Path = RECORD) -> dict[str, float]:
    """{row/run: seconds} measured by the last sitting on a card (docs/gpu/sitting.json), or {}."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    seconds = data.get("run_seconds", {}) if isinstance(data, dict) else {}
    return {str(k): float(v) for k, v in seconds.items() if isinstance(v, int | float)}


def plan(runs: list[Run], budget: float, last: dict[str, float]) -> tuple[list[tuple[Run, float]], list[Run]]:
    """(the runs that fit, each with its estimate; the runs left for another sitting), in order: a run is taken when
    its estimate still ends inside the budget, so a cheap run after an expensive one may still be taken."""
    taken, left, spent, compiled, prepared = [], [], 0.0, set(), set()
    for run in runs:
        seconds = run.estimate(run.compile_key not in compiled, run.kind not in prepared, last)
        if spent + seconds <= budget:
            taken.append((run, seconds))
            spent += seconds
            prepared.add(run.kind)
            if run.compiles:
                compiled.add(run.compile_key)
        else:
            left.append(run)
    return taken, left


def gao_scale_estimate() -> float:
    """make reproduce-gao-scale's seconds by the same constants: 6 runs × 3,000 steps of 64 × 256 tokens of a
    23.5M-parameter decoder (6·N·T FLOPs at 35% of the card), each with its start, one compile, per-word perplexity
    and the analysis (about 15 s each)."""
    parameters = 23.5e6  # conf/model/gpt2_gao_scale.yaml's decoder (conf/reproduce/gao_scale.yaml)
    seconds_per_run = 3000 * 6 * parameters * 64 * 256 / (0.35 * 989.5e12)
    return 6 * (START_S + seconds_per_run + 15.0) + COMPILE_S["first"]


# --- the runs -----------------------------------------------------------------------------------------------------


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


def best_overrides(work: Workload, data: list[str], steps: int) -> list[str]:
    """The speed preset at the workload's shape, steady: nothing periodic inside the timed steps (bench.gpu.steady)."""
    total = WARMUP_STEPS + steps
    beyond = total + 1
    cpu = ["model=gpt2_tiny" if work.kind == "gpt2" else "model=tiny", "model.compile=false",
           "model.compile_head=false"] if ON_CPU else []  # fmt: skip
    return [f"recipe={work.recipe}", f"speed={work.speed}", *data, *cpu, f"data.batch_size={work.batch}",
            f"data.block_size={work.length}", f"model.max_position={max(work.length, 512 if not ON_CPU else 32)}",
            f"trainer.max_steps={total}", f"trainer.val_check_interval={total}", "trainer.limit_val_batches=1",
            "final_validation=false", f"callbacks.checkpoint.every_n_train_steps={beyond}",
            f"callbacks.isotropy.every_n_steps={beyond}", "scheduler.warmup_steps=1"]  # fmt: skip


def careful_loop(work: Workload, overrides: list[str], steps: int) -> dict[str, Any]:
    """The careful hand loop, whole model compiled, on the model the best row builds (same config and tokenizer)."""
    from degen_train.data.datamodule import prepare_data
    from degen_train.models.backbone import build_hf_model

    cfg = load_config([*corpus_overrides(), *overrides])
    family, data_format = ("decoder", "causal") if work.kind == "gpt2" else ("encoder", "mlm")
    data = prepare_data(cfg.data, family=family, data_format=data_format, seed=0)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=data.tokenizer, with_nsp_head=False, sequence_length=work.length)
    device = torch.device("cpu" if ON_CPU else "cuda")
    mode = "careful" if work.kind == "bert" else "hf_default"  # a decoder's head is at every position in both
    return hand_loop(model, kind=work.kind, mode=mode, batch=work.batch, length=work.length, steps=steps,
                     device=device, compiled=not ON_CPU, peak=device_peak(device))  # fmt: skip


def trainer_overrides() -> list[str]:
    return ["trainer=cpu"] if ON_CPU else []  # the presets say trainer=gpu


def runs(scratch: Path, rows: tuple[str, ...]) -> list[Run]:
    """Every run of the named rows, in the sitting's order."""
    steps = TIMED_STEPS if not ON_CPU else 3
    work = workloads()
    (scratch / "gpt2_vocabulary").mkdir(parents=True, exist_ok=True)
    data = {"gpt2": gpt2_vocabulary_data(scratch / "gpt2_vocabulary", 1_200_000 if not ON_CPU else 4000),
            "bert": ["data.tokenizer.vocab_size=30522"]}  # fmt: skip
    best = {kind: [*best_overrides(w, data[kind], steps), *trainer_overrides()] for kind, w in work.items()}
    out: list[Run] = []

    def ours_run(row: str, name: str, kind: str, *extra: str, scale: float = 1.0, compiles: bool = True) -> None:
        out.append(Run(row, name, kind, compiles and not ON_CPU, WARMUP_STEPS + steps,
                       lambda: ours(scratch / f"{row}_{name}", *best[kind], *extra), scale))  # fmt: skip

    if "best" in rows:
        for kind, w in work.items():
            out.append(Run("best", f"{kind}_careful_loop", kind, not ON_CPU, WARMUP_STEPS + steps,
                           lambda w=w, kind=kind: careful_loop(w, best[kind], steps)))  # fmt: skip
            ours_run("best", f"{kind}_ours", kind)
    if "levers" in rows:
        for kind, w in work.items():
            ours_run("levers", f"{kind}_blocks_eager", kind, "model.compile=false", scale=2.0, compiles=False)
            ours_run("levers", f"{kind}_head_eager", kind, "model.compile_head=false", scale=1.1)
            ours_run("levers", f"{kind}_vocabulary_unpadded", kind, "model.pad_vocab_to_multiple_of=1")
            if kind == "bert":  # dropout and tokens per step are priced on GPT-2; BERT's budget goes to the terms
                continue
            ours_run("levers", f"{kind}_dropout_0.1", kind, "model.dropout=0.1", "model.attention_dropout=0.1",
                     scale=1.1)  # fmt: skip
            ours_run("levers", f"{kind}_half_batch", kind, f"data.batch_size={max(w.batch // 2, 1)}", scale=0.55)
    if "terms" in rows:
        teacher = scratch / "teacher"
        out.append(Run("terms", "tacl_teacher", "bert", False, 2, lambda: teacher_run(teacher, work["bert"], data)))
        ours_run("terms", "cosreg", "bert", "regularizer=cosreg")
        ours_run("terms", "tacl", "bert", "recipe=tacl", f"teacher={teacher}", scale=2.2)
        ours_run("terms", "coco_lm", "bert", "recipe=coco_lm", scale=2.2)
        ours_run("terms", "simctg", "gpt2", "recipe=simctg", scale=1.3)
    if "end_to_end" in rows:
        long = 300 if not ON_CPU else 12
        every = 100 if not ON_CPU else 4
        out.append(Run("end_to_end", "gpt2_default_cadence", "gpt2", not ON_CPU, long + 40,  # + the periodic work
                       lambda: ours(scratch / "end_to_end", *best["gpt2"], f"trainer.max_steps={long}",
                                    f"trainer.val_check_interval={every}", "trainer.limit_val_batches=null",
                                    f"callbacks.checkpoint.every_n_train_steps={every}",
                                    f"callbacks.isotropy.every_n_steps={every}", "final_validation=true")))  # fmt: skip
    return out


def teacher_run(folder: Path, work: Workload, data: dict[str, Any]) -> dict[str, Any]:
    """TaCL's teacher: a BERT-base MLM+NSP of two steps at the best row's shape and vocabulary (its speed only)."""
    from degen_train.run.pretrain import train

    model = ["model=tiny"] if ON_CPU else []
    cfg = load_config([*corpus_overrides(), "recipe=bert_mlm_nsp", f"speed={work.speed}", *model,
                       *trainer_overrides(), *data["bert"], "model.compile=false", "model.compile_head=false",
                       "trainer.max_steps=2", f"data.block_size={work.length}", f"data.batch_size={work.batch}",
                       "logger=csv", "trainer.enable_progress_bar=false"], run_dir=folder)  # fmt: skip
    train(cfg)
    return {"teacher": str(folder)}


# --- the record ---------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """The card as nvidia-smi reports it and the versions of what ran on it."""
    import lightning
    import transformers

    record: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                              "transformers": transformers.__version__, "lightning": lightning.__version__,
                              "python": sys.version.split()[0]}  # fmt: skip
    fields = ("name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,power.max_limit,"
              "memory.total")
    try:
        answer = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=20, check=True).stdout.strip().splitlines()  # fmt: skip
        record["nvidia_smi"] = [dict(zip(fields.split(","), (v.strip() for v in line.split(",")), strict=False))
                                for line in answer]  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        record["nvidia_smi"] = f"not read: {type(error).__name__}"
    record["card"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (dry run)"
    record["peak_flops"] = device_peak(torch.device("cuda" if torch.cuda.is_available() and not ON_CPU else "cpu"))
    return record


def graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def table(results: dict[str, Any]) -> str:
    """docs/gpu.md's sitting table from whatever runs the results hold."""
    card = results["machine"]
    rows = results.get("rows", {})
    clocks = sorted({r["step_seconds"]["clock"] for row in rows.values() for r in row.values()
                     if isinstance(r.get("step_seconds"), dict)})  # fmt: skip
    lines = [f"Measured by `{results['command']}` on {card['card']} (torch {card['torch']}, CUDA {card['cuda']}), "
             f"{results['date']}; peak {card['peak_flops'] / 1e12:,.1f} TFLOP/s. One clock for every row "
             f"({', '.join(clocks) or 'none read'}, metrics/step_clock.py); step times are the median and "
             f"interquartile range of the steps after the first {WARMUP_STEPS}.", "",
             "| row | run | tokens/s | MFU | step ms (IQR) | graphs | vs |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for row_name in ROWS:
        for name, row in rows.get(row_name, {}).items():
            if "tokens_per_s" not in row:  # a failure, a run left out, or one that only prepares (TaCL's teacher)
                said = row.get("error") or row.get("left") or "prepared"
                lines.append(f"| {row_name} | {name} | {said[:120]} | | | | |")
                continue
            steps = row.get("step_seconds") or {}
            step = f"{steps['median'] * 1e3:,.1f} ({steps['interquartile'] * 1e3:,.1f})" if steps else "–"
            mfu = f"{row['mfu']:.1%}" if row.get("mfu") else "–"
            rate = row["tokens_per_s"]
            shown = f"{rate / 1e3:,.0f}k" if rate >= 1e4 else f"{rate:,.0f}"
            lines.append(f"| {row_name} | {name} | {shown} | {mfu} | {step} | "
                         f"{row.get('graphs_compiled', 0)} | {row.get('vs', '')} |")  # fmt: skip
    for kind in ("gpt2", "bert"):
        best = rows.get("best", {})
        if f"{kind}_ours" in best and f"{kind}_careful_loop" in best and "tokens_per_s" in best[f"{kind}_ours"]:
            ratio = best[f"{kind}_ours"]["tokens_per_s"] / best[f"{kind}_careful_loop"]["tokens_per_s"]
            lines.append(f"\n{kind}: degen-train at its best ÷ the careful compiled loop = {ratio:.2f}×.")
    return "\n".join(lines).rstrip() + "\n"


def compare(results: dict[str, Any]) -> None:
    """Each lever's and term's ratio to its best row (levers: tokens/s; terms: step time beside FLOP ratio)."""
    rows = results.get("rows", {})
    best = rows.get("best", {})
    for name, row in rows.get("levers", {}).items():
        base = best.get(f"{name.split('_')[0]}_ours", {})
        if "tokens_per_s" in row and "tokens_per_s" in base:
            row["vs"] = f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}× the best row's tokens/s"
    for name, row in rows.get("terms", {}).items():
        base = best.get("gpt2_ours" if name == "simctg" else "bert_ours", {})
        if step_time(row) and step_time(base) and row.get("total_flops_over_model_flops"):
            flops = row["total_flops_over_model_flops"] / (base.get("total_flops_over_model_flops") or 1.0)
            row["vs"] = f"{step_time(row) / step_time(base):.2f}× the step time at {flops:.2f}× the FLOPs"
    for row in rows.get("end_to_end", {}).values():
        base = best.get("gpt2_ours", {})
        if "end_to_end_tokens_per_s" in row and "tokens_per_s" in base:
            row["vs"] = f"{row['end_to_end_tokens_per_s'] / base['tokens_per_s']:.2f}× the best row's steady rate"


def step_time(row: dict[str, Any]) -> float | None:
    """A run's median step on the one clock (its mean seconds per batch where the clock read none)."""
    steps = row.get("step_seconds")
    return steps["median"] if isinstance(steps, dict) else row.get("seconds_per_batch")


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available() and not ON_CPU:
        print("gpu-sitting: no CUDA device on this machine; run it where one is (nothing was measured)")
        return 2
    wanted = tuple(argv) or ROWS
    unknown = [r for r in wanted if r not in ROWS]
    if unknown:
        print(f"gpu-sitting: unknown row(s) {', '.join(unknown)}; choose from {', '.join(ROWS)}")
        return 2
    started = time.perf_counter()
    folder = Path(os.environ.get("DEGEN_BENCH_RESULTS", RESULTS))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("sitting_dry_run.json" if ON_CPU else "sitting.json")
    with tempfile.TemporaryDirectory(prefix="gpu_sitting_") as scratch:
        every = runs(Path(scratch), wanted)
        taken, left = plan(every, BUDGET_S, last_times())
        command = "make gpu-sitting" + (f" ARGS='{' '.join(argv)}'" if argv else "")
        print(f"gpu-sitting: {len(taken)} runs, about {sum(s for _, s in taken) / 60:.1f} min by the estimate "
              f"(budget {BUDGET_S / 60:.0f} min):", flush=True)  # fmt: skip
        for run, seconds in taken:
            print(f"  {run.row}/{run.name}: {seconds:.0f} s")
        for run in left:
            print(f"  {run.row}/{run.name}: not in this sitting (the next: make gpu-sitting ARGS={run.row})")
        print(f"  Gao at scale: its own command, make reproduce-gao-scale, about {gao_scale_estimate() / 60:.1f} min",
              flush=True)  # fmt: skip
        results: dict[str, Any] = {"command": command, "date": time.strftime("%Y-%m-%d"), "machine": machine(),
                                   "budget_s": BUDGET_S, "rows": {}, "run_seconds": {},
                                   "estimate_s": {f"{r.row}/{r.name}": round(s, 1) for r, s in taken}}  # fmt: skip
        for run in left:
            results["rows"].setdefault(run.row, {})[run.name] = {"left": "not started: past the sitting's budget"}
        failed = False
        for run, seconds in taken:
            elapsed = time.perf_counter() - started
            if elapsed + seconds > BUDGET_S:  # the runs before took longer than their estimate: end cleanly
                results["rows"].setdefault(run.row, {})[run.name] = {"left": "not started: the deadline"}
                print(f"gpu-sitting: {run.row}/{run.name} not started ({elapsed:.0f} s gone, {seconds:.0f} s more)")
                continue
            print(f"gpu-sitting: {run.row}/{run.name} ...", flush=True)
            before, start = graphs_compiled(), time.perf_counter()
            torch._dynamo.reset()  # each run compiles its own graphs (the inductor caches stay warm)
            try:
                result = run.action()
                result["graphs_compiled"] = graphs_compiled() - before if not ON_CPU else 0
                result["peak_flops"] = results["machine"]["peak_flops"]
            except Exception as error:  # noqa: BLE001 - one run's failure is a result; the sitting goes on
                failed = True
                result = {"error": f"{type(error).__name__}: {error}"[:2000]}
            results["run_seconds"][f"{run.row}/{run.name}"] = round(time.perf_counter() - start, 1)
            results["rows"].setdefault(run.row, {})[run.name] = result
            compare(results)
            results["elapsed_s"] = round(time.perf_counter() - started, 1)
            path.write_text(json.dumps(results, indent=2, default=str) + "\n")  # after every run: a cut keeps it
            path.with_suffix(".md").write_text(table(results))
    text = table(results)
    print(text)
    if not ON_CPU:
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, RECORD)
        if write_page_table(text, PAGE, (TABLE_START, TABLE_END)):
            print(f"{PAGE.name}'s sitting table rewritten from {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
