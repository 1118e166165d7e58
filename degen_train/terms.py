"""The loss-term contract: every objective and regularizer is a ``LossTerm`` in one registry.

A term reads one ``ForwardOutput`` and returns a ``TermOutput``. ``WeightedSum`` adds the terms
with their config weights in one place; weight 0 computes and logs a term without optimising it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from degen_train.types import ForwardOutput, TermOutput

TERM_REGISTRY: dict[str, type[LossTerm]] = {}


def register_term(name: str) -> Callable[[type[LossTerm]], type[LossTerm]]:
    """Class decorator: make a term available in config under ``name``."""

    def add(cls: type[LossTerm]) -> type[LossTerm]:
        if name in TERM_REGISTRY and TERM_REGISTRY[name] is not cls:
            raise ValueError(f"loss term name {name!r} is registered twice")
        cls.name = name
        TERM_REGISTRY[name] = cls
        return cls

    return add


class LossTerm(nn.Module):
    """Base class of objectives and regularizers.

    Class attributes a term may set:
      requires: optional ForwardOutput fields it reads ("pooled", "all_hidden_states", ...).
      family:   "encoder" or "decoder" when the term only fits one model family.
      data_format: the example layout it needs ("mlm", "mlm_nsp", "causal") or None.
    """

    name: ClassVar[str] = "term"
    requires: ClassVar[frozenset[str]] = frozenset()
    family: ClassVar[str | None] = None
    data_format: ClassVar[str | None] = None
    perplexity_metric: ClassVar[str | None] = None  # the metric whose exp() is the run's perplexity
    paper_metrics: ClassVar[tuple[str, ...]] = ()  # the metrics its paper reports, named in summary.json

    def forward(self, output: ForwardOutput) -> TermOutput:  # pragma: no cover - abstract
        raise NotImplementedError

    def setup(self, context: TermContext) -> None:
        """Check the term fits the model and data (raise a clear ValueError if not); build what it needs."""

    def prepare_batch(self, batch: dict[str, Tensor], backbone: nn.Module) -> dict[str, Tensor]:
        """Change the model's input before the forward pass (e.g. corrupt it, add views); default: none."""
        return batch


@dataclass(frozen=True)
class TermContext:
    """What a term may check against, and build from, before training starts."""

    family: str
    hidden_size: int
    vocab_size: int
    batch_size: int
    backbone: Any = None  # degen_train.models.backbone.Backbone
    block_size: int = 0  # data.block_size: the longest sequence a batch can hold


def distributed_mean(total: Tensor, count: Tensor) -> Tensor:
    """total / count over all processes, scaled so that DDP's gradient average gives the global mean.

    Each process returns total_r / count_global · world; DDP averages gradients over the world, so
    the update equals that of one process holding the whole global batch.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        world = torch.distributed.get_world_size()
        count = count.detach().clone()
        torch.distributed.all_reduce(count)
        return total / count.clamp_min(1) * world
    return total / count.clamp_min(1)


class WeightedSum(nn.Module):
    """loss = Σ_k weight_k · term_k; each term's loss and metrics are kept for logging."""

    def __init__(self, terms: Mapping[str, LossTerm], weights: Mapping[str, float]) -> None:
        super().__init__()
        self.terms = nn.ModuleDict(dict(terms))
        self.weights = dict(weights)

    @property
    def requires(self) -> frozenset[str]:
        needed: set[str] = set()
        for term in self.terms.values():
            needed |= term.requires
        return frozenset(needed)

    def prepare_batch(self, batch: dict[str, Tensor], backbone: nn.Module) -> dict[str, Tensor]:
        for term in self.terms.values():
            batch = term.prepare_batch(batch, backbone)
        return batch

    def forward(self, output: ForwardOutput) -> tuple[Tensor, dict[str, Tensor]]:
        total: Tensor | None = None
        logged: dict[str, Tensor] = {}
        for key, term in self.terms.items():
            result = term(output)
            weight = self.weights[key]
            logged[f"{key}/loss"] = result.loss.detach()
            for metric, value in result.metrics.items():
                logged[f"{key}/{metric}"] = value.detach()
            if weight == 0:
                continue
            contribution = weight * result.loss
            total = contribution if total is None else total + contribution
        if total is None:
            raise ValueError("every loss term has weight 0: nothing to optimise")
        logged["loss"] = total.detach()
        return total, logged


def build_terms(sections: Mapping[str, Mapping[str, Any] | None]) -> tuple[dict[str, LossTerm], dict[str, float]]:
    """Build terms from config sections, e.g. {"objective": {"mlm": {"weight": 1}}, "regularizer": {}}.

    A key names a registered term, or any name with ``term: REGISTERED_NAME`` inside (to use one
    term twice with different settings). Every other key is a keyword argument of the term.
    """
    import degen_train.objectives  # noqa: F401  (registers the terms)
    import degen_train.regularizers  # noqa: F401

    terms: dict[str, LossTerm] = {}
    weights: dict[str, float] = {}
    for section, entries in sections.items():
        for key, options in (entries or {}).items():
            options = dict(options or {})
            registered = options.pop("term", key)
            if registered not in TERM_REGISTRY:
                raise ValueError(
                    f"unknown loss term {registered!r} in {section}; registered terms: "
                    f"{', '.join(sorted(TERM_REGISTRY))}"
                )
            weight = float(options.pop("weight", 1.0))
            if weight < 0:
                raise ValueError(f"{section}.{key}.weight must be >= 0, got {weight}")
            if key in terms:
                raise ValueError(f"loss term {key!r} appears in more than one config section")
            try:
                terms[key] = TERM_REGISTRY[registered](**options)
            except TypeError as error:
                raise ValueError(f"bad options for loss term {section}.{key}: {error}") from error
            weights[key] = weight
    if not terms:
        raise ValueError("no loss terms configured: choose an objective, e.g. objective=mlm")
    return terms, weights
