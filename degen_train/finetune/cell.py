"""One fine-tuning cell: one model, one task, one learning rate, one seed -> dev metrics.

The protocol of HF's ``run_glue.py`` and the seed papers: a classification (or, for a score, regression) head on
the encoder, AdamW with weight decay on every weight but biases and norms, linear warm-up then linear decay to 0,
gradient norm clipped at 1, dropout on while training and off for scoring, each batch padded to its longest row.
The seed draws the head's initial weights, then is set again before training (as ``Trainer`` does); epoch e visits
the examples in ``randperm(n)`` of a generator seeded with seed + e (as accelerate's seedable sampler does), so a
cell equals an HF ``Trainer`` run of the same settings (tests/test_finetune.py holds it to that).

Started by a launcher (``torchrun --nproc-per-node N``, or ``degen-finetune --devices N`` which starts torchrun),
each cell trains with DDP: each process takes its share of every global batch of ``batch_size`` rows, and its loss
is its rows' summed loss over the global batch's row count, times the process count (DDP averages gradients over
processes), so N processes update the weights as one process holding the global batch does — also for an uneven
last batch, where a process left without a row trains on one row with weight 0.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Sampler

import degen_train.models.attention_variants  # noqa: F401 - registers the degen_<arch> types of exports with an attention variant
from degen_train.core.handed_files import no_remote_code
from degen_train.core.io import atomic_directory
from degen_train.finetune.baselines import predicted_classes, task_baselines
from degen_train.finetune.metrics import split_metrics, task_score
from degen_train.finetune.section import Protocol
from degen_train.finetune.tasks import Split, Task

log = logging.getLogger("degen_train.finetune")


class EpochSeededSampler(Sampler[int]):
    """Epoch e: ``torch.randperm(n)`` of a generator seeded with ``seed + e`` (accelerate's SeedableRandomSampler
    order, which HF Trainer uses), so the order depends on the seed and epoch alone, never on other random draws."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from torch.randperm(self.size, generator=generator).tolist()

    def __len__(self) -> int:
        return self.size


@dataclass(frozen=True)
class Processes:
    """This process's place among a launcher's processes (torchrun's RANK, WORLD_SIZE, LOCAL_WORLD_SIZE)."""

    rank: int = 0
    world: int = 1
    local: int = 1

    @classmethod
    def from_environment(cls) -> Processes:
        world = int(os.environ.get("WORLD_SIZE", 1))
        return cls(int(os.environ.get("RANK", 0)), world, int(os.environ.get("LOCAL_WORLD_SIZE", world)))


class GlobalBatchShards(Sampler[list[tuple[int, float, int]]]):
    """This process's rows of each global batch of ``EpochSeededSampler``'s order, as (row, weight, rows in the
    global batch): the global batch cut into ``world`` contiguous pieces; a process whose piece is empty (a last
    batch of fewer rows than processes) gets the batch's first row with weight 0, so every process runs the same
    steps."""

    def __init__(self, size: int, seed: int, batch_size: int, rank: int, world: int) -> None:
        # Named ``sampler``: Lightning sets the epoch on a batch sampler's ``sampler``, not on the batch sampler.
        self.sampler = EpochSeededSampler(size, seed)
        self.batch_size, self.rank, self.world = batch_size, rank, world

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[tuple[int, float, int]]]:
        order = list(self.sampler)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            per = math.ceil(len(batch) / self.world)
            mine = batch[self.rank * per : (self.rank + 1) * per]
            yield [(row, 1.0, len(batch)) for row in mine] if mine else [(batch[0], 0.0, len(batch))]

    def __len__(self) -> int:
        return math.ceil(self.sampler.size / self.batch_size)


class WeightedRows(torch.utils.data.Dataset):
    """Rows looked up by (row, weight, rows in the global batch), the last two added to each row."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: tuple[int, float, int]) -> dict[str, Any]:
        row, weight, global_rows = key
        return {**self.rows[row], "weight": weight, "global_rows": global_rows}


def weighted_collator(collate: Any) -> Any:
    def collate_weighted(rows: list[dict[str, Any]]) -> dict[str, Any]:
        weights = torch.tensor([row.pop("weight") for row in rows])
        global_rows = torch.tensor([row.pop("global_rows") for row in rows])
        return {**collate(rows), "weight": weights, "global_rows": global_rows}

    return collate_weighted


def encode_split(split: Split, tokenizer: Any, max_length: int, limit: int | None = None) -> list[dict[str, Any]]:
    """Token ids of each row (pairs truncated longest-first to ``max_length``), with its label."""
    count = len(split) if limit is None else min(limit, len(split))
    columns = list(zip(*split.texts[:count], strict=True))
    encoded = tokenizer(*columns, truncation=True, max_length=max_length)
    rows = [{key: encoded[key][i] for key in encoded} for i in range(count)]
    for row, label in zip(rows, split.labels[:count], strict=True):
        row["labels"] = label
    return rows


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay for every weight but biases and normalisation weights (BERT's and HF Trainer's rule)."""
    no_decay = {
        f"{module_name}.{name}" if module_name else name
        for module_name, module in model.named_modules()
        if "norm" in type(module).__name__.lower()
        for name, _ in module.named_parameters(recurse=False)
    }
    decay, rest = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (rest if name in no_decay or name.endswith("bias") else decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def linear_with_warmup(step: int, warmup: int, total: int) -> float:
    """The learning-rate factor: step / warmup, then (total − step) / (total − warmup), never below 0."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


class SequenceClassifier(pl.LightningModule):
    def __init__(self, model: Any, *, lr: float, protocol: Protocol, total_steps: int) -> None:
        super().__init__()
        self.model, self.lr, self.protocol, self.total_steps = model, lr, protocol, total_steps
        self.warmup_steps = math.ceil(protocol.warmup_ratio * total_steps)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if "weight" in batch:  # a process's share of a global batch (DDP)
            return self.shard_loss(batch)
        loss = self.model(**batch).loss  # cross-entropy over the labels, or MSE for a score (num_labels=1)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def shard_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Σ (this process's rows' losses · weight) / rows of the global batch · processes: DDP's mean over processes
        then equals the loss the model computes on the whole global batch (cross-entropy, or MSE for a score)."""
        weight, labels, global_rows = batch.pop("weight"), batch.pop("labels"), batch.pop("global_rows")
        logits = self.model(**batch).logits.float()
        if logits.shape[-1] == 1:
            losses = (logits.squeeze(-1) - labels.float()) ** 2
        else:
            losses = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        world = self.trainer.world_size
        loss = (losses * weight.to(losses.dtype)).sum() * world / global_rows[0].to(losses.dtype)
        self.log("train/loss", loss / world, prog_bar=True, batch_size=len(labels))
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(
            decay_groups(self.model, self.protocol.weight_decay), lr=self.lr, eps=self.protocol.adam_eps,
            fused=self.protocol.fused_adamw,
        )  # fmt: skip
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: linear_with_warmup(step, self.warmup_steps, self.total_steps)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def load_classifier(model_dir: Path, task: Task) -> tuple[Any, Any]:
    """The encoder (or decoder) at ``model_dir`` with a fresh head for ``task``, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as transformers_logging

    from degen_train.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # "some weights newly initialized": the head, as intended
    transformers_logging.disable_progress_bar()
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            model_dir,
            num_labels=task.num_labels,
            problem_type="regression" if task.num_labels == 1 else "single_label_classification",
            **no_remote_code(model_dir),
        )
    finally:
        transformers_logging.set_verbosity(verbosity)
    if tokenizer.pad_token_id is None:  # a decoder's tokenizer: pad with its end-of-text token
        tokenizer.pad_token = tokenizer.eos_token
    # A decoder classifies from its last non-pad token, which it finds through pad_token_id.
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.train(), tokenizer


def collator_for(tokenizer: Any, protocol: Protocol | None = None) -> Any:
    """Each batch padded to its own longest row, or (padding: max_length, run_glue's) every row to max_length."""
    from transformers import DataCollatorWithPadding

    if protocol is not None and protocol.padding == "max_length":
        return DataCollatorWithPadding(tokenizer, padding="max_length", max_length=protocol.max_length)
    return DataCollatorWithPadding(tokenizer)


def predict(model: Any, rows: list[dict[str, Any]], collate: Any, batch_size: int, regression: bool) -> list:
    model.eval()
    device = next(model.parameters()).device
    outputs: list = []
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            batch = collate(rows[start : start + batch_size])
            batch.pop("labels", None)
            logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.float()
            outputs.extend(logits.squeeze(-1).tolist() if regression else logits.argmax(-1).tolist())
    return outputs


def examples_seen(steps: int, batches_per_epoch: int, size: int, batch_size: int) -> int:
    """Rows trained on in ``steps`` updates (each epoch's last batch may be short)."""
    full, rest = divmod(steps, batches_per_epoch)
    return full * size + min(rest * batch_size, size)


# Set by degen-finetune's SIGTERM/SIGINT handler: the cell in progress stops at its next step (unsaved: it starts
# again on resume) and the grid ends with CellsInterrupted, exit code 75 (README: Stopping and going on).
STOP_ASKED = threading.Event()


class CellsInterrupted(Exception):
    """A signal stopped the grid; every finished cell is on disk, and the same command goes on with the rest."""


class StopWhenAsked(pl.Callback):
    """Stop the cell at the end of a step once asked; every process at the same step (the largest flag wins)."""

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        asked = STOP_ASKED.is_set()
        if trainer.world_size > 1:
            flag = torch.tensor([float(asked)], device=trainer.strategy.root_device)
            asked = bool(trainer.strategy.reduce(flag, reduce_op="max").item())
        if asked:
            raise CellsInterrupted("the cell in progress was stopped; it starts again on resume")


def fit_classifier(
    model_dir: Path, task: Task, *, lr: float, seed: int, protocol: Protocol, processes: Processes | None = None
) -> tuple[Any, Any, dict[str, Any]]:
    """Fine-tune ``model_dir`` on ``task``'s train split; (the model, its tokenizer, what training measured).
    ``processes``: None reads a launcher's environment; Processes() trains in this process alone (eval.glue at the
    end of a multi-process pretraining run, where only rank 0 fine-tunes)."""
    torch.manual_seed(seed)  # the head's initial weights
    model, tokenizer = load_classifier(model_dir, task)
    collate = collator_for(tokenizer, protocol)
    train_rows = encode_split(task.train, tokenizer, protocol.max_length, protocol.max_train_examples)
    batches_per_epoch = math.ceil(len(train_rows) / protocol.batch_size)
    total_steps = math.ceil(batches_per_epoch * protocol.epochs)
    pl.seed_everything(seed, verbose=False)  # training's random draws (dropout) start from the seed, as Trainer's
    processes = processes or Processes.from_environment()
    if processes.world > 1:
        shards = GlobalBatchShards(len(train_rows), seed, protocol.batch_size, processes.rank, processes.world)
        loader = DataLoader(WeightedRows(train_rows), batch_sampler=shards,
                            collate_fn=weighted_collator(collate))  # fmt: skip
    else:
        loader = DataLoader(
            train_rows, batch_size=protocol.batch_size, sampler=EpochSeededSampler(len(train_rows), seed),
            collate_fn=collate,
        )  # fmt: skip
    module = SequenceClassifier(model, lr=lr, protocol=protocol, total_steps=total_steps)
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)  # "GPU available", "max_steps reached": once per cell is noise
    try:
        trainer = pl.Trainer(
            callbacks=[StopWhenAsked()],
            max_steps=total_steps, max_epochs=-1, precision=protocol.precision,
            gradient_clip_val=protocol.max_grad_norm, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
            use_distributed_sampler=False, accelerator="auto", devices=processes.local,
            num_nodes=processes.world // processes.local, strategy="ddp" if processes.world > 1 else "auto",
        )  # fmt: skip
        started = time.perf_counter()
        trainer.fit(module, train_dataloaders=loader)
        seconds = time.perf_counter() - started
    finally:
        lightning_log.setLevel(level)
    seen = examples_seen(total_steps, batches_per_epoch, len(train_rows), protocol.batch_size)
    info = {"train_examples": len(train_rows), "steps": total_steps, "seconds": seconds,
            "examples_per_second": seen / seconds}  # fmt: skip
    return model, tokenizer, info


def score_classifier(model: Any, tokenizer: Any, task: Task, protocol: Protocol) -> tuple[dict, bool]:
    """(dev metrics of each dev split, whether every dev row of every split got one and the same class), dropout
    off."""
    collate, dev, classes = collator_for(tokenizer, protocol), {}, set()
    for name, split in task.dev.items():
        rows = encode_split(split, tokenizer, protocol.max_length)
        predictions = predict(model, rows, collate, protocol.eval_batch_size, task.num_labels == 1)
        dev[name] = split_metrics(task.layout.metrics, predictions, split.labels)
        classes.add(predicted_classes(predictions, regression=task.num_labels == 1))
    return dev, classes == {1}


def finetune_cell(
    model_dir: Path, task: Task, *, lr: float, seed: int, protocol: Protocol, save_to: Path | None = None,
    processes: Processes | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model_dir`` on ``task`` at ``lr`` with ``seed``; returns dev metrics, timing and the settings.
    ``save_to``: also write the fine-tuned model and its tokenizer there (for degen-analyze: geometry after)."""
    model, tokenizer, info = fit_classifier(model_dir, task, lr=lr, seed=seed, protocol=protocol, processes=processes)
    dev, one_class = score_classifier(model, tokenizer, task, protocol)
    if save_to is not None:
        with atomic_directory(save_to, replace=True) as staging:
            model.save_pretrained(str(staging))
            tokenizer.save_pretrained(str(staging))
    return {"task": task.layout.name, "lr": lr, "seed": seed, "dev": dev, "score": task_score(dev), **info,
            "one_class": one_class, "baselines": task_baselines(task), "protocol": asdict(protocol)}  # fmt: skip
