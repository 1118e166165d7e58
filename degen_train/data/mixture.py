"""Weighted mixtures of corpora: ``data.sources=[{path: a.txt, weight: 0.7}, {name: wikitext, weight: 0.3}]``.

Each source is any corpus ``data`` can read (its keys override the data section's for that source); one tokenizer
is trained on the mixture at its weights; each source's examples are built and cached apart. Every global batch
draws its sources from the weights with a generator seeded by (seed, batch), and each source hands out its own
examples in the seeded epoch order of sampling.py, so a batch is a function of (seed, step) alone: a resumed run
and any number of processes see the batches a straight run sees. A source's position at batch b is the count of
its draws before b, recomputed from the seed on resume (one draw per batch: a second per 100k steps here).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from degen_train.core.rng import EPOCH_ORDER_SALT, mix_seed
from degen_train.data.sampling import PositionedExamples, equal_share_end
from degen_train.data.section import DataConfig, data_section

MIXTURE_SALT = 0x6D6978  # "mix": the sources' draws, apart from every other stream of the seed
SOURCE_KEYS = ("source", "path", "validation_path", "name", "config", "split", "validation_split", "revision",
               "text_column", "document_unit", "on_decode_error", "streaming", "validation_fraction")  # fmt: skip


@dataclass(frozen=True)
class MixtureSource:
    label: str
    weight: float
    data: DataConfig  # the data section with this source's keys over it


def mixture_sources(section: DataConfig | DictConfig) -> list[MixtureSource]:
    """data.sources read and checked: known keys, positive finite weights, unique labels."""
    cfg = data_section(section)
    entries = cfg.sources
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"data.sources must be a list of sources, each with a weight; got {entries!r}")
    sources, labels = [], set()
    for number, entry in enumerate(entries):
        where = f"data.sources[{number}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a mapping such as {{path: corpus.txt, weight: 0.5}}; got {entry!r}")
        unknown = sorted(set(entry) - {*SOURCE_KEYS, "weight", "label"})
        if unknown:
            raise ValueError(f"{where}.{unknown[0]} is not a source setting; the settings: weight, label, "
                             f"{', '.join(SOURCE_KEYS)}")  # fmt: skip
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
            raise ValueError(f"{where}.weight must be a number >= 0; got {weight!r}")
        settings = {k: v for k, v in entry.items() if k in SOURCE_KEYS}
        if "source" not in settings:
            settings["source"] = "hub" if "name" in settings else "text" if "path" in settings else "builtin"
        label = str(entry.get("label") or _label_of(settings))
        if label in labels:
            raise ValueError(f"{where}: two sources are labelled {label!r}; give each a distinct label")
        labels.add(label)
        merged = {**cfg.model_dump(), **settings, "sources": None}
        data = data_section(merged, where=where)  # the source's own keys checked as data.KEY's are (data/section.py)
        sources.append(MixtureSource(label, float(weight), data))
    total = sum(s.weight for s in sources)
    if not total > 0:
        raise ValueError(f"data.sources: the weights sum to {total:g}; they must sum to a positive number")
    if not math.isfinite(total) or any(s.weight and s.weight / total < 1e-12 for s in sources):
        weights = ", ".join(f"{s.label}: {s.weight:g}" for s in sources)
        raise ValueError(
            f"data.sources: the weights ({weights}) sum to {total:g}, beyond what their proportions can be computed "
            f"from (a sum that overflows, or a source below 1e-12 of the whole): give them on a common scale, e.g. "
            f"0.7 and 0.3"
        )
    return sources


def _label_of(settings: dict[str, Any]) -> str:
    if settings["source"] == "hub":
        return str(settings.get("name"))
    if settings["source"] == "text":
        return Path(str(settings.get("path"))).stem
    return "builtin"


def normalised(weights: list[float]) -> list[float]:
    total = sum(weights)
    return [w / total for w in weights]


class MixtureBatchSampler:
    """Endless batch sampler over a mixture: micro-batch b holds this rank's share of global batch b, whose slots
    draw their sources from the weights (seed, b) and then the next examples of each source's own endless order.

    Keys are (epoch of the source, index in the concatenated table), as PositionedExamples reads them."""

    def __init__(
        self, sizes: list[int], weights: list[float], *, batch_size: int, seed: int, start: int = 0,
        rank: int = 0, world_size: int = 1,
    ) -> None:  # fmt: skip
        empty = [i for i, (size, weight) in enumerate(zip(sizes, weights, strict=True)) if weight > 0 and not size]
        if empty:
            raise ValueError(f"mixture source {empty[0]} has weight > 0 and no training example")
        self.sizes, self.weights = sizes, torch.tensor(normalised(weights), dtype=torch.float64)
        self.offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        self.batch_size, self.seed, self.start, self.rank, self.world_size = batch_size, seed, start, rank, world_size
        self._orders: dict[tuple[int, int], torch.Tensor] = {}

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def slots(self, position: int) -> torch.Tensor:
        """The source of each slot of global batch ``position``: a function of (seed, position) alone."""
        generator = torch.Generator().manual_seed(mix_seed(self.seed, position, MIXTURE_SALT))
        return torch.multinomial(self.weights, self.global_batch, replacement=True, generator=generator)

    def counts_before(self, position: int) -> list[int]:
        """How many examples each source gave to the global batches before ``position``."""
        counts = torch.zeros(len(self.sizes), dtype=torch.long)
        for earlier in range(position):
            counts += torch.bincount(self.slots(earlier), minlength=len(self.sizes))
        return counts.tolist()

    def _order(self, source: int, epoch: int) -> torch.Tensor:
        key = (source, epoch)
        if key not in self._orders:
            self._orders = {k: v for k, v in self._orders.items() if k[0] != source}  # one epoch kept per source
            generator = torch.Generator().manual_seed(mix_seed(self.seed, source, epoch, EPOCH_ORDER_SALT))
            self._orders[key] = torch.randperm(self.sizes[source], generator=generator)
        return self._orders[key]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        position, cursor = self.start, self.counts_before(self.start)
        while True:
            keys = []
            for source in self.slots(position).tolist():
                epoch, within = divmod(cursor[source], self.sizes[source])
                keys.append((epoch, self.offsets[source] + int(self._order(source, epoch)[within])))
                cursor[source] += 1
            first = self.rank * self.batch_size
            yield keys[first : first + self.batch_size]
            position += 1


def source_of(index: int, starts: list[int]) -> int:
    """The source of row ``index`` of the concatenated table whose sources start at ``starts``."""
    return bisect.bisect_right(starts, index) - 1


class SourcedExamples(PositionedExamples):
    """PositionedExamples whose rows also carry their source's number."""

    def __init__(self, examples: Any, seed: int, starts: list[int]) -> None:
        super().__init__(examples, seed)
        self.starts = starts

    def __getitem__(self, key: tuple[int, int]) -> dict[str, Any]:
        return {**super().__getitem__(key), "source": source_of(key[1], self.starts)}

    def __getitems__(self, keys: list[tuple[int, int]]) -> list[dict[str, Any]]:
        rows = super().__getitems__(keys)
        for row, (_, index) in zip(rows, keys, strict=True):
            row["source"] = source_of(index, self.starts)
        return rows


def with_sources(collate: Any) -> Any:
    """The collator, with the rows' sources as a ``source`` tensor beside the batch."""

    def collate_with_sources(rows: list[dict[str, Any]]) -> dict[str, Any]:
        sources = torch.tensor([row.pop("source") for row in rows])
        return {**collate(rows), "source": sources}

    return collate_with_sources


class SourceBatches:
    """Validation of a mixture: each source's rows in batches of their own, this process's share of each, the
    sources taking turns batch by batch (so trainer.limit_val_batches keeps every source)."""

    def __init__(self, spans: list[tuple[int, int]], *, batch_size: int, rank: int = 0, world_size: int = 1) -> None:
        per_source = []
        for start, size in spans:
            mine = list(range(start + rank, equal_share_end(start, size, world_size), world_size))  # same count each
            per_source.append([[(0, i) for i in mine[s : s + batch_size]] for s in range(0, len(mine), batch_size)])
        turns = max(map(len, per_source), default=0)
        self.batches = [batches[turn] for turn in range(turns) for batches in per_source if turn < len(batches)]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def mixture_seen(tables: Any, global_batch: int, seed: int, batches: int) -> dict[str, dict[str, float]]:
    """Each source's weight (normalised) and its share of the ``batches`` global batches a run drew."""
    weights = normalised([t.weight for t in tables])
    sampler = MixtureBatchSampler([max(1, t.train_size) for t in tables], [t.weight for t in tables],
                                  batch_size=global_batch, seed=seed)  # fmt: skip
    counts = sampler.counts_before(batches)
    total = max(1, sum(counts))
    return {t.label: {"weight": w, "share_seen": c / total} for t, w, c in zip(tables, weights, counts, strict=True)}
