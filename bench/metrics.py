"""Metrics benchmark: metrics at 1,000,000 × 256 without an M×M matrix, against the naive forms where
those fit, and the training-time cost of the isotropy monitor at its default interval."""

from __future__ import annotations

import multiprocessing
import resource
import tempfile
import time
from typing import Any

import torch

from bench.common import save
from degen_train.config import load_config
from degen_train.metrics.isotropy import VectorMoments, isoscore, mean_pairwise_cosine, top_k_variance_share
from degen_train.run.pretrain import train


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def naive_mean_cosine(vectors: torch.Tensor) -> float:
    unit = torch.nn.functional.normalize(vectors.double(), dim=-1)
    cos = unit @ unit.T  # (M, M)
    m = len(vectors)
    return float((cos.sum() - cos.diagonal().sum()) / (m * (m - 1)))


def ours_all(vectors: torch.Tensor) -> dict[str, float]:
    moments = VectorMoments.of(vectors)
    return {
        "mean_cosine": mean_pairwise_cosine(moments),
        "isoscore": isoscore(moments),
        "top1": top_k_variance_share(moments),
    }


def monitor_cost(steps: int = 200) -> dict[str, float]:
    """Default run (tiny model, builtin corpus) with and without the isotropy monitor at its default interval."""
    seconds = {}
    for name, extra in (("without", ["~callbacks.isotropy"]), ("with", [])):
        with tempfile.TemporaryDirectory() as run_dir:
            cfg = load_config(
                [
                    f"trainer.max_steps={steps}",
                    "trainer.enable_progress_bar=false",
                    "export_hf=false",
                    "final_validation=false",
                    "trainer.limit_val_batches=0",
                    "logger=none",
                    "~callbacks.checkpoint",
                    *extra,
                ],
                run_dir=run_dir,
            )
            start = time.perf_counter()
            train(cfg)
            seconds[name] = time.perf_counter() - start
    return {**seconds, "added": seconds["with"] / seconds["without"] - 1}


def _measure(kind: str, count: int, queue: Any) -> None:
    """In a fresh process: time one metric pass and the growth of peak memory over the input alone."""
    torch.manual_seed(0)
    vectors = torch.randn(count, 256).add_(0.3)  # in place: no second copy inflates the baseline
    before = peak_rss_gb()
    start = time.perf_counter()
    value = ours_all(vectors) if kind == "ours" else {"mean_cosine": naive_mean_cosine(vectors)}
    queue.put({"value": value, "seconds": time.perf_counter() - start, "peak_growth_gb": peak_rss_gb() - before})


def measured(kind: str, count: int) -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_measure, args=(kind, count, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> dict:
    results: dict[str, Any] = {"sizes": []}
    for m in (2_000, 10_000, 20_000):
        ours, naive = measured("ours", m), measured("naive", m)
        assert abs(naive["value"]["mean_cosine"] - ours["value"]["mean_cosine"]) < 1e-9
        results["sizes"].append(
            {
                "vectors": m,
                "naive_mean_cosine_s": naive["seconds"],
                "naive_peak_growth_gb": naive["peak_growth_gb"],
                "ours_all_metrics_s": ours["seconds"],
                "ours_peak_growth_gb": ours["peak_growth_gb"],
                "naive_matrix_gb": m * m * 8 / 1e9,
            }
        )
    big = measured("ours", 1_000_000)
    results["million_by_256"] = {
        **big["value"],
        "seconds": big["seconds"],
        "peak_growth_gb": big["peak_growth_gb"],
        "input_gb": 1_000_000 * 256 * 4 / 1e9,
        "naive_matrix_would_be_gb": 8e12 / 1e9,
    }
    results["monitor"] = monitor_cost()
    for key, value in results.items():
        print(key, value)
    save("metrics", results)
    return results


if __name__ == "__main__":
    main()
