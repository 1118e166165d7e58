"""Prepare examples once (cached), then serve position-addressed batches to Lightning."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import lightning.pytorch as pl
import pyarrow.compute
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from degen_train.core.io import cache_key
from degen_train.core.rng import VALIDATION_SEED_OFFSET
from degen_train.data.collate import CausalLMCollator, MaskedLMCollator
from degen_train.data.corpus import held_out, load_corpus, too_few_documents
from degen_train.data.examples import build_examples
from degen_train.data.mixture import (
    MixtureBatchSampler,
    SourceBatches,
    SourcedExamples,
    mixture_sources,
    normalised,
    with_sources,
)
from degen_train.data.node_parts import missing_parts, parts_folder, tokenize_part
from degen_train.data.prefetch import Prefetched
from degen_train.data.sampling import PositionedExamples, ShardedBatches, StepBatchSampler
from degen_train.data.section import DataConfig, data_section
from degen_train.data.tokenizer import get_tokenizer, load_tokenizer, tokenizer_identity, vocabulary_too_large
from degen_train.data.validation_items import BATCH_ID_KEY, batch_text_hash
from degen_train.data.windows import AccumulationWindows
from degen_train.devices.collectives import is_distributed
from degen_train.devices.threads import usable_cpus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceTables:
    """One source of a mixture: its rows [start, start + size) of the concatenated train and validation tables."""

    label: str
    weight: float
    train_start: int
    train_size: int
    validation_start: int
    validation_size: int


@dataclass(frozen=True)
class PreparedData:
    train: datasets.Dataset
    validation: datasets.Dataset
    tokenizer: Any
    corpus: dict[str, Any]  # where the documents came from (Corpus.provenance)
    sources: tuple[SourceTables, ...] = ()  # a mixture's sources (data.sources); empty for one corpus


def prepare_data(
    section: DataConfig | DictConfig, *, family: str, data_format: str, seed: int, run_tokenizer: Path | None = None
) -> PreparedData:
    """Corpus -> tokenizer -> train/validation documents -> examples, each step cached on disk.

    ``run_tokenizer``: a resumed run's own tokenizer folder (RUN/tokenizer), used as it is instead of the cache's
    or a newly trained one, so a fresh machine or cache resumes with the tokenizer the run was trained with."""
    cfg = data_section(section)
    if cfg.sources:
        return prepare_mixture(cfg, family=family, data_format=data_format, seed=seed, run_tokenizer=run_tokenizer)
    corpus = load_corpus(cfg)
    if corpus.validation is None and not cfg.streaming and len(corpus.train) < 2:  # before a tokenizer is trained
        raise ValueError(too_few_documents(corpus, cfg))
    tokenizer = _tokenizer(cfg, family, corpus.train, corpus.identity, run_tokenizer)
    train, validation = _examples(cfg, corpus, tokenizer, data_format=data_format, seed=seed)
    log.info(
        "examples: %d train, %d validation (%s, block %d)", len(train), len(validation), data_format, cfg.block_size
    )
    if not cfg.tokenizer.path and run_tokenizer is None:  # trained here on the corpus: is it the corpus's size?
        too_large = vocabulary_too_large(train, tokenizer, asked=cfg.tokenizer.vocab_size)
        if too_large:
            log.warning(too_large)
    return PreparedData(train, validation, tokenizer, corpus.provenance)


def prepare_mixture(
    cfg: Any, *, family: str, data_format: str, seed: int, run_tokenizer: Path | None = None
) -> PreparedData:
    """data.sources: each source's corpus and examples as prepare_data makes them, one tokenizer trained on the
    documents of the sources interleaved at their weights (seeded by data.split_seed), the tables concatenated."""
    sources = mixture_sources(cfg)
    corpora = [load_corpus(source.data) for source in sources]
    for source, corpus in zip(sources, corpora, strict=True):
        if corpus.validation is None and not source.data.streaming and len(corpus.train) < 2:
            raise ValueError(f"mixture source {source.label!r}: {too_few_documents(corpus, source.data)}")
    used = [(s, c) for s, c in zip(sources, corpora, strict=True) if s.weight > 0]
    weights = normalised([s.weight for s, _ in used])
    # Until the first source runs out: the sample holds the sources at their weights and is never larger than the
    # data (all_exhausted would repeat a small source with a large weight a millionfold before a large one ends).
    documents = datasets.interleave_datasets(
        [c.train for _, c in used], probabilities=weights, seed=int(cfg.split_seed), stopping_strategy="first_exhausted"
    )
    identity = cache_key("mixture", *[(s.label, s.weight, c.identity) for s, c in zip(sources, corpora, strict=True)])
    tokenizer = _tokenizer(cfg, family, documents, identity, run_tokenizer)
    tables, train, validation = [], [], []
    for source, corpus in zip(sources, corpora, strict=True):
        try:
            source_train, source_validation = _examples(
                source.data, corpus, tokenizer, data_format=data_format, seed=seed
            )
        except ValueError as error:
            raise ValueError(f"mixture source {source.label!r}: {error}") from error
        tables.append(SourceTables(source.label, source.weight, sum(map(len, train)), len(source_train),
                                   sum(map(len, validation)), len(source_validation)))  # fmt: skip
        train.append(source_train)
        validation.append(source_validation)
        log.info("source %s (weight %g): %d train, %d validation examples", source.label, source.weight,
                 len(source_train), len(source_validation))  # fmt: skip
    record = {"source": "mixture", "sources": [{"label": s.label, "weight": s.weight, **c.provenance}
                                                for s, c in zip(sources, corpora, strict=True)]}  # fmt: skip
    joined = (datasets.concatenate_datasets(train), datasets.concatenate_datasets(validation))
    return PreparedData(*joined, tokenizer, record, tuple(tables))


def _tokenizer(cfg: Any, family: str, documents: Any, identity: str, run_tokenizer: Path | None) -> Any:
    if run_tokenizer is not None:
        log.info("tokenizer: the run's own, %s", run_tokenizer)
        return with_words(load_tokenizer(run_tokenizer), str(run_tokenizer))
    cache_dir = Path(str(cfg.cache_dir)).expanduser()
    tokenizer = get_tokenizer(cfg.tokenizer, family=family, corpus=documents, corpus_identity=identity,
                              cache_dir=cache_dir)  # fmt: skip
    return with_words(tokenizer, str(cfg.tokenizer.path or "the tokenizer trained on the corpus"))


def with_words(tokenizer: Any, source: str) -> Any:
    """``tokenizer``, refused when it holds no token besides its special ones (a tokenizer file without its
    vocabulary): every text would be [UNK], and MLM's random replacements would have nothing to draw from."""
    words = len(tokenizer) - len(set(tokenizer.all_special_ids))
    if words < 1:
        raise ValueError(
            f"data.tokenizer.path={source}: the tokenizer has {len(tokenizer)} tokens, all of them special "
            f"({', '.join(tokenizer.all_special_tokens[:6])}): no vocabulary. Point it at a complete tokenizer folder "
            f"(tokenizer.json with its vocabulary, or vocab.txt), or leave it unset to train one on the corpus"
        )
    return tokenizer


def _examples(cfg: Any, corpus: Any, tokenizer: Any, *, data_format: str, seed: int) -> tuple[Any, Any]:
    """The corpus's train/validation documents, then each one's examples (cached)."""
    splits = _split_documents(cfg, corpus, tokenizer)
    common = {
        "num_proc": preparation_threads(cfg.num_proc),
        "tokenizer": tokenizer,
        "data_format": data_format,
        "block_size": int(cfg.block_size),
        "seed": seed,
        "layout": cfg.examples,
    }
    cache_root = Path(str(cfg.cache_dir)).expanduser()
    train, validation = (build_examples(documents, cache_root=cache_root, identity=identity, **common)
                         for documents, identity in splits)  # fmt: skip
    return train, validation


def _split_documents(cfg: Any, corpus: Any, tokenizer: Any) -> tuple[tuple[Any, str], tuple[Any, str]]:
    """(documents, cache identity) of the train and the validation split, as every run and node splits them."""
    if corpus.validation is not None:
        train_docs, validation_docs = corpus.train, corpus.validation
    elif cfg.streaming:  # a stream has no random split: its first documents are the validation set
        count = int(cfg.validation_documents)
        train_docs, validation_docs = corpus.train.skip(count), corpus.train.take(count)
    else:
        train_docs, validation_docs = held_out(corpus.train, cfg.validation_fraction, seed=int(cfg.split_seed))
    identity = cache_key(
        corpus.identity,
        tokenizer_identity(tokenizer),
        cfg.validation_fraction,
        cfg.split_seed,
        cfg.streaming,
        cfg.validation_documents,
        "held out by text share",  # the split of held_out (before: by document count)
    )
    return (train_docs, identity + ":train"), (validation_docs, identity + ":validation")


def tokenize_node_part(section: DataConfig | DictConfig, *, family: str, data_format: str) -> dict[str, Any]:
    """``prepare_only=true data.tokenize_part=K data.tokenize_parts=N``: the tokenizer (trained once, under its
    build lock, by whichever node comes first), then node K's share of each split tokenized into the cache.
    A run finds all N parts of a split there and packs its examples from them (node_parts.py)."""
    cfg = data_section(section)
    part, parts = cfg.tokenize_part, cfg.tokenize_parts
    if cfg.sources:
        raise ValueError("data.tokenize_part splits one corpus over nodes: not with data.sources (prepare a mixture "
                         "on one node)")  # fmt: skip
    corpus = load_corpus(cfg)
    if corpus.validation is None and not cfg.streaming and len(corpus.train) < 2:
        raise ValueError(too_few_documents(corpus, cfg))
    tokenizer = _tokenizer(cfg, family, corpus.train, corpus.identity, None)
    segmented = data_format == "mlm_nsp" or cfg.examples == "sentences"
    cache_root = Path(str(cfg.cache_dir)).expanduser()
    splits = {}
    for name, (documents, identity) in zip(("train", "validation"), _split_documents(cfg, corpus, tokenizer),
                                           strict=True):  # fmt: skip
        folder = parts_folder(cache_root, identity, segmented=segmented)
        path, count = tokenize_part(documents, tokenizer, folder, part=part, parts=parts, segmented=segmented,
                                    threads=preparation_threads(cfg.num_proc),
                                    tokenizer_hash=tokenizer_identity(tokenizer))  # fmt: skip
        splits[name] = {"part": str(path), "documents": count, "missing_parts": missing_parts(folder, parts)}
    return {"tokenizer": tokenizer_identity(tokenizer), "part": part, "parts": parts, **splits}


def loader_workers(setting: int | str, *, on_gpu: bool, local_processes: int = 1) -> int:
    """data.num_workers: a count as given; ``auto``: on a GPU, up to 4 worker processes from the CPUs this process
    may use, one left for training (a GPU step waits for its next batch otherwise: 33 ms of a 110 ms BERT-base
    step was collation on an H100); on a CPU, 0 (the workers would take the training threads' cores)."""
    if setting != "auto":
        return int(setting)
    if not on_gpu:
        return 0
    return max(0, min(4, usable_cpus().count // max(local_processes, 1) - 1))


AHEAD = 2  # batches made ahead when the collating thread pays (a GPU, or a CPU core the training threads leave free)


def prefetch_depth(setting: int | str, *, on_gpu: bool, training_threads: int, local_processes: int = 1) -> int:
    """data.prefetch: a count as given; ``auto``: 2 batches ahead on a GPU (the host collates while the device
    computes); on a CPU, 2 only when this node's usable CPUs exceed the training threads of its processes, else 0:
    on a CPU whose every core runs torch's intra-op threads the collating thread takes one of them, and the step did
    not get shorter (issue 73.2: +2% fp32 and +11% bf16-mixed tokens/s with prefetch 0 on 2 cores). The batches are
    the same either way."""
    if setting != "auto":
        return int(setting)
    if on_gpu:
        return AHEAD
    return AHEAD if usable_cpus().count > training_threads * max(local_processes, 1) else 0


def preparation_threads(setting: int | None) -> int:
    """data.num_proc: the threads that tokenize; null: the CPUs this process may use (affinity, cgroup quota)."""
    return int(setting) if setting else usable_cpus().count


def describe_prepared(data: PreparedData) -> dict[str, Any]:
    """Where the prepared data lies and how big it is: what ``prepare_only=true`` prints for a job's later runs."""
    tables = {}
    for split, table in (("train", data.train), ("validation", data.validation)):
        files = [Path(entry["filename"]) for entry in table.cache_files]
        lengths = pyarrow.compute.list_value_length(table.data.column("input_ids"))
        tables[split] = {
            "examples": len(table),
            "tokens": int(pyarrow.compute.sum(lengths).as_py() or 0),
            "folder": ", ".join(dict.fromkeys(str(f.parent) for f in files)) or None,  # a mixture's: one per source
            "bytes": sum(f.stat().st_size for f in files),
        }
    return {"tokenizer": str(data.tokenizer.name_or_path), **tables}


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
        raise ValueError(  # bad input, said in one line by the command (not a crash's traceback)
            f"the processes prepared different data (tokenizer hash, train and validation examples): rank 0: "
            f"{per_rank[0]}; {'; '.join(differing)}. Give every node the same data.cache_dir (or a prepared "
            f"tokenizer with data.tokenizer.path) so they train on one tokenization"
        )


def with_host_counts(batch: Any) -> Any:
    """``batch`` with its (tokens, predicted tokens) counted on the host, once."""
    if isinstance(batch, dict) and "attention_mask" in batch and "labels" in batch and "host_counts" not in batch:
        index = batch.get("labelled_index")
        predicted = index.numel() if index is not None else int((batch["labels"] != -100).sum())
        batch["host_counts"] = (int(batch["attention_mask"].sum()), predicted)
    return batch


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
        pin_memory: bool = False,
        overfit_batches: int = 0,
        window_counter: Callable[[dict], dict[str, torch.Tensor]] | None = None,
        prefetch: int = 0,
    ) -> None:
        """``window_counter``: what the loss terms' means divide by in a micro-batch (WeightedSum.window_counts);
        with trainer.accumulate_grad_batches > 1 the train loader reads each window first and counts it.
        ``prefetch``: training batches made ahead on a background thread when no worker process makes them
        (data/prefetch.py); 0: on the training thread."""
        super().__init__()
        self.data, self.collator = data, collator
        self.prefetch = prefetch
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.pin_memory = pin_memory  # on a GPU: page-locked batches, so their copy to the device runs asynchronously
        self.overfit_batches = overfit_batches
        self.window_counter = window_counter

    def setup(self, stage: str) -> None:
        """Every process must train on the same tokenization and examples (node-local caches could differ)."""
        if not is_distributed():
            return
        mine = (tokenizer_identity(self.data.tokenizer), len(self.data.train), len(self.data.validation))
        everyone: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(everyone, mine)
        check_same_data(everyone)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Count the batch's tokens and predicted tokens while it is on the host (the throughput's counts): read
        from the device after the step, they would make the host wait for it (a prefetched batch was counted on
        its thread). The datamodule's hook, not the LightningModule's: Lightning warns when a module overrides it
        beside a datamodule. A validation batch also carries its text's hash, the id of val_perplexity's per-batch
        record (data/validation_items.py), hashed here on the host for the same reason."""
        trainer = self.trainer
        if trainer is not None and (trainer.validating or trainer.sanity_checking) and isinstance(batch, dict):
            batch[BATCH_ID_KEY] = batch_text_hash(batch)
        return with_host_counts(batch)

    def _loader(self, dataset: PositionedExamples, batch_sampler: Any, starts: list[int] | None = None) -> DataLoader:
        """``starts``: a mixture's first row of each source in ``dataset``; each row's source then travels with the
        batch (the shares logged in training, the per-source validation)."""
        collate = self.collator
        if starts is not None:
            dataset, collate = SourcedExamples(dataset.examples, dataset.seed, starts), with_sources(self.collator)
        return DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=collate,
            num_workers=self.num_workers,
            # Its own generator: creating an iterator must not draw from the global RNG.
            generator=torch.Generator(),
            persistent_workers=self.num_workers > 0,
            pin_memory=self.pin_memory,
        )

    def train_dataloader(self) -> DataLoader | AccumulationWindows | Prefetched:
        loader: Any = self.upcoming_batches()
        if self.prefetch and self.num_workers == 0:  # workers make them ahead already, in processes of their own
            loader = Prefetched(loader, self.prefetch, prepare=with_host_counts)
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
        if self.data.sources:
            sizes, weights = [t.train_size for t in self.data.sources], [t.weight for t in self.data.sources]
            sampler: Any = MixtureBatchSampler(sizes, weights, batch_size=self.batch_size, seed=self.seed, start=start,
                                               rank=rank, world_size=world)  # fmt: skip
        else:
            sampler = StepBatchSampler(
                len(self.data.train),
                batch_size=self.batch_size,
                seed=self.seed,
                start=start,
                rank=rank,
                world_size=world,
                overfit_batches=self.overfit_batches,
            )
        starts = [t.train_start for t in self.data.sources] if self.data.sources else None
        return self._loader(PositionedExamples(self.data.train, self.seed), sampler, starts)

    def val_dataloader(self) -> DataLoader:
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        if self.data.sources:  # each source's batches apart: its validation loss is logged on its own
            spans = [(t.validation_start, t.validation_size) for t in self.data.sources]
            batches: Any = SourceBatches(spans, batch_size=self.batch_size, rank=rank, world_size=world)
        else:
            batches = ShardedBatches(len(self.data.validation), batch_size=self.batch_size, rank=rank, world_size=world)
        starts = [t.validation_start for t in self.data.sources] if self.data.sources else None
        examples = PositionedExamples(self.data.validation, self.seed + VALIDATION_SEED_OFFSET)
        return self._loader(examples, batches, starts)
