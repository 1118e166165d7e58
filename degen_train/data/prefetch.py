"""The next training batches collated on a background thread while the training thread computes (issue 67.3: with
no loader workers, a CPU run's next() took 3.9 of its 6.0 ms of host time per step at 128 × 128).

The batches and their order are the loader's own: its sampler starts at the update the run is at (data/sampling.py),
and a collator draws no global random numbers (each token's masking comes from its example's seed and its position,
data/collate.py), so a batch made on this thread is the batch the training thread would have made. A batch made but
not yet taken when a run stops is simply made again by the resumed run, whose sampler starts at its checkpoint's
update: none is lost or repeated.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_DONE = object()
# Every filling thread with its stop event, so that the interpreter's exit can stop them (stop_every_thread)
_RUNNING: list[tuple[threading.Thread, threading.Event]] = []


class Prefetched:
    """``loader``'s batches, each made ``depth`` ahead on a daemon thread; its length is the loader's."""

    def __init__(self, loader: Iterable[Any], depth: int, prepare: Callable[[Any], Any] | None = None) -> None:
        """``prepare``: more host work on each batch, done on the thread too (the throughput's token counts)."""
        if depth < 1:
            raise ValueError(f"data.prefetch={depth}: at least 1 batch ahead, or 0 for none")
        self.loader, self.depth, self.prepare = loader, depth, prepare

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:  # the loader's own attributes (batch_sampler, dataset, ...)
        if name in ("loader", "depth", "prepare"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        batches = iter(self.loader)
        return _Ahead(map(self.prepare, batches) if self.prepare else batches, self.depth)


class _Ahead:
    """One pass of a loader, made ahead: the thread puts each batch (or the error it met) in a bounded queue; the
    training thread takes them in order. Dropped or closed, the thread stops at its next put (it holds no reference
    to this object, so dropping it is what ends it)."""

    def __init__(self, source: Iterator[Any], depth: int) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_fill, args=(source, self._queue, self._stop),
                                        name="degen-train-prefetch", daemon=True)  # fmt: skip
        self._thread.start()
        _RUNNING[:] = [(t, e) for t, e in _RUNNING if t.is_alive()]
        _RUNNING.append((self._thread, self._stop))

    def __iter__(self) -> _Ahead:
        return self

    def __next__(self) -> Any:
        batch, error = self._queue.get()
        if error is not None:
            raise error
        if batch is _DONE:
            raise StopIteration
        return batch

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __del__(self) -> None:
        self._stop.set()


@atexit.register
def stop_every_thread() -> None:
    """Stop and join each filling thread before the interpreter finalizes. A daemon thread still inside torch's
    collation then is killed in a C++ frame, and the process aborts ("terminate called without an active
    exception", exit -6): a preempted run lost its exit code 75 that way (tests/faults/test_preemption.py)."""
    for _, stop in _RUNNING:
        stop.set()
    for thread, _ in _RUNNING:
        thread.join(timeout=5)
    _RUNNING.clear()


def _fill(source: Iterator[Any], ahead: queue.Queue, stop: threading.Event) -> None:
    """The thread's work: the loader's batches into ``ahead``, then the end (or the error met), until ``stop``."""
    try:
        for batch in source:
            if not _put(ahead, stop, (batch, None)):
                return
    except BaseException as error:  # noqa: BLE001 - handed to the training thread, which raises it
        _put(ahead, stop, (None, error))
        return
    _put(ahead, stop, (_DONE, None))


def _put(ahead: queue.Queue, stop: threading.Event, item: tuple[Any, BaseException | None]) -> bool:
    while not stop.is_set():
        try:
            ahead.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False
