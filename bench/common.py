"""Shared pieces of the benchmarks: a real corpus, batches, timing, the machine's matmul peak."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from degen_train.devices.matmul_peak import measured_matmul_peak
from degen_train.devices.precision import cpu_description

REPO = Path(__file__).resolve().parents[1]
WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2"
RESULTS = REPO / "bench" / "results"


def corpus_overrides() -> list[str]:
    """WikiText-2 when the shared data is present, else the embedded corpus."""
    exported = os.environ.get("DEGEN_TRAIN_WIKITEXT2")
    if exported and (Path(exported) / "train.txt").exists():  # a copy brought along (a GPU machine's .gpu/)
        return ["data=wikitext2"]
    if (WIKITEXT / "train.txt").exists():
        os.environ.setdefault("DEGEN_TRAIN_WIKITEXT2", str(WIKITEXT))
        return ["data=wikitext2"]
    return ["data=builtin", "data.tokenizer.vocab_size=30522"]


def matmul_peak() -> float:
    """Measured FLOP/s of a square float32 matmul on this CPU: the denominator of MFU (the runs use the same)."""
    return measured_matmul_peak("cpu", torch.float32)


def interleaved(steps: dict[str, Callable[[int], object]], *, rounds: int, warmup: int = 1) -> dict[str, float]:
    """Median seconds per call of each ``steps[name](i)``, the configurations taking turns call by call.

    Taking turns spreads this machine's drifts (frequency, other tenants) over every configuration
    alike, so the ratios between them hold even when absolute times wander.
    """
    for i in range(warmup):
        for step in steps.values():
            step(i)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(warmup, warmup + rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            step(i)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def save(name: str, payload: dict) -> Path:
    """bench/results/NAME.json, with the CPU it was measured on and whether that CPU has native bf16."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": cpu_description(), **payload}, indent=2) + "\n")
    return path
