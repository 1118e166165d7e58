"""Prepare examples once (cached), then serve position-addressed batches to Lightning."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader
from transformers import AutoTokenizer

from degen_train.accumulation import AccumulationWindows
from degen_train.data.collate import CausalLMCollator, MaskedLMCollator
from degen_train.data.corpus import load_corpus, too_few_documents
from degen_train.data.examples import build_examples
from degen_train.data.sampling import PositionedExamples, ShardedBatches, StepBatchSampler
from degen_train.data.tokenizer import get_tokenizer, tokenizer_identity
from degen_train.io import cache_key
from degen_train.rng import VALIDATION_SEED_OFFSET

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedData:
    train: datasets.Dataset
    validation: datasets.Dataset
    tokenizer: Any
    corpus: dict[str, Any]  # where the documents came from (Corpus.provenance)


def prepare_data(
    cfg: Any, *, family: str, data_format: str, seed: int, run_tokenizer: Path | None = None
) -> PreparedData:
    """Corpus -> tokenizer -> train/validation documents -> examples, each step cached on disk.

    ``run_tokenizer``: a resumed run's own tokenizer folder (RUN/tokenizer), used as it is instead of the cache's
    or a newly trained one, so a fresh machine or cache resumes with the tokenizer the run was trained with."""
    cache_dir = Path(str(cfg.cache_dir)).expanduser()
    corpus = load_corpus(cfg)
    if corpus.validation is None and not cfg.streaming and len(corpus.train) < 2:  # before a tokenizer is trained
        raise ValueError(too_few_documents(corpus, cfg))
    if run_tokenizer is not None:
        tokenizer = AutoTokenizer.from_pretrained(str(run_tokenizer))
        log.info("tokenizer: the run's own, %s", run_tokenizer)
    else:
        tokenizer = get_tokenizer(
            cfg.tokenizer, family=family, corpus=corpus.train, corpus_identity=corpus.identity, cache_dir=cache_dir
        )
    if corpus.validation is not None:
        train_docs, validation_docs = corpus.train, corpus.validation
    elif cfg.streaming:  # a stream has no random split: its first documents are the validation set
        count = int(cfg.validation_documents)
        train_docs, validation_docs = corpus.train.skip(count), corpus.train.take(count)
    else:
        fraction = float(cfg.validation_fraction)
        if not 0 < fraction < 1:
            raise ValueError(f"data.validation_fraction must be in (0, 1), got {fraction}")
        split = corpus.train.train_test_split(test_size=fraction, seed=int(cfg.split_seed))
        train_docs, validation_docs = split["train"], split["test"]
    identity = cache_key(
        corpus.identity,
        tokenizer_identity(tokenizer),
        cfg.validation_fraction,
        cfg.split_seed,
        cfg.streaming,
        cfg.validation_documents,
    )
    common = {
        "tokenizer": tokenizer,
        "data_format": data_format,
        "block_size": int(cfg.block_size),
        "seed": seed,
        "layout": str(cfg.get("examples", "packed")),
    }
    train = build_examples(train_docs, cache_root=cache_dir, identity=identity + ":train", **common)
    validation = build_examples(validation_docs, cache_root=cache_dir, identity=identity + ":validation", **common)
    log.info(
        "examples: %d train, %d validation (%s, block %d)", len(train), len(validation), data_format, cfg.block_size
    )
    return PreparedData(train, validation, tokenizer, corpus.provenance)


def make_collator(tokenizer: Any, *, data_format: str, masking: Any, vocab_size: int) -> Any:
    if data_format == "causal":
        return CausalLMCollator(pad_id=tokenizer.pad_token_id)
    return MaskedLMCollator(
        pad_id=tokenizer.pad_token_id,
        mask_id=tokenizer.mask_token_id,
        special_ids=list(tokenizer.all_special_ids),
        vocab_size=vocab_size,
        probability=float(masking.probability),
        mask_fraction=float(masking.mask_fraction),
        random_fraction=float(masking.random_fraction),
    )


def check_same_data(per_rank: list[tuple[str, int, int]]) -> None:
    """Raise naming every process whose (tokenizer hash, train examples, validation examples) differs from rank 0's."""
    differing = [f"rank {r}: {values}" for r, values in enumerate(per_rank) if values != per_rank[0]]
    if differing:
        raise RuntimeError(
            f"the processes prepared different data (tokenizer hash, train and validation examples): rank 0: "
            f"{per_rank[0]}; {'; '.join(differing)}. Give every node the same data.cache_dir (or a prepared "
            f"tokenizer with data.tokenizer.path) so they train on one tokenization"
        )


class PretrainDataModule(pl.LightningDataModule):
    """Train batches start at the restored global step, so resuming replays nothing."""

    def __init__(
        self,
        data: PreparedData,
        collator: Any,
        *,
        batch_size: int,
        num_workers: int,
        seed: int,
        overfit_batches: int = 0,
        window_counter: Callable[[dict], dict[str, torch.Tensor]] | None = None,
    ) -> None:
        """``window_counter``: what the loss terms' means divide by in a micro-batch (WeightedSum.window_counts);
        with trainer.accumulate_grad_batches > 1 the train loader reads each window first and counts it."""
        super().__init__()
        self.data, self.collator = data, collator
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.overfit_batches = overfit_batches
        self.window_counter = window_counter

    def setup(self, stage: str) -> None:
        """Every process must train on the same tokenization and examples (node-local caches could differ)."""
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return
        mine = (tokenizer_identity(self.data.tokenizer), len(self.data.train), len(self.data.validation))
        everyone: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(everyone, mine)
        check_same_data(everyone)

    def _loader(self, dataset: PositionedExamples, batch_sampler: Any) -> DataLoader:
        return DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=self.collator,
            num_workers=self.num_workers,
            # Its own generator: creating an iterator must not draw from the global RNG.
            generator=torch.Generator(),
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader | AccumulationWindows:
        loader = self.upcoming_batches()
        accumulate = self.trainer.accumulate_grad_batches if self.trainer is not None else 1
        if accumulate > 1 and self.window_counter is not None:  # a resume starts at a window's first micro-batch
            return AccumulationWindows(loader, size=accumulate, counter=self.window_counter)
        return loader

    def updates_per_epoch(self) -> int:
        """Optimizer steps per pass over the training examples."""
        trainer = self.trainer
        world, accumulate = (trainer.world_size, trainer.accumulate_grad_batches) if trainer is not None else (1, 1)
        return len(self.data.train) // (self.batch_size * world) // accumulate

    def upcoming_batches(self) -> DataLoader:
        """This process's training micro-batches from the restored (or current) update on, as training sees them."""
        trainer = self.trainer
        accumulate = trainer.accumulate_grad_batches if trainer is not None else 1
        start = trainer.global_step * accumulate if trainer is not None else 0
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        sampler = StepBatchSampler(
            len(self.data.train),
            batch_size=self.batch_size,
            seed=self.seed,
            start=start,
            rank=rank,
            world_size=world,
            overfit_batches=self.overfit_batches,
        )
        return self._loader(PositionedExamples(self.data.train, self.seed), sampler)

    def val_dataloader(self) -> DataLoader:
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        batches = ShardedBatches(len(self.data.validation), batch_size=self.batch_size, rank=rank, world_size=world)
        return self._loader(PositionedExamples(self.data.validation, self.seed + VALIDATION_SEED_OFFSET), batches)
