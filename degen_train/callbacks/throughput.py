"""Throughput and MFU in the logs, the progress bar and summary.json.

Hand-written rather than Lightning's ``ThroughputMonitor``: that one counts one item kind and one FLOPs
figure per batch and restarts its counts at every ``fit``; a run here needs two of each (all tokens and
predicted tokens; useful and total FLOPs) and a mean that survives resumes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, TQDMProgressBar
from torch.utils.flop_counter import FlopCounterMode

from degen_train.callbacks import sweep_eta
from degen_train.devices.precision import COMPUTE_DTYPE
from degen_train.metrics.flops import body_and_head_parameters, model_flops, peak_flops
from degen_train.metrics.steady import steady_window
from degen_train.metrics.step_clock import StepClock

log = logging.getLogger("degen_train.throughput")


class Throughput(Callback):
    """tokens/s, predicted tokens/s, model MFU = useful FLOPs/s ÷ peak, total MFU = all FLOPs/s ÷ peak.

    Useful FLOPs are counted from the model's shape (metrics.flops.model_flops). All FLOPs (teacher,
    generator, extra views included) are counted once, by torch's FlopCounterMode over the first step of
    each process, as a ratio to that step's useful FLOPs; later steps scale by the same ratio. That step runs
    eagerly: a compiled block first called under a dispatch mode is skipped by torch.compile for good (model.compile
    compiled nothing on an H200 until this was found).
    """

    def __init__(self, window: int = 20, peak_flops: float | None = None, count_total_flops: bool = True) -> None:
        """``count_total_flops``: count every FLOP of the first step with torch's FlopCounterMode (total MFU); false:
        total MFU is not reported (summary.json's ``mfu_total`` and ``total_flops_over_model_flops`` are null)."""
        self.window = window
        self.count_total_flops = count_total_flops
        self.configured_peak = peak_flops
        self.peak, self.peak_source = 0.0, ""
        self._said_untrusted = False
        self.marks: list[tuple[float, int, int, float]] = []  # (time, tokens, predicted, model FLOPs), global
        self.totals = {"tokens": 0, "predicted": 0, "model_flops": 0.0, "seconds": 0.0, "batches": 0}
        self.overhead = 1.0  # all FLOPs / useful FLOPs, measured on the first step
        self.model_flops_per_token = 0.0
        self._shape: tuple[int, int, int, int] | None = None  # (P_body, P_head, layers, hidden)
        self._counter: FlopCounterMode | None = None
        self._counting = contextlib.ExitStack()  # the eager stance and the counter, over the counted step
        self._measured = False
        self._counted_step = -1
        self._last: float | None = None
        self._excluded = 0.0  # seconds other callbacks spent measuring in this process (exclude)
        # Each batch's seconds on the device's timeline (metrics/step_clock.py: CUDA events, the host clock on a CPU),
        # the one clock the bench's hand loops are timed by; the steady rate is their median (metrics/steady.py).
        self.clock = StepClock("cpu")
        # Periodic work of this segment: {kind: [events, seconds]} (validation, the isotropy probe, checkpoints)
        self.periodic: dict[str, list[float]] = {}
        self._validation_started: float | None = None
        self._fit_started: float | None = None
        self.seconds_to_first_batch: float | None = None  # fit start -> the first batch's end (this segment)

    def setup(self, trainer: pl.Trainer, module: pl.LightningModule, stage: str) -> None:
        model = module.backbone.model
        body, head = body_and_head_parameters(model, module.backbone.vocab_head)
        self._shape = (body, head, model.config.num_hidden_layers, model.config.hidden_size)
        dtype = COMPUTE_DTYPE.get(str(trainer.precision), torch.float32)
        self.peak, self.peak_source = peak_flops(trainer.strategy.root_device, dtype, self.configured_peak)
        if stage == "fit":  # a later validate() (the final validation) sets up again: its clock keeps the steps
            self.clock = StepClock(trainer.strategy.root_device)

    def batch_model_flops(self, batch: dict) -> tuple[int, int, float]:
        """(tokens, predicted tokens, useful FLOPs) of this process's batch."""
        assert self._shape is not None
        body, head, layers, hidden = self._shape
        size, length = batch["input_ids"].shape
        tokens, predicted = host_counts(batch)
        flops = model_flops(
            body=body, head=head, layers=layers, hidden=hidden, batch=size, length=length, predicted=predicted
        )
        return int(tokens), int(predicted), flops

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._fit_started = time.perf_counter()

    def on_train_batch_start(
        self, trainer: pl.Trainer, module: pl.LightningModule, batch: dict, batch_idx: int
    ) -> None:
        self.clock.begin()
        if self.count_total_flops and not self._measured and self._counter is None:
            # Eagerly: under model.compile, a block whose first call meets the counter's dispatch mode is marked
            # "skip" by dynamo and never compiled (so compile gained nothing); after this step it compiles.
            self._counting.enter_context(torch.compiler.set_stance("force_eager"))
            self._counter = self._counting.enter_context(FlopCounterMode(display=False))
            self._counted_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, batch: dict, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        tokens, predicted, flops = self.batch_model_flops(batch)
        if self._counter is not None:  # forward and backward of the first micro-batch are counted
            self._counting.close()
            # A step that began with a term's sampling passes (I-STAR's C0) is no step's usual work: count another.
            if getattr(module, "states_sampled_at", None) != self._counted_step:
                self.overhead = self._counter.get_total_flops() / max(flops, 1.0)
                self._measured = True
            self._counter = None
        world = trainer.world_size
        self.model_flops_per_token = flops / max(batch["input_ids"].numel(), 1)
        clock = now - self._excluded  # training time: wall time less the measuring other callbacks did (exclude)
        mark = (clock, tokens * world, predicted * world, flops * world)
        if self._last is not None:  # the first batch after a (re)start pays start-up costs: not counted
            for key, value in zip(("tokens", "predicted", "model_flops"), mark[1:], strict=True):
                self.totals[key] += value
            self.totals["seconds"] += clock - self._last
            self.totals["batches"] += 1
            if self.totals["batches"] == sweep_eta.AFTER_STEPS and trainer.is_global_zero:  # a sweep's cost, once
                sweep_eta.announce(int(trainer.max_steps), self.seconds_per_step(trainer))
        elif self._fit_started is not None and self.seconds_to_first_batch is None:
            self.seconds_to_first_batch = now - self._fit_started
        self._last = clock
        self.clock.mark()
        self.marks = (self.marks + [mark])[-(self.window + 1) :]
        if len(self.marks) > 1 and logging_step(trainer):  # self.log costs ~0.3 ms a value: only when it is written
            span = max(self.marks[-1][0] - self.marks[0][0], 1e-9)
            tokens_rate = sum(m[1] for m in self.marks[1:]) / span
            model_mfu = self.trusted(sum(m[3] for m in self.marks[1:]) / span / (self.peak * world))
            rates = {
                "train/tokens_per_s": tokens_rate,
                "train/predicted_tokens_per_s": sum(m[2] for m in self.marks[1:]) / span,
                "train/mfu": model_mfu,
            }
            if self._measured and model_mfu is not None:
                rates["train/mfu_total"] = model_mfu * self.overhead
            for key, value in rates.items():
                if value is None:  # an MFU against a measured peak the run outpaced: not shown
                    continue
                module.log(key, value, prog_bar=key in ("train/tokens_per_s", "train/mfu"), on_step=True, batch_size=1)

    def seconds_per_step(self, trainer: pl.Trainer) -> float:
        """The mean seconds of an optimizer step so far (its micro-batches together), start-up left out."""
        batches = max(self.totals["batches"], 1)
        return self.totals["seconds"] / batches * max(int(trainer.accumulate_grad_batches), 1)

    def on_exception(self, trainer: pl.Trainer, module: pl.LightningModule, exception: BaseException) -> None:
        self._counting.close()  # a step that failed while counted leaves neither the counter nor the stance on
        self._counter = None

    def on_validation_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.clock.interrupt()  # no step interval spans a validation
        self._validation_started = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        # validation time is not training time: the next batch is timed from here (a 6-update run validating after
        # every update was otherwise never timed and reported 0 tokens/s)
        if self._last is not None:
            self._last = time.perf_counter() - self._excluded
        if self._validation_started is not None:
            self.spent("validation", time.perf_counter() - self._validation_started)
            self._validation_started = None

    def spent(self, kind: str, seconds: float) -> None:
        """Tally one event of periodic work (a validation, an isotropy probe, a checkpoint's share of the step)."""
        tally = self.periodic.setdefault(kind, [0, 0.0])
        tally[0] += 1
        tally[1] += seconds

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` of measuring done between two steps (the isotropy probe) out of the rates, as
        validation is left out: whichever side of this callback's mark the callback order puts it."""
        self._excluded += seconds
        self.clock.interrupt()
        self.spent("isotropy", seconds)

    def state_dict(self) -> dict[str, Any]:  # a resumed run's means cover all of its segments
        return {**self.totals, "overhead": self.overhead, "measured": self._measured}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for key in self.totals:
            self.totals[key] = type(self.totals[key])(state_dict.get(key, 0))
        self.overhead = float(state_dict.get("overhead", 1.0))
        self._measured = bool(state_dict.get("measured", False))

    def trusted(self, mfu: float) -> float | None:
        """``mfu``, or None where it cannot be true: above 100% of a peak measured here (a matmul timed while the
        machine was loaded reads low, and the run then 'beats' it: 131.8% was printed). A data sheet's or the
        config's peak is kept as is. Said once, in the log."""
        if mfu <= 1.0 or not self.peak_source.startswith("measured"):
            return mfu
        if not self._said_untrusted:
            self._said_untrusted = True
            log.warning("MFU not reported: the run did %.0f%% of the %s peak measured at its start (%.3g FLOP/s), "
                        "so that peak was read under load; give callbacks.throughput.peak_flops=the device's "
                        "data-sheet peak for an MFU", 100 * mfu, self.peak_source, self.peak)  # fmt: skip
        return None

    @property
    def mean_tokens_per_s(self) -> float | None:
        """None when no step was timed (the first after each start pays its start-up costs): never a false 0."""
        return self.totals["tokens"] / self.totals["seconds"] if self.totals["seconds"] else None

    def summary(self, world_size: int) -> dict[str, Any]:
        """The run's means over every step timed, for summary.json."""
        seconds = self.totals["seconds"]
        model_mfu = None
        if seconds and self.peak:
            model_mfu = self.trusted(self.totals["model_flops"] / seconds / (self.peak * world_size))
        window = steady_window(self.clock.seconds())
        tokens_per_batch = self.totals["tokens"] / self.totals["batches"] if self.totals["batches"] else None
        return {
            "tokens_per_s": self.mean_tokens_per_s,
            # null, and why, where nothing was timed (a figure not measured is no zero)
            "tokens_per_s_unmeasured": None if seconds else "no step was timed: the first after each start pays its "
                                                            "start-up costs and is left out",
            # the median batch after the warm-up (metrics/steady.py): a rate that compilation does not pull down
            "steady_tokens_per_s": tokens_per_batch / window.median_seconds if window and tokens_per_batch else None,
            "warmup_seconds": window.warmup_seconds if window else None,
            # the steady window's step times on the device's clock: median, interquartile range, how many, which clock
            "step_seconds": {"median": window.median_seconds, "interquartile": window.interquartile_seconds,
                             "steps": window.timed_steps, "clock": self.clock.kind} if window else None,  # fmt: skip
            "seconds_to_first_batch": self.seconds_to_first_batch,
            # {kind: {events, seconds}} of this segment: what a run's cadence costs (bench: an hour-long run's share)
            "periodic": {kind: {"events": int(n), "seconds": t} for kind, (n, t) in self.periodic.items()},
            "predicted_tokens_per_s": self.totals["predicted"] / seconds if seconds else None,
            # per micro-batch: what a term costs, whatever its batches' padding (SimCSE's sentences are short)
            "seconds_per_batch": seconds / self.totals["batches"] if self.totals["batches"] else None,
            "model_flops_per_token": self.model_flops_per_token,
            "mfu": model_mfu,
            "mfu_total": model_mfu * self.overhead if model_mfu is not None and self._measured else None,
            "total_flops_over_model_flops": self.overhead if self._measured else None,
            "peak_flops_per_device": self.peak,
            "peak_flops_source": self.peak_source,
        }


def logging_step(trainer: pl.Trainer) -> bool:
    """Whether the loggers write this step's values (trainer.log_every_n_steps): Lightning's own test of it."""
    return bool(getattr(trainer._logger_connector, "should_update_logs", True))


def host_counts(batch: dict) -> tuple[int, int]:
    """(tokens, predicted tokens) of a batch: as the module counted them on the host before the batch went to the
    device (``host_counts``, no wait), else read from the device batch (one read)."""
    counted = batch.get("host_counts")
    if counted is not None:
        return counted
    tokens, predicted = torch.stack([batch["attention_mask"].sum(), (batch["labels"] != -100).sum()]).tolist()
    return int(tokens), int(predicted)


class StepProgressBar(TQDMProgressBar):
    """A progress bar over optimizer steps to ``max_steps`` (the loader is endless), with ETA."""

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        if trainer.max_steps > 0:
            total = trainer.max_steps * trainer.accumulate_grad_batches
            done = trainer.global_step * trainer.accumulate_grad_batches
            self.train_progress_bar.reset(total=total)
            self.train_progress_bar.n = done
            self.train_progress_bar.refresh()

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Move the bar every ``refresh_rate`` batches, but read its values (loss, tokens/s: device tensors, so a
        host wait each) only on logging steps, as the loggers do."""
        bar, n = self.train_progress_bar, batch_idx + 1
        if bar is None or bar.disable or not self._should_update(n, bar.total):
            return
        bar.n = n
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            bar.set_postfix(self.get_metrics(trainer, module), refresh=False)
        bar.refresh()

    def get_metrics(self, trainer: pl.Trainer, module: pl.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, module)
        metrics.pop("v_num", None)
        left = sweep_left(trainer)  # a sweep's member: its time left
        if left is not None:
            metrics["sweep_left"] = left
        return metrics


def sweep_left(trainer: pl.Trainer) -> str | None:
    """The sweep's time left as this member sees it (callbacks/sweep_eta.py), once its Throughput clock has timed its
    first steps: shown by the progress bar and by PlainProgress's lines."""
    clock = next((c for c in trainer.callbacks if isinstance(c, Throughput)), None)
    if clock is None or clock.totals["batches"] < sweep_eta.AFTER_STEPS:
        return None
    return sweep_eta.time_left(int(trainer.max_steps), trainer.global_step, clock.seconds_per_step(trainer))
