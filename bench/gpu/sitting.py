"""The sitting: its plan and estimate printed first, then each run in order, its results written after every run
(bench/results/sitting.{json,md}; on a card also docs/gpu/sitting.json and docs/gpu.md's sitting table). Every row
is timed by one clock (degen_train.metrics.step_clock) and gives the median and interquartile range of its step
times, the graphs dynamo compiled during it and the peak FLOP/s its MFU divides by; the card (nvidia-smi) and the
versions head the record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS
from bench.gpu import best, end_to_end, exactness, fsdp, host, levers, terms
from bench.gpu.plan import BUDGET_S, RECORD, REPO, gao_scale_estimate, last_times, plan
from bench.gpu.runs import ON_CPU, context, device_peak
from degen_train.metrics.steady import WARMUP_STEPS

PAGE = REPO / "docs" / "gpu.md"
TABLE_START, TABLE_END = "<!-- sitting-table:start -->", "<!-- sitting-table:end -->"
KINDS = {"best": best, "levers": levers, "terms": terms, "end_to_end": end_to_end, "host": host,
         "exactness": exactness, "fsdp": fsdp}  # fmt: skip
ROWS = ("best", "levers", "terms", "end_to_end")  # the decisive sitting, in the order that answers the first first


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


def compare(results: dict[str, Any]) -> None:
    """Each row kind's ratios (its module's compare) into the rows' "vs" column."""
    for name, rows in results.get("rows", {}).items():
        if hasattr(KINDS[name], "compare"):
            KINDS[name].compare(rows, results)


def table(results: dict[str, Any]) -> str:
    """docs/gpu.md's sitting table from whatever runs the results hold, then each row kind's notes."""
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
    for row_name in KINDS:
        for name, row in rows.get(row_name, {}).items():
            if not row.get("tokens_per_s"):  # a failure, a run left out, one that only prepares (TaCL's teacher)
                said = row.get("error") or row.get("left") or ("prepared" if row else "not measured")
                lines.append(f"| {row_name} | {name} | {said[:120]} | | | | |")
                continue
            steps = row.get("step_seconds") or {}
            step = f"{steps['median'] * 1e3:,.1f} ({steps['interquartile'] * 1e3:,.1f})" if steps else "–"
            mfu = f"{row['mfu']:.1%}" if row.get("mfu") else "–"
            rate = row["tokens_per_s"]
            shown = f"{rate / 1e3:,.0f}k" if rate >= 1e4 else f"{rate:,.0f}"
            lines.append(f"| {row_name} | {name} | {shown} | {mfu} | {step} | "
                         f"{row.get('graphs_compiled', 0)} | {row.get('vs', '')} |")  # fmt: skip
    notes = [line for name, kind in KINDS.items() if hasattr(kind, "notes") for line in kind.notes(rows.get(name, {}))]
    return "\n".join([*lines, *([""] + notes if notes else [])]).rstrip() + "\n"


def write_page_table(text: str, page: Path = PAGE, markers: tuple[str, str] = (TABLE_START, TABLE_END)) -> bool:
    """Replace what lies between the page's table markers; False when it has none."""
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
    wanted = tuple(argv) or ROWS
    unknown = [r for r in wanted if r not in KINDS]
    if unknown:
        print(f"bench-gpu: unknown row(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
        return 2
    started = time.perf_counter()
    folder = Path(os.environ.get("DEGEN_BENCH_RESULTS", RESULTS))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("sitting_dry_run.json" if ON_CPU else "sitting.json")
    with tempfile.TemporaryDirectory(prefix="gpu_sitting_") as scratch:
        ctx = context(Path(scratch))
        every = [run for row in wanted for run in KINDS[row].runs(ctx)]
        taken, left = plan(every, BUDGET_S, last_times())
        command = "make bench-gpu" + (f" ARGS='{' '.join(argv)}'" if argv else "")
        print(f"bench-gpu: {len(taken)} runs, about {sum(s for _, s in taken) / 60:.1f} min by the estimate "
              f"(budget {BUDGET_S / 60:.0f} min):", flush=True)  # fmt: skip
        for run, seconds in taken:
            print(f"  {run.row}/{run.name}: {seconds:.0f} s")
        for run in left:
            print(f"  {run.row}/{run.name}: not in this sitting (the next: make bench-gpu ARGS={run.row})")
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
                print(f"bench-gpu: {run.row}/{run.name} not started ({elapsed:.0f} s gone, {seconds:.0f} s more)")
                continue
            print(f"bench-gpu: {run.row}/{run.name} ...", flush=True)
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
