"""Training batches made ahead on a background thread (data/prefetch.py, issue 67.3): the loader's own batches in its
own order, its errors raised on the training thread, and no thread left behind a pass that was dropped."""

from __future__ import annotations

import gc
import threading
import time

import pytest
import torch

from degen_train.data.prefetch import Prefetched


def test_prefetch_auto_makes_batches_ahead_on_a_gpu_or_a_core_the_training_threads_leave_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 73.2: on 2 cores whose both run torch's threads, the collating thread cost 2% (fp32) and 11% (bf16) of
    the tokens/s; on a GPU, or with a free core, it takes the collation off the training thread."""
    from degen_train.data import datamodule
    from degen_train.devices.threads import UsableCpus

    monkeypatch.setattr(datamodule, "usable_cpus", lambda: UsableCpus(affinity=2, quota=None))
    depth = datamodule.prefetch_depth
    assert depth("auto", on_gpu=False, training_threads=2) == 0  # this machine's default run
    assert depth("auto", on_gpu=False, training_threads=1) == 2  # threads=1: a core is free
    assert depth("auto", on_gpu=False, training_threads=1, local_processes=2) == 0  # two ranks take both
    assert depth("auto", on_gpu=True, training_threads=2) == 2
    assert depth(3, on_gpu=False, training_threads=2) == 3 and depth(0, on_gpu=True, training_threads=1) == 0


def test_the_loaders_batches_in_order_and_its_length() -> None:
    loader = [{"input_ids": torch.full((2, 3), i)} for i in range(7)]
    ahead = Prefetched(loader, depth=2)
    assert len(ahead) == 7
    assert [int(b["input_ids"][0, 0]) for b in ahead] == list(range(7))
    counted = Prefetched(loader, 3, prepare=lambda b: {**b, "seen": True})
    assert all(b["seen"] for b in counted)


def test_an_error_of_the_loader_is_raised_where_the_batch_is_taken() -> None:
    def broken():  # noqa: ANN202
        yield 1
        raise ValueError("a corrupt example")

    class Loader:
        def __iter__(self):  # noqa: ANN204
            return broken()

    batches = iter(Prefetched(Loader(), depth=2))
    assert next(batches) == 1
    with pytest.raises(ValueError, match="a corrupt example"):
        next(batches)


def test_a_dropped_pass_leaves_no_thread() -> None:
    endless = iter(lambda: torch.zeros(2), None)  # an endless loader, as a run's step sampler is

    class Loader:
        def __iter__(self):  # noqa: ANN204
            return endless

    batches = iter(Prefetched(Loader(), depth=2))
    next(batches)
    assert any(t.name == "degen-train-prefetch" for t in threading.enumerate())
    del batches
    gc.collect()
    deadline = time.monotonic() + 5
    while any(t.name == "degen-train-prefetch" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "degen-train-prefetch" for t in threading.enumerate())


def test_at_exit_each_thread_still_making_batches_is_stopped_and_joined() -> None:
    """A preempted run exited -6 ("terminate called without an active exception") instead of 75 once: the interpreter
    finalized while the prefetch thread was inside a collation, and killed it in a C++ frame. The exit hook stops and
    joins every filling thread first, also one whose pass is still held and busy."""
    from degen_train.data import prefetch

    def slow():  # noqa: ANN202 - a collation that takes a while, as a big batch's does
        while True:
            time.sleep(0.05)
            yield torch.zeros(2)

    class Loader:
        def __iter__(self):  # noqa: ANN204
            return slow()

    batches = iter(Prefetched(Loader(), depth=1))
    next(batches)
    thread = batches._thread
    assert thread.is_alive()
    prefetch.stop_every_thread()
    assert not thread.is_alive() and not prefetch._RUNNING


def test_a_resumed_run_trains_the_batches_a_straight_one_does(tmp_path) -> None:  # noqa: ANN001
    """The prefetched batch is never lost or repeated: the resumed run's sampler starts at its checkpoint's update,
    so a run stopped at update 3 and resumed trains the same batches, to the same weights, as one never stopped."""
    from tests.helpers import checkpoint_weights, run

    settings = ["trainer.max_steps=6", "callbacks.checkpoint.every_n_train_steps=3", "export_hf=false",
                "data.prefetch=3", "callbacks.checkpoint.save_top_k=-1"]  # fmt: skip
    run(tmp_path / "straight", *settings)
    run(tmp_path / "stopped", *settings[1:], "trainer.max_steps=3")
    run(tmp_path / "stopped", *settings, "ckpt_path=last")
    a = checkpoint_weights(tmp_path / "straight" / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(tmp_path / "stopped" / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)
