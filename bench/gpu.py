"""make bench-gpu: degen-train on one GPU beside a careful hand-written loop, in one process, one sitting.

Parts (``python bench/run.py gpu [PART ...]``; without one, SITTING: throughput, levers, end_to_end, about 8 minutes):
  throughput   BERT-base MLM 128×128 and GPT-2 small MLE 16×1024, one model in every loop (degen-train's, its
               vocabulary and dropout): the hand loops (BERT: the HF default, head at every position, and the careful
               one, head at the labelled rows; bench/hand_loop.py) eager and compiled, degen-train eager and with
               model.compile=true; steady tokens/s after a warm-up that holds compilation, MFU from the runs' own FLOP
               function, compile and start-up seconds
  compile_where the careful hand loop eager, with its blocks compiled in place (model.compile's way) and whole
  levers       what each GPU lever gives on BERT-base: loader workers 0 vs auto, the divergence check on the host
               (optimizer.fused=false) vs deferred, checkpoints in the step vs on a writer thread, the vocabulary
               padded to a multiple of 64, the head and loss compiled (objective.mlm.compiled=true); on GPT-2 small,
               the chunked output layer (objective.mle.chunk_size=1024, the default) vs whole logits, the vocabulary
               padded to 64, and the whole head and loss compiled
  terms        each term's cost next to plain MLM / MLE: CosReg, SimCTG, TaCL, COCO-LM, SimCSE
  end_to_end   a default-shaped run (periodic checkpoints, monitors, final validation) against its steady rate
  exactness    trainer.deterministic=true: repeats and a 20 + 20 resume compared bit for bit, and its cost; the same
               comparisons in the default mode
  fsdp         model=small on one device against strategy=fsdp on the same card

Results: bench/results/gpu.json and bench/results/gpu.md (the table docs/gpu.md shows between its gpu-table
markers, rewritten by this command), written after each part: a sitting cut short keeps the parts it finished. A
part that fails is recorded with its error and the next one runs. Without a CUDA device it says so in one line and
exits 2.
DEGEN_BENCH_GPU_ON_CPU=1 runs every part on the CPU at toy sizes (tests/test_bench_gpu.py): the code, not numbers.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS, corpus_overrides
from bench.hand_loop import MODES, hand_loop
from degen_train.callbacks.cadence import updates_for
from degen_train.config import load_config
from degen_train.metrics.steady import WARMUP_STEPS, hour_long_rate
from degen_train.run.checks import check
from degen_train.run.memory_plan import make_plan
from degen_train.run.pretrain import train
from degen_train.storage.checkpoints import load_checkpoint_file

ON_CPU = os.environ.get("DEGEN_BENCH_GPU_ON_CPU") == "1"  # a dry run of the code paths, at toy sizes
PAGE = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"  # the manual's GPU page holds the table
TABLE_START, TABLE_END = "<!-- gpu-table:start -->", "<!-- gpu-table:end -->"


def sizes() -> dict[str, Any]:
    """The measured shapes, or toy ones for the CPU dry run."""
    if ON_CPU:
        return {"bert": ("tiny", 8, 32), "gpt2": ("gpt2_tiny", 4, 64), "steps": 6, "small": "tiny", "long": 8}
    return {"bert": ("base", 128, 128), "gpt2": ("gpt2_small", 16, 1024), "steps": 60, "small": "small", "long": 300}


# --- the reference: the same model in loops written by hand (bench/hand_loop.py) ----------------------------------


def reference_model(kind: str) -> tuple[Any, int, int]:
    """(a fresh HF model, batch, length): the model degen-train builds for the measured recipe and shape, from the
    same config and the run's own tokenizer (its vocabulary), so that both loops train one model."""
    from degen_train.data.datamodule import prepare_data
    from degen_train.models.backbone import build_hf_model

    name, batch, length = sizes()[kind]
    recipe, family, data_format = RECIPES[kind]
    cfg = load_config([*corpus_overrides(), f"recipe={recipe}", *steady(name, batch, length, 1)])
    data = prepare_data(cfg.data, family=family, data_format=data_format, seed=0)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=data.tokenizer, with_nsp_head=False, sequence_length=length)
    return model, batch, length


def reference(kind: str, mode: str, *, compiled: bool, blocks_only: bool = False) -> dict[str, Any]:
    model, batch, length = reference_model(kind)
    device = torch.device("cpu" if ON_CPU else "cuda")
    return hand_loop(model, kind=kind, mode=mode, batch=batch, length=length, steps=sizes()["steps"], device=device,
                     compiled=compiled, blocks_only=blocks_only, peak=device_peak(device))  # fmt: skip


def device_peak(device: torch.device) -> float:
    """The bf16 peak the runs divide by (degen_train.metrics.flops.peak_flops): one definition of MFU for both."""
    from degen_train.metrics.flops import peak_flops

    return peak_flops(device, torch.bfloat16 if device.type == "cuda" else torch.float32, None)[0]


RECIPES = {"bert": ("bert_mlm", "encoder", "mlm"), "gpt2": ("gpt2_mle", "decoder", "causal")}


# --- degen-train runs ---------------------------------------------------------------------------------------------


def ours(run_dir: Path, *overrides: str, keep: bool = False, with_plan: bool = False) -> dict[str, Any]:
    """One degen-train run in this process (data cached first, so its preparation is not timed): the summary's
    steady tokens/s and MFU, the wall time of the whole run, and the tokens it trained. The run folder is deleted
    afterwards unless ``keep``: BERT-base checkpoints with their optimizer state filled the GPU machine's disk.
    The card's peak allocated memory is recorded on every row; ``with_plan``: debug=plan's figure for the same run
    beside it (issue 52.4: the plan held against a card)."""
    common = [*corpus_overrides(), "trainer=cpu" if ON_CPU else "trainer=gpu", "export_hf=false", "logger=csv",
              "trainer.enable_progress_bar=false", "callbacks.throughput.count_total_flops=true"]  # fmt: skip
    train(load_config([*common, *overrides, "prepare_only=true"], run_dir=run_dir / "prepare"))
    planned = None
    if with_plan:
        plan = check(load_config([*common, *overrides, "plan.only=true"], run_dir=run_dir / "plan"))
        planned = make_plan(plan.cfg, plan.terms, plan.weights, data_format=plan.data_format)["peak_gib"]
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
    steady_rate = summary.get("steady_tokens_per_s") or summary["tokens_per_s"]
    return {"tokens_per_s": steady_rate, "mean_tokens_per_s": summary["tokens_per_s"],
            "seconds_per_batch": summary["seconds_per_batch"], "wall_s": wall,
            "step_seconds": summary.get("step_seconds"),
            "mfu": summary["mfu"] * steady_rate / summary["tokens_per_s"] if summary["mfu"] else None,
            "model_flops_per_token": summary["model_flops_per_token"], "warmup_seconds": summary.get("warmup_seconds"),
            "vocabulary": summary.get("vocabulary"), "periodic": summary.get("periodic") or {},
            "tokens_per_batch": int(cfg.data.batch_size) * int(cfg.data.block_size),
            "seconds_to_first_batch": summary.get("seconds_to_first_batch"),
            "end_to_end_tokens_per_s": tokens / wall, "max_memory_allocated_gib": allocated,
            "planned_peak_gib": planned,
            "total_flops_over_model_flops": summary["total_flops_over_model_flops"]}  # fmt: skip


def steady(model: str, batch: int, length: int, steps: int) -> list[str]:
    """Overrides of a steady-rate run: no periodic checkpoint, monitor or validation inside the timed steps. Their
    period is one past the last step: at the last step itself they would run inside its timed interval (the
    isotropy probe did, 0.6 s eager and 2.9 s compiled on an H200, halving the compiled rate the bench reported)."""
    steps += WARMUP_STEPS  # the warm-up (start-up, compilation) is left out of the steady window, not the run
    beyond = steps + 1  # the end-of-training probe and checkpoint still run, after the timing
    return [f"model={model}", f"data.batch_size={batch}", f"data.block_size={length}", f"model.max_position={length}",
            f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}", "trainer.limit_val_batches=1",
            "final_validation=false", f"callbacks.checkpoint.every_n_train_steps={beyond}",
            f"callbacks.isotropy.every_n_steps={beyond}", "scheduler.warmup_steps=1"]  # fmt: skip


def throughput(scratch: Path) -> dict[str, Any]:
    """Each workload: the hand loops (BERT: the HF default and the careful one) eager and compiled, and degen-train
    eager and with model.compile=true, on one model, one vocabulary, one batch, one FLOP count."""
    shape = sizes()
    out: dict[str, Any] = {}
    for kind, (recipe, _, _) in RECIPES.items():
        model, batch, length = shape[kind]
        base = [f"recipe={recipe}", *steady(model, batch, length, shape["steps"])]
        row: dict[str, Any] = {}
        for mode in MODES[kind]:
            for compiled in (False, True):
                torch._dynamo.reset()
                row[f"{mode}_{'compiled' if compiled else 'eager'}"] = reference(kind, mode, compiled=compiled)
        torch._dynamo.reset()
        row["ours_eager"] = ours(scratch / f"{kind}_eager", *base, with_plan=True)
        torch._dynamo.reset()
        row["ours_compiled"] = ours(scratch / f"{kind}_compiled", *base, "model.compile=true", with_plan=True)
        out[kind] = row
    return out


def compile_where(scratch: Path) -> dict[str, Any]:
    """Where compile's gain lies: the careful hand loop (GPT-2's, with no KV cache) eager, with its blocks compiled
    in place (what model.compile does) and whole, each with its compile seconds."""
    out: dict[str, Any] = {}
    for kind in RECIPES:
        mode = MODES[kind][-1]
        out[kind] = {}
        for form, compiled, blocks in (("eager", False, False), ("blocks", True, True), ("whole", True, False)):
            torch._dynamo.reset()  # each form compiles from nothing
            out[kind][form] = reference(kind, mode, compiled=compiled, blocks_only=blocks)
    return out


def levers(scratch: Path) -> dict[str, Any]:
    """Each lever of the issue alone, on BERT-base MLM, against the defaults (all levers on)."""
    model, batch, length = sizes()["bert"]
    steps = sizes()["steps"]
    base = ["recipe=bert_mlm", *steady(model, batch, length, steps), f"callbacks.checkpoint.every_n_train_steps="
            f"{max(steps // 3, 1)}"]  # fmt: skip
    variants = {
        "defaults": [],
        "workers_0": ["data.num_workers=0"],
        "divergence_check_on_host": ["optimizer.fused=false"],
        "checkpoints_in_step": ["callbacks.checkpoint.background=false"],
        "vocab_padded_64": ["model.pad_vocab_to_multiple_of=64"],
        "compiled_head": ["objective.mlm.compiled=true"],
    }
    out = {name: ours(scratch / f"lever_{name}", *base, *extra) for name, extra in variants.items()}
    decoder, dbatch, dlength = sizes()["gpt2"]
    gpt2 = ["recipe=gpt2_mle", *steady(decoder, dbatch, dlength, steps)]
    out["gpt2_chunked_output_layer"] = ours(scratch / "lever_gpt2_chunked", *gpt2)  # objective.mle.chunk_size=1024
    out["gpt2_whole_logits"] = ours(scratch / "lever_gpt2_whole", *gpt2, "objective.mle.chunk_size=null")
    out["gpt2_vocab_padded_64"] = ours(scratch / "lever_gpt2_padded", *gpt2, "model.pad_vocab_to_multiple_of=64")
    out["gpt2_compiled_head"] = ours(scratch / "lever_gpt2_compiled_head", *gpt2, "objective.mle.chunk_size=null",
                                     "objective.mle.compiled=true")  # fmt: skip
    return out


def terms(scratch: Path) -> dict[str, Any]:
    """Each term's step time against its plain objective's (seconds per batch, so that SimCSE's shorter sentences do
    not read as a cost; the sitting of 2026-11-26 took a ratio of tokens/s), beside the FLOPs it adds."""
    model, batch, length = sizes()["bert"]
    decoder, dbatch, dlength = sizes()["gpt2"]
    steps = sizes()["steps"]
    encoder_base = steady(model, batch, length, steps)
    decoder_base = steady(decoder, dbatch, dlength, steps)
    teacher = scratch / "teacher"
    train(load_config([*corpus_overrides(), "recipe=bert_mlm_nsp", f"model={model}", "trainer.max_steps=2",
                       "trainer=cpu" if ON_CPU else "trainer=gpu", f"data.block_size={length}",
                       f"model.max_position={length}"], run_dir=teacher))  # fmt: skip
    runs = {
        "mlm": ["recipe=bert_mlm", *encoder_base],
        "cosreg": ["recipe=bert_mlm", "regularizer=cosreg", *encoder_base],
        "tacl": ["recipe=tacl", f"teacher={teacher}", *encoder_base],
        "coco_lm": ["recipe=coco_lm", *encoder_base],
        "simcse": ["recipe=simcse", f"start={teacher}", *encoder_base],
        "mle": ["recipe=gpt2_mle", *decoder_base],
        "simctg": ["recipe=simctg", *decoder_base],
    }
    out = {name: ours(scratch / f"term_{name}", *extra) for name, extra in runs.items()}
    for name, result in out.items():
        plain = out["mle" if name in ("mle", "simctg") else "mlm"]
        result["time_vs_plain"] = result["seconds_per_batch"] / plain["seconds_per_batch"]
    return out


def end_to_end(scratch: Path) -> dict[str, Any]:
    """The defaults' periodic work (checkpoint, isotropy probe and validation every 100 updates, final validation):
    the run's rate against its steady rate, each kind's cost per event, and what that cadence takes from an hour-long
    run (metrics.steady.hour_long_rate: the goal is 0.95× the steady rate or better)."""
    model, batch, length = sizes()["bert"]
    steps = sizes()["long"]
    shape = [f"model={model}", f"data.batch_size={batch}", f"data.block_size={length}", f"model.max_position={length}"]
    result = ours(scratch / "end_to_end", "recipe=bert_mlm", *shape, f"trainer.max_steps={steps}",
                  "trainer.val_check_interval=100")  # what trainer.val_check_interval=auto gives an hour-long run
    result["end_to_end_over_steady"] = result["end_to_end_tokens_per_s"] / result["tokens_per_s"]
    step = result["tokens_per_batch"] / result["tokens_per_s"]
    costs = {kind: tally["seconds"] / tally["events"] for kind, tally in result["periodic"].items() if tally["events"]}
    result["costs_per_event_s"] = costs
    result["hour_long"] = hour_long_rate(step, costs, {"checkpoint": 100, "isotropy": 100, "validation": 100})
    # The same costs on a clock (callbacks.cadence: the minutes become updates at this step time)
    clock = {kind: updates_for(minutes, step) for kind, minutes in ON_THE_CLOCK.items()}
    result["hour_long_on_the_clock"] = {**hour_long_rate(step, costs, clock), "minutes": ON_THE_CLOCK}
    return result


# A cadence on the clock for an hour-long run (callbacks.cadence.*_minutes): what bench-gpu prices beside the updates'
ON_THE_CLOCK = {"checkpoint": 30.0, "isotropy": 10.0, "validation": 10.0}


def exactness(scratch: Path) -> dict[str, Any]:
    """max |Δw| between repeats and between a 20 + 20 resume and a straight run, per mode; its cost in tokens/s."""
    model, batch, length = sizes()["bert"]
    out: dict[str, Any] = {}
    for mode in ("default", "deterministic"):
        base = ["recipe=bert_mlm", *steady(model, batch, length, 40), "callbacks.checkpoint.every_n_train_steps=20",
                f"trainer.deterministic={'true' if mode == 'deterministic' else 'false'}"]  # fmt: skip
        first = ours(scratch / f"{mode}_a", *base, keep=True)
        ours(scratch / f"{mode}_b", *base, keep=True)
        ours(scratch / f"{mode}_resumed", *base, "trainer.max_steps=20", "scheduler.total_steps=40", keep=True)
        ours(scratch / f"{mode}_resumed", *base, "ckpt_path=last", keep=True)
        out[mode] = {
            "tokens_per_s": first["tokens_per_s"],
            "repeat_max_abs_diff": _weight_difference(scratch / f"{mode}_a", scratch / f"{mode}_b"),
            "resume_max_abs_diff": _weight_difference(scratch / f"{mode}_a", scratch / f"{mode}_resumed"),
        }
        for run in ("a", "b", "resumed"):
            shutil.rmtree(scratch / f"{mode}_{run}", ignore_errors=True)
    out["deterministic_cost"] = out["default"]["tokens_per_s"] / out["deterministic"]["tokens_per_s"]
    return out


def _weight_difference(a: Path, b: Path) -> float:
    first = load_checkpoint_file(a / "checkpoints" / "last.ckpt")["state_dict"]
    second = load_checkpoint_file(b / "checkpoints" / "last.ckpt")["state_dict"]
    return max(float((first[k].float() - second[k].float()).abs().max()) for k in first if first[k].is_floating_point())


def fsdp(scratch: Path) -> dict[str, Any]:
    model = sizes()["small"]
    _, batch, length = sizes()["bert"]
    base = ["recipe=bert_mlm", *steady(model, batch, length, sizes()["steps"])]
    return {
        "single_device": ours(scratch / "single", *base),
        "fsdp2": ours(scratch / "fsdp2", *base, "strategy=fsdp"),
        "fsdp2_bf16_params": ours(scratch / "fsdp2_bf16", *base, "strategy=fsdp", "strategy.mixed_precision=bf16"),
    }


PARTS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "throughput": throughput,
    "compile_where": compile_where,
    "levers": levers,
    "terms": terms,
    "end_to_end": end_to_end,
    "exactness": exactness,
    "fsdp": fsdp,
}


# What `make bench-gpu` runs when no part is named: one sitting of a lent card (about 15 minutes with the machine's
# start), sized from the H200 sitting of 2026-11-26 (throughput 166 s with four loops a workload, end_to_end 33 s,
# a BERT-base or GPT-2 small run of 60 updates 10-14 s): with the careful BERT loop, the warm-ups and the levers'
# nine runs (two of them compiling their head), about 8 minutes. Issue 45's goals are these three parts' numbers;
# the terms' costs (147 s) were measured in that sitting and are named to run them again, as are the other parts.
SITTING = ("throughput", "levers", "end_to_end")


# --- results --------------------------------------------------------------------------------------------------


def table(results: dict[str, Any]) -> str:
    """The GPU table of docs/gpu.md from whatever parts the results hold (a failed part as its error)."""
    lines = [f"Measured by `{results['command']}` on {results['card']} (torch {results['torch']}), "
             f"{results['date']}. Ratios are within this one sitting.", ""]  # fmt: skip
    for part in PARTS:
        if "error" in results.get(part, {}):
            lines += [f"{part}: failed ({results[part]['error'].splitlines()[0][:300]})", ""]
    results = {k: v for k, v in results.items() if not (isinstance(v, dict) and "error" in v)}
    if "throughput" in results:
        lines += throughput_lines(results["throughput"])
    if "compile_where" in results:
        for kind, row in results["compile_where"].items():
            forms = ", ".join(f"{f} {row[f]['tokens_per_s'] / 1e3:,.0f}k (warm-up {row[f]['warmup_seconds']:.0f} s)"
                              for f in ("eager", "blocks", "whole"))  # fmt: skip
            lines.append(f"Hand loop, {kind}, steady tokens/s: {forms}; blocks = compiled in place (model.compile's "
                         f"way), whole = the whole model compiled.")  # fmt: skip
        lines.append("")
    if "levers" in results:
        lines += ["| lever | tokens/s | vs its defaults |", "|---|---|---|"]
        levers = results["levers"]
        for name, row in levers.items():
            base = levers["gpt2_chunked_output_layer" if name.startswith("gpt2") else "defaults"]["tokens_per_s"]
            lines.append(f"| {name} | {row['tokens_per_s'] / 1e3:,.0f}k | {row['tokens_per_s'] / base:.2f}× |")
        lines.append("")
    if "terms" in results:
        lines += ["| term | step time vs plain objective | total ÷ model FLOPs |", "|---|---|---|"]
        for name, row in results["terms"].items():
            lines.append(f"| {name} | {row['time_vs_plain']:.2f}× | {row['total_flops_over_model_flops']:.2f} |")
        lines.append("")
    if "end_to_end" in results:
        row = results["end_to_end"]
        lines += [f"End to end (checkpoints, monitors, final validation): {row['end_to_end_over_steady']:.2f}× "
                  f"the steady rate.", ""]  # fmt: skip
        if row.get("hour_long"):
            costs = ", ".join(f"{kind} {seconds:.2f} s" for kind, seconds in row["costs_per_event_s"].items())
            rate = row["hour_long"]["over_steady"]
            lines += [f"Periodic work per event: {costs}. At the defaults' cadence (each every 100 updates) an "
                      f"hour-long run trains at {rate:.3f}× the steady rate.", ""]  # fmt: skip
        if row.get("hour_long_on_the_clock"):
            clock = row["hour_long_on_the_clock"]
            every = ", ".join(f"{kind} every {minutes:g} min" for kind, minutes in clock["minutes"].items())
            lines += [f"On the clock ({every}: callbacks.cadence), it trains at {clock['over_steady']:.3f}× the "
                      f"steady rate.", ""]  # fmt: skip
    if "exactness" in results:
        row = results["exactness"]
        lines.append(f"Default mode: repeats differ by {row['default']['repeat_max_abs_diff']:.1e}, a resume by "
                     f"{row['default']['resume_max_abs_diff']:.1e}; trainer.deterministic=true: "
                     f"{row['deterministic']['repeat_max_abs_diff']:.1e} and "
                     f"{row['deterministic']['resume_max_abs_diff']:.1e}, at {1 / row['deterministic_cost']:.2f}× "
                     f"the default's tokens/s.")  # fmt: skip
        lines.append("")
    if "fsdp" in results:
        row = results["fsdp"]
        one = row["single_device"]["tokens_per_s"]
        lines.append(f"FSDP2 on one card: {row['fsdp2']['tokens_per_s'] / one:.2f}× the single-device run "
                     f"({row['fsdp2_bf16_params']['tokens_per_s'] / one:.2f}× with bf16 parameters).")  # fmt: skip
    return "\n".join(lines).rstrip() + "\n"


LOOPS = {"hf_default": "HF default loop", "careful": "careful loop", "ours": "degen-train"}


def throughput_lines(rows: dict[str, Any]) -> list[str]:
    """One line per workload and loop: what it ran (vocabulary, model FLOPs per token at the positions its head runs
    on), eager and compiled steady tokens/s and MFU, the compile seconds and the seconds to a run's first batch;
    each workload's degen-train rates over the careful (BERT) or HF (GPT-2) compiled loop's."""
    lines = ["Steady rates: the median step after a warm-up of the first steps, which hold start-up and compilation "
             "(their excess over steady steps is the compile column).", "",
             "| workload | loop | vocabulary | model FLOPs/token | eager tokens/s (MFU) | compiled tokens/s (MFU) | "
             "compile s | to first batch s |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind, row in rows.items():
        for loop in (*MODES[kind], "ours"):
            eager, compiled = row[f"{loop}_eager"], row[f"{loop}_compiled"]
            vocabulary, first = eager["vocabulary"], compiled.get("seconds_to_first_batch")
            to_first = f"{first:.0f}" if first else "–"
            rates = [f"{r['tokens_per_s'] / 1e3:,.0f}k ({r['mfu'] or 0:.1%})" for r in (eager, compiled)]
            compile_s = (compiled.get("warmup_seconds") or 0) - (eager.get("warmup_seconds") or 0)
            lines.append(f"| {kind} | {LOOPS[loop]} | {vocabulary:,} | {eager['model_flops_per_token'] / 1e6:,.0f}M | "
                         f"{rates[0]} | {rates[1]} | {compile_s:.0f} | {to_first} |")  # fmt: skip
        best = max(row["ours_eager"]["tokens_per_s"], row["ours_compiled"]["tokens_per_s"])
        anchor = MODES[kind][-1]
        lines.append(f"| {kind} | degen-train ÷ {LOOPS[anchor]} compiled | | | | "
                     f"{best / row[f'{anchor}_compiled']['tokens_per_s']:.2f}× | | |")  # fmt: skip
    memory = [f"| {kind} {form} | {r['max_memory_allocated_gib']:.2f} | {r['planned_peak_gib']:.2f} |"
              for kind, row in rows.items() for form in ("eager", "compiled")
              if (r := row[f"ours_{form}"]).get("max_memory_allocated_gib") and r.get("planned_peak_gib")]
    if memory:  # debug=plan held against the card (the plan's fake step runs eagerly: a compiled row may differ)
        lines += ["", "| degen-train run | torch.cuda.max_memory_allocated GiB | debug=plan's peak GiB |",
                  "|---|---|---|", *memory]  # fmt: skip
    return [*lines, ""]


def write_page_table(text: str, page: Path = PAGE, markers: tuple[str, str] = (TABLE_START, TABLE_END)) -> bool:
    """Replace what lies between the page's table markers (the gpu-table's by default); False when it has none."""
    start, end = markers
    content = page.read_text()
    if start not in content or end not in content:
        return False
    head, rest = content.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{start}\n{text}{end}{tail}")
    return True


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available() and not ON_CPU:
        print("bench-gpu: no CUDA device on this machine; run it where one is (nothing was measured)")
        return 2
    wanted = argv or list(SITTING)
    unknown = [p for p in wanted if p not in PARTS]
    if unknown:
        print(f"bench-gpu: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
        return 2
    folder = Path(os.environ.get("DEGEN_BENCH_RESULTS", RESULTS))  # a test's dry run writes into its own folder
    path = folder / ("gpu_dry_run.json" if ON_CPU else "gpu.json")
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    results |= {
        "card": "CPU (dry run)" if ON_CPU else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "command": "python bench/run.py gpu " + " ".join(wanted),
        "date": time.strftime("%Y-%m-%d"),
    }
    folder.mkdir(parents=True, exist_ok=True)
    failed = []
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as scratch:
        for part in wanted:
            print(f"bench-gpu: {part} ...", flush=True)
            start = time.perf_counter()
            try:
                results[part] = PARTS[part](Path(scratch) / part)
            except Exception as error:  # one part's failure is a result too; the sitting goes on to the next
                failed.append(part)
                results[part] = {"error": f"{type(error).__name__}: {error}"[:2000]}
                traceback.print_exc()
            results.setdefault("part_seconds", {})[part] = round(time.perf_counter() - start, 1)
            path.write_text(json.dumps(results, indent=2) + "\n")  # after each part: a cut sitting keeps these
            path.with_suffix(".md").write_text(table(results))
    text = table(results)
    print(text)
    if not ON_CPU and write_page_table(text):
        print(f"{PAGE.name}'s GPU table rewritten from {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
