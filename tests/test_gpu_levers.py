"""The GPU levers, checked on the CPU: the collator's labelled positions, loader workers, checkpoints written on a
writer thread, deferred reads, the optimizer's kernel choice, deterministic mode's environment and bench-gpu's
refusal without a GPU. Their speed is measured by `make bench-gpu`, never here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from degen_train.data.datamodule import loader_workers
from degen_train.devices.device_reads import DeferredRead
from degen_train.losses.contract import WeightedSum
from degen_train.optim import kernel_choice
from degen_train.storage.checkpoints import BackgroundCheckpointIO, CheckpointWriteFailed, verified_step
from tests.conftest import REPO
from tests.helpers import checkpoint_weights, logged, masked_batch, run, tiny_backbone

# Runs compared bit for bit take the same thread count, whatever an earlier test left exported (a reduction's
# order, and so its last bits, depends on it).
SAME_THREADS = ["threads=1"]


def test_the_collators_labelled_positions_give_what_a_boolean_mask_gives() -> None:
    """Backbone with the collator's labelled_index equals the boolean-mask selection it replaces, logits and
    gradients alike."""
    backbone = tiny_backbone()
    batch = masked_batch()
    index = (batch["labels"].reshape(-1) != -100).nonzero().squeeze(1)
    with_index = backbone({**batch, "labelled_index": index}, requires=frozenset({"logits"}))
    found = backbone(batch, requires=frozenset({"logits"}))
    selected = batch["labels"] != -100
    assert torch.equal(with_index.target_ids, batch["labels"][selected])
    assert torch.equal(with_index.logits, found.logits)
    assert torch.equal(with_index.labelled_hidden, backbone.vocab_parts()[0](found.hidden_states[selected]))


def test_a_term_that_replaces_labels_without_their_positions_loses_the_stale_ones() -> None:
    """WeightedSum drops a labelled_index that no longer matches the labels a term put in its place."""
    from degen_train.losses.contract import LossTerm, TermOutput

    class Relabel(LossTerm):
        def prepare_batch(self, batch: dict) -> dict:
            labels = torch.full_like(batch["labels"], -100)
            labels[0, 1] = 7
            return {**batch, "labels": labels}

        def forward(self, output) -> TermOutput:  # noqa: ANN001
            return TermOutput(output.hidden_states.sum() * 0)

    batch = masked_batch()
    batch["labelled_index"] = (batch["labels"].reshape(-1) != -100).nonzero().squeeze(1)
    prepared = WeightedSum({"relabel": Relabel()}, {"relabel": 1.0}).prepare_batch(batch)
    assert "labelled_index" not in prepared
    output = tiny_backbone()(prepared)
    assert output.labelled_index.tolist() == [1] and output.target_ids.tolist() == [7]


def test_loader_workers_auto() -> None:
    assert loader_workers("auto", on_gpu=False) == 0  # a CPU run's cores train
    assert loader_workers(3, on_gpu=False) == 3
    cpus = len(os.sched_getaffinity(0))
    assert loader_workers("auto", on_gpu=True) == max(0, min(4, cpus - 1))
    assert loader_workers("auto", on_gpu=True, local_processes=cpus) == 0


def test_a_worker_process_loads_the_same_batches(tmp_path: Path) -> None:
    """Masking is a function of each example's seed and positions: a worker process collates what the training
    process would, so the weights are equal."""
    common = ["trainer.max_steps=3", "export_hf=false", "final_validation=false", *SAME_THREADS]
    run(tmp_path / "in_process", *common, "data.num_workers=0")
    run(tmp_path / "worker", *common, "data.num_workers=1")
    a = checkpoint_weights(tmp_path / "in_process" / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(tmp_path / "worker" / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoints_on_a_writer_thread_are_whole_rotated_and_resume_exactly(tmp_path: Path) -> None:
    common = ["trainer.max_steps=8", "callbacks.checkpoint.every_n_train_steps=2", "callbacks.checkpoint.save_top_k=2",
              "export_hf=false", "trainer.val_check_interval=4", *SAME_THREADS]  # fmt: skip
    run(tmp_path / "in_step", *common, "callbacks.checkpoint.background=false")
    run(tmp_path / "thread", *common, "callbacks.checkpoint.background=true")
    run(tmp_path / "resumed", *common, "callbacks.checkpoint.background=true", "trainer.max_steps=4",
        "scheduler.total_steps=8")  # fmt: skip
    run(tmp_path / "resumed", *common, "callbacks.checkpoint.background=true", "ckpt_path=last")
    folder = tmp_path / "thread" / "checkpoints"
    assert sorted(p.name for p in folder.glob("*.ckpt")) == ["last.ckpt", "step=00000006.ckpt", "step=00000008.ckpt"]
    assert all(verified_step(p) is not None for p in folder.glob("*.ckpt"))
    reference = checkpoint_weights(tmp_path / "in_step" / "checkpoints" / "last.ckpt")
    for other in ("thread", "resumed"):
        weights = checkpoint_weights(tmp_path / other / "checkpoints" / "last.ckpt")
        assert all(torch.equal(reference[k], weights[k]) for k in reference), other
    assert logged(tmp_path / "resumed", "train/loss") == logged(tmp_path / "in_step", "train/loss")


def test_a_failed_background_write_is_raised_by_wait(tmp_path: Path) -> None:
    io = BackgroundCheckpointIO()
    (tmp_path / "a_file").write_text("")
    with pytest.raises(CheckpointWriteFailed, match=r"a_file/x.ckpt \(step None\) could not be written on the writer "
                                                    r"thread: .*Not a directory"):  # fmt: skip
        io.save_checkpoint({"state_dict": {"w": torch.ones(2)}}, tmp_path / "a_file" / "x.ckpt")  # not a folder
        io.wait()  # raised by wait(), or by the next save if the write failed already
    io.save_checkpoint({"state_dict": {"w": torch.ones(2)}, "global_step": 3}, tmp_path / "x.ckpt")
    io.wait()
    assert (tmp_path / "x.ckpt").exists()
    io.teardown()


def test_a_deferred_read_on_the_cpu_is_ready_at_once() -> None:
    value = torch.tensor([True, False])
    read = DeferredRead(value)
    assert read.ready() and read.value().tolist() == [True, False]


def test_the_fused_kernel_is_the_default_on_a_gpu_a_cpu_and_for_sharded_parameters() -> None:
    on = {name: SimpleNamespace(device=torch.device(name), dtype=torch.float32) for name in ("cpu", "cuda", "mps")}
    sharded = SimpleNamespace(device=torch.device("cpu"), dtype=torch.float32, full_tensor=lambda: None)
    assert kernel_choice([on["cuda"], on["cuda"]], None) == (True, None)
    assert kernel_choice([sharded], None) == (True, None)  # FSDP2: not one DTensor dispatch per parameter
    assert kernel_choice([on["cpu"]], None) == (True, None)  # a CPU's plain tensors too (issue 67.3)
    assert kernel_choice([on["mps"]], None) == (None, None)  # another device: torch's default
    assert kernel_choice([SimpleNamespace(device=torch.device("cpu"), dtype=torch.int8)], None) == (None, None)
    assert kernel_choice([on["cuda"]], False) == (False, None)  # optimizer.fused=false is obeyed


def test_deterministic_mode_sets_the_cublas_workspace_before_the_first_matmul(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The precision check multiplies matrices on the run's device before the Trainer (which sets the variable too)
    exists: cuBLAS reads CUBLAS_WORKSPACE_CONFIG when its handle is made, so it must be set before that check."""
    import degen_train.run.checks as pretrain

    seen: list[str | None] = []
    original = pretrain.check_precision

    def check(cfg: object) -> None:
        seen.append(os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
        original(cfg)

    monkeypatch.setattr(pretrain, "check_precision", check)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    run(tmp_path / "default", "trainer.max_steps=1", "export_hf=false")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    run(tmp_path / "deterministic", "trainer.max_steps=1", "export_hf=false", "trainer.deterministic=true")
    assert seen == [None, ":4096:8"]


def test_bench_gpu_without_a_gpu_says_so_and_fails() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DEGEN_BENCH_GPU_ON_CPU"}
    result = subprocess.run([sys.executable, "bench/run.py", "gpu"], cwd=REPO, capture_output=True, text=True, env=env,
                            timeout=300)  # fmt: skip
    assert result.returncode == 2
    assert result.stdout.strip().splitlines() == [
        "bench-gpu: no CUDA device on this machine; run it where one is (nothing was measured)"
    ]


def test_bench_gpu_table_and_page_markers(tmp_path: Path) -> None:
    from bench.gpu import TABLE_END, TABLE_START, table, write_page_table

    row = {"tokens_per_s": 2e5, "mfu": 0.1, "total_flops_over_model_flops": 1.0, "time_vs_plain": 1.02,
           "end_to_end_tokens_per_s": 1.9e5, "end_to_end_over_steady": 0.95, "vocabulary": 30522,
           "model_flops_per_token": 5.46e8, "warmup_seconds": 2.0, "seconds_to_first_batch": 9.0}  # fmt: skip
    compiled = {**row, "tokens_per_s": 2.4e5, "warmup_seconds": 32.0}
    loops = ("hf_default", "careful", "ours")
    memory = {"max_memory_allocated_gib": 9.5, "planned_peak_gib": 9.25}  # issue 52.4: the plan beside the card
    results = {"card": "NVIDIA H100 80GB HBM3", "torch": "2.11", "command": "python bench/run.py gpu", "date": "x",
               "throughput": {"bert": {**{f"{k}_eager": row for k in loops}, **{f"{k}_compiled": compiled
                                                                                for k in loops},
                                       "ours_eager": {**row, **memory}}},
               "compile_where": {"bert": {"eager": row, "blocks": compiled, "whole": row}},
               "end_to_end": {**row, "costs_per_event_s": {"checkpoint": 3.0}, "hour_long": {"over_steady": 0.9},
                              "hour_long_on_the_clock": {"over_steady": 0.998, "minutes": {"checkpoint": 30.0}}},
               "terms": {"error": "OSError: [Errno 28] no space left\nmore"}}  # fmt: skip
    text = table(results)
    assert "NVIDIA H100 80GB HBM3" in text
    assert "| bert | careful loop | 30,522 | 546M | 200k (10.0%) | 240k (10.0%) | 30 | 9 |" in text  # what both ran
    assert "| bert | degen-train ÷ careful loop compiled | | | | 1.00× | | |" in text
    assert "| bert eager | 9.50 | 9.25 |" in text and "| bert compiled |" not in text  # measured rows only
    assert "terms: failed (OSError: [Errno 28] no space left)" in text and "| term |" not in text  # a failed part
    assert "Hand loop, bert, steady tokens/s: eager 200k (warm-up 2 s), blocks 240k (warm-up 32 s)" in text
    assert "On the clock (checkpoint every 30 min: callbacks.cadence), it trains at 0.998× the steady rate." in text
    page = tmp_path / "gpu.md"
    page.write_text(f"intro\n{TABLE_START}\nold\n{TABLE_END}\nrest\n")
    assert write_page_table(text, page)
    assert page.read_text() == f"intro\n{TABLE_START}\n{text}{TABLE_END}\nrest\n"


def test_bench_gpu_runs_its_code_on_the_cpu(tmp_path: Path) -> None:
    """The GPU bench's own code, at toy sizes on the CPU (DEGEN_BENCH_GPU_ON_CPU=1): one part, its table."""
    env = {**os.environ, "DEGEN_BENCH_GPU_ON_CPU": "1", "DEGEN_BENCH_RESULTS": str(tmp_path)}
    result = subprocess.run([sys.executable, "bench/run.py", "gpu", "end_to_end"], cwd=REPO, capture_output=True,
                            text=True, env=env, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "gpu_dry_run.md").read_text()
    assert "on CPU (dry run)" in table and "End to end (checkpoints, monitors, final validation):" in table


def test_the_warm_up_stays_outside_the_steady_window() -> None:
    """Issue 45.3: with model.compile working, the blocks compile during the first steps, tens of seconds inside a
    ~2.5 s window: a mean over all steps would report compilation as a slowdown. The steady rate is the median after
    the warm-up; the warm-up's excess is reported beside it (the compile column)."""
    from degen_train.metrics.steady import WARMUP_STEPS, steady_window

    seconds = [30.0, 12.0] + [0.1] * (WARMUP_STEPS - 2) + [0.1, 0.12, 0.1, 0.09, 0.1]
    window = steady_window(seconds)
    assert window.median_seconds == 0.1 and window.timed_steps == 5
    assert window.warmup_seconds == pytest.approx(30 + 12 + 0.1 * (WARMUP_STEPS - 2) - 0.1 * WARMUP_STEPS)
    assert steady_window([5.0, 1.0, 1.0]).median_seconds == 1.0  # a short run: all but its first step
    assert steady_window([]) is None


def test_the_hand_loops_train_the_runs_model_and_count_flops_as_the_runs_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45.1: the hand loop built GPT2Config(vocab_size=50257) while degen-train's "GPT-2 small" had the run's
    30,522-entry vocabulary (764M against 855M FLOPs per token); the BERT hand loop scored every position, degen-train
    the labelled 15%. Both loops now train the model degen-train builds (one vocabulary, one dropout), and their FLOPs
    come from the one function the runs use, at the positions each loop runs its head on."""
    import bench.gpu as gpu

    monkeypatch.setattr(gpu, "ON_CPU", True)
    monkeypatch.setattr(gpu, "corpus_overrides", lambda: ["data=builtin"])  # any corpus: WikiText-2's costs 20 s here
    monkeypatch.setenv("DEGEN_BENCH_RESULTS", str(tmp_path))
    ours = gpu.ours(tmp_path / "ours", "recipe=gpt2_mle", *gpu.steady("gpt2_tiny", 4, 64, 2))
    theirs = gpu.reference("gpt2", "hf_default", compiled=False)
    assert theirs["vocabulary"] == ours["vocabulary"] and theirs["model_flops_per_token"] == pytest.approx(
        ours["model_flops_per_token"])  # fmt: skip
    model, _, _ = gpu.reference_model("gpt2")
    assert model.config.resid_pdrop == model.config.attn_pdrop == 0.1  # the preset's dropout, as the run's
    hf_default = gpu.reference("bert", "hf_default", compiled=False)
    careful = gpu.reference("bert", "careful", compiled=False)
    assert hf_default["vocabulary"] == careful["vocabulary"]
    assert hf_default["model_flops_per_token"] > careful["model_flops_per_token"]  # the head at every position


def test_periodic_work_is_tallied_and_priced_for_an_hour_long_run(tmp_path: Path) -> None:
    """Issue 45.3: the probe, checkpoints and validation on the defaults' cadence, their share of an hour-long run."""
    from degen_train.metrics.steady import hour_long_rate

    summary = run(tmp_path, "trainer.max_steps=6", "trainer.val_check_interval=3", "export_hf=false",
                  "callbacks.checkpoint.every_n_train_steps=3", "callbacks.isotropy.every_n_steps=3")  # fmt: skip
    periodic = summary["periodic"]
    assert periodic["checkpoint"]["events"] >= 2 and periodic["isotropy"]["events"] == 2
    assert periodic["validation"]["events"] >= 2 and all(t["seconds"] > 0 for t in periodic.values())
    # By hand: a 0.1 s step, 3 s of work every 100 steps (10 s): 360 events an hour, 1080 s: 3600 / 4680.
    priced = hour_long_rate(0.1, {"checkpoint": 3.0}, {"checkpoint": 100})
    assert priced["over_steady"] == pytest.approx(3600 / 4680)
    assert priced["checkpoint_share"] == pytest.approx(1080 / 4680)
