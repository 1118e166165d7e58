"""The GPU levers, checked on the CPU: the collator's labelled positions, loader workers, checkpoints written on a
writer thread, deferred reads, the optimizer's kernel choice, deterministic mode's environment and the GPU
sitting's table. Their speed is measured by `make bench-gpu`, never here."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from degen_train.data.datamodule import loader_workers
from degen_train.devices.device_reads import DeferredRead
from degen_train.losses.contract import WeightedSum
from degen_train.optim.optimizer import kernel_choice
from degen_train.storage.checkpoints import BackgroundCheckpointIO, CheckpointWriteFailed, verified_step
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


def test_the_first_failed_background_write_is_the_one_raised_and_no_write_follows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI of 2026-12-02: the step-2 write failed, the run stopped at step 4 naming it, and the step-4 write handed over
    just before failed as the run tore down, replacing the step-2 error by its own. Now the first failure is the one
    raised, and no write is handed over once a failure is known."""
    import degen_train.storage.checkpoints as checkpoints

    written: list[str] = []
    handed_over = threading.Event()

    def no_space(checkpoint: dict, path: Path) -> None:
        handed_over.wait(timeout=30)  # fails after save_checkpoint returned, as a slow disk does
        written.append(path.name)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints, "save_checkpoint_file", no_space)
    io = BackgroundCheckpointIO()
    io.save_checkpoint({"state_dict": {}, "global_step": 2}, tmp_path / "last.ckpt")
    handed_over.set()
    io._executor.submit(lambda: None).result()  # the step-2 write has failed (no raise yet)
    with pytest.raises(CheckpointWriteFailed, match=r"last\.ckpt \(step 2\)"):
        io.save_checkpoint({"state_dict": {}, "global_step": 4}, tmp_path / "step=4.ckpt")
    io.teardown()  # nothing more is raised: the step-4 write was never handed over
    assert written == ["last.ckpt"]


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


def test_the_sittings_notes_price_the_cadence_and_name_exactness() -> None:
    """The row kinds folded from the old bench-gpu (issue 67.2) keep their questions in the sitting's table: the
    end-to-end row's hour-long pricing, exactness in both modes, FSDP2 against one device, host levers against their
    own defaults."""
    from bench.gpu.sitting import compare, table

    row = {"tokens_per_s": 2e5, "mfu": 0.1, "step_seconds": None, "seconds_per_batch": 0.1}
    results = {"command": "make bench-gpu ARGS='end_to_end host exactness fsdp'", "date": "x",
               "machine": {"card": "NVIDIA H100 80GB HBM3", "torch": "2.11", "cuda": "13.0", "peak_flops": 989.5e12},
               "rows": {"best": {"gpt2_ours": row},
                        "end_to_end": {"gpt2_default_cadence": {
                            **row, "end_to_end_tokens_per_s": 1.9e5, "cadence_updates": 100,
                            "costs_per_event_s": {"checkpoint": 3.0}, "hour_long": {"over_steady": 0.9},
                            "hour_long_on_the_clock": {"over_steady": 0.998, "minutes": {"checkpoint": 30.0}}}},
                        "host": {"defaults": row, "workers_0": {**row, "tokens_per_s": 1e5},
                                 "gpt2_chunked_output_layer": row, "gpt2_whole_logits": {**row, "tokens_per_s": 3e5}},
                        "exactness": {"default": {**row, "repeat_max_abs_diff": 0.0, "resume_max_abs_diff": 2e-9},
                                      "deterministic": {**row, "tokens_per_s": 1.6e5, "repeat_max_abs_diff": 0.0,
                                                        "resume_max_abs_diff": 0.0}},
                        "fsdp": {"single_device": row, "fsdp2": {"error": "OSError: [Errno 28] no space left"}}}}
    compare(results)
    text = table(results)
    assert "| end_to_end | gpt2_default_cadence | 200k | 10.0% | – | 0 | 0.95× the best row's steady rate |" in text
    assert "| host | workers_0 | 100k | 10.0% | – | 0 | 0.50× its defaults' tokens/s |" in text
    assert "| host | gpt2_whole_logits | 300k | 10.0% | – | 0 | 1.50× its defaults' tokens/s |" in text
    assert "| exactness | deterministic | 160k | 10.0% | – | 0 | 0.80× the default mode's tokens/s |" in text
    assert "| fsdp | fsdp2 | OSError: [Errno 28] no space left | | | | |" in text  # a failed run, the others stand
    assert ("Periodic work per event: checkpoint 3.00 s. At the defaults' cadence (each every 100 updates) an "
            "hour-long run trains at 0.900× the steady rate.") in text
    assert "On the clock (checkpoint every 30 min: callbacks.cadence), it trains at 0.998× the steady rate." in text
    assert ("exactness, default mode: two repeats differ by 0.0e+00, a 20 + 20 resume from a straight run by "
            "2.0e-09.") in text


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
    import bench.gpu.best as best
    import bench.gpu.runs as runs

    for module in (best, runs):
        monkeypatch.setattr(module, "ON_CPU", True)
        monkeypatch.setattr(module, "corpus_overrides", lambda: ["data=builtin"])  # WikiText-2's costs 20 s here
    decoder = runs.Workload("gpt2", "gpt2_mle", "gpt2_small", 4, 64)
    overrides = ["recipe=gpt2_mle", *runs.steady("gpt2_tiny", 4, 64, 2)]
    ours = runs.ours(tmp_path / "ours", *overrides)
    theirs = best.careful_loop(decoder, overrides, 2)
    assert theirs["vocabulary"] == ours["vocabulary"] and theirs["model_flops_per_token"] == pytest.approx(
        ours["model_flops_per_token"])  # fmt: skip
    assert best.hand_model(decoder, overrides).config.resid_pdrop == 0.1  # the recipe's dropout, as the run's
    encoder = runs.Workload("bert", "bert_mlm", "bert_base", 8, 32)
    bert = ["recipe=bert_mlm", *runs.steady("tiny", 8, 32, 2)]
    hf_default = best.careful_loop(encoder, bert, 2, mode="hf_default")
    careful = best.careful_loop(encoder, bert, 2)
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
