"""make bench-gpu, one lent card's sitting (issues 55, 67.2): its plan fits the budget in the issue's order, every
row is timed by one clock, a cut sitting keeps what it ran, and its whole code runs on the CPU at toy sizes. Speed is
measured on a card only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def _run(row: str, name: str, seconds: float, kind: str = "gpt2"):
    from bench.gpu.plan import Run

    return Run(row, name, kind, compiles=False, steps=0, action=lambda: {}, step_scale=1.0), seconds


def test_the_plan_takes_runs_in_order_while_their_estimates_fit_the_budget() -> None:
    """A run is taken when its estimate still ends inside the budget (a cheap later run may still be), and the last
    sitting's measured time for a run replaces the constants' estimate."""
    from bench.gpu.plan import PREPARE_S, START_S, plan

    runs = [_run("best", "a", 0)[0], _run("levers", "b", 0)[0], _run("terms", "c", 0)[0]]
    last = {"best/a": 100.0, "levers/b": 500.0}
    taken, left = plan(runs, 540.0, last)
    assert [(r.name, s) for r, s in taken] == [("a", 100.0), ("c", START_S)]  # c: no compile, no steps, prepared
    assert [r.name for r in left] == ["b"]
    taken, _ = plan(runs[2:], 540.0, {})
    assert taken[0][1] == START_S + PREPARE_S  # the workload's first run makes its data


def test_the_card_plan_fits_nine_minutes_with_the_rows_in_the_issues_order(tmp_path: Path, monkeypatch) -> None:
    """The plan for a card (the constants from the sittings of 2026-11-25/26): at most BUDGET_S, the best rows first
    and all of them taken; Gao at scale is its own command of at most 5 minutes by the same constants."""
    import bench.gpu.plan as plan
    import bench.gpu.runs as runs
    import bench.gpu.sitting as sitting

    monkeypatch.setattr(runs, "ON_CPU", False)
    monkeypatch.setattr(runs, "gpt2_vocabulary_data", lambda folder, words: [])
    monkeypatch.setattr(plan, "RECORD", tmp_path / "no_sitting_yet.json")
    ctx = runs.context(tmp_path)
    every = [run for row in sitting.ROWS for run in sitting.KINDS[row].runs(ctx)]
    taken, left = plan.plan(every, plan.BUDGET_S, {})
    assert sum(seconds for _, seconds in taken) <= plan.BUDGET_S == 540.0
    rows = [run.row for run, _ in taken]
    assert rows[:4] == ["best"] * 4 and rows == sorted(rows, key=sitting.ROWS.index)
    assert {run.name for run, _ in taken} >= {"gpt2_ours", "gpt2_careful_loop", "bert_ours", "bert_careful_loop",
                                              "gpt2_blocks_eager", "gpt2_head_eager", "tacl", "coco_lm", "simctg"}
    assert plan.gao_scale_estimate() <= 300.0
    # The rows folded from the old bench (issue 67.2) are named to run: each fits a sitting of its own
    for row in ("host", "exactness", "fsdp"):
        alone, rest = plan.plan(sitting.KINDS[row].runs(ctx), plan.BUDGET_S, {})
        assert alone and not rest, row


def test_the_step_clock_gives_each_interval_and_none_across_an_interruption(monkeypatch) -> None:
    from degen_train.metrics import step_clock

    times = iter([1.0, 1.5, 2.5, 10.0, 10.25])
    monkeypatch.setattr(step_clock.time, "perf_counter", lambda: next(times))
    clock = step_clock.StepClock("cpu")
    clock.mark(), clock.mark(), clock.mark()
    clock.interrupt()  # a validation ran: 2.5 -> 10.0 is no step
    clock.mark(), clock.mark()
    assert clock.seconds() == [0.5, 1.0, 0.25] and clock.kind == "host clock"


def test_the_steady_window_gives_the_quartiles_of_its_steps() -> None:
    from degen_train.metrics.steady import steady_window

    window = steady_window([9.0, 1.0, 2.0, 3.0, 4.0, 5.0], warmup=1)
    assert window.median_seconds == 3.0 and window.quartiles == (2.0, 4.0) and window.interquartile_seconds == 2.0


def test_gpt2s_own_vocabulary_of_random_tokens_padded_to_50304(tmp_path: Path) -> None:
    """Issue 55.2: the GPT-2 rows ran at WikiText-2's 30,522 entries; now GPT-2's 50,257, padded to 50,304."""
    from bench.gpu.runs import GPT2_VOCABULARY, gpt2_vocabulary_data
    from degen_train.data.tokenizer import load_tokenizer
    from degen_train.models.vocabulary import padded_size

    overrides = gpt2_vocabulary_data(tmp_path, 2000)
    tokenizer = load_tokenizer(tmp_path / "tokenizer")
    assert len(tokenizer) == GPT2_VOCABULARY == 50_257 and padded_size(len(tokenizer), 64) == 50_304
    words = (tmp_path / "text.txt").read_text().split()
    ids = tokenizer(" ".join(words[:50]))["input_ids"]
    assert len(ids) == 50 and 0 not in ids  # one token a word, none unknown
    assert f"data.tokenizer.path={tmp_path / 'tokenizer'}" in overrides


def test_the_table_says_what_was_left_and_what_failed() -> None:
    from bench.gpu.sitting import compare, table

    steps = {"median": 0.2, "interquartile": 0.01, "steps": 20, "clock": "cuda events"}
    row = {"tokens_per_s": 3.0e5, "mfu": 0.35, "step_seconds": steps, "graphs_compiled": 3,
           "total_flops_over_model_flops": 1.0}  # fmt: skip
    results = {"command": "make bench-gpu", "date": "x", "machine": {"card": "NVIDIA H200", "torch": "2.11",
               "cuda": "13.0", "peak_flops": 989.5e12},
               "rows": {"best": {"gpt2_careful_loop": {**row, "tokens_per_s": 3.3e5}, "gpt2_ours": row},
                        "levers": {"gpt2_head_eager": {**row, "tokens_per_s": 2.7e5}},
                        "terms": {"simctg": {**row, "step_seconds": {**steps, "median": 0.25},
                                             "total_flops_over_model_flops": 1.03},
                                  "coco_lm": {"error": "RuntimeError: CUDA out of memory"}},
                        "end_to_end": {"gpt2_default_cadence": {"left": "not started: the deadline"}}}}  # fmt: skip
    compare(results)
    text = table(results)
    assert "(cuda events, metrics/step_clock.py)" in text and "peak 989.5 TFLOP/s" in text
    assert "| best | gpt2_ours | 300k | 35.0% | 200.0 (10.0) | 3 |  |" in text
    assert "| levers | gpt2_head_eager | 270k | 35.0% | 200.0 (10.0) | 3 | 0.90× the best row's tokens/s |" in text
    assert "| terms | simctg | 300k | 35.0% | 250.0 (10.0) | 3 | 1.25× the step time at 1.03× the FLOPs |" in text
    assert "| terms | coco_lm | RuntimeError: CUDA out of memory |" in text
    assert "| end_to_end | gpt2_default_cadence | not started: the deadline |" in text
    assert "gpt2: degen-train at its best ÷ the careful compiled loop = 0.91×." in text


def test_the_machine_record_without_nvidia_smi_says_so(monkeypatch) -> None:
    import bench.gpu.sitting as sitting

    monkeypatch.setenv("PATH", "/nonexistent")
    record = sitting.machine()
    assert record["nvidia_smi"] == "not read: FileNotFoundError"
    assert record["torch"] == torch.__version__ and {"cuda", "transformers", "lightning"} <= record.keys()


def test_bench_gpu_without_a_gpu_says_so_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DEGEN_BENCH_GPU_ON_CPU"}
    result = subprocess.run([sys.executable, "bench/run.py", "gpu"], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=300)  # fmt: skip
    assert result.returncode == 2
    said = "bench-gpu: no CUDA device on this machine; run it where one is (nothing was measured)"
    assert result.stdout.strip() == said


@pytest.mark.skipif(not (REPO.parent / "shared" / "data" / "wikitext-2").exists(), reason="needs ../shared/data")
def test_the_whole_sitting_runs_on_the_cpu_at_toy_sizes(tmp_path: Path) -> None:
    """Issue 55.1: the sitting's own code, every row, on the CPU (DEGEN_BENCH_GPU_ON_CPU=1): its plan printed first,
    every run written with its one-clock step times, the table beside it."""
    env = {**os.environ, "DEGEN_BENCH_GPU_ON_CPU": "1", "DEGEN_BENCH_RESULTS": str(tmp_path)}
    result = subprocess.run([sys.executable, "bench/run.py", "gpu"], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.startswith("bench-gpu: ") and "min by the estimate (budget 9 min):" in result.stdout
    assert "Gao at scale: its own command, make reproduce-gao-scale" in result.stdout
    record = json.loads((tmp_path / "sitting_dry_run.json").read_text())
    assert set(record["rows"]) == {"best", "levers", "terms", "end_to_end"}
    timed = [r for row in record["rows"].values() for r in row.values() if "tokens_per_s" in r]
    assert len(timed) >= 15 and all(r["step_seconds"]["clock"] == "host clock" for r in timed)
    assert record["machine"]["card"] == "CPU (dry run)" and record["run_seconds"]
    assert "degen-train at its best ÷ the careful compiled loop" in (tmp_path / "sitting_dry_run.md").read_text()


def test_a_runs_step_times_survive_its_final_validation(tmp_path: Path) -> None:
    """The final validation sets the callbacks up again (stage "validate"): the step clock of the fit is kept, so
    summary.json's step_seconds is there after it (the sitting's end-to-end row read None)."""
    from tests.helpers import run

    summary = run(tmp_path / "run", "trainer.max_steps=14", "final_validation=true", "trainer.val_check_interval=7")
    assert summary["step_seconds"]["clock"] == "host clock" and summary["step_seconds"]["steps"] >= 1
