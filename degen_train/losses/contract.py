"""The loss-term contract: every objective and regularizer is a ``LossTerm`` in one registry (catalog.py).

A term reads one ``ForwardOutput`` and returns a ``TermOutput``. ``WeightedSum`` adds the terms
with their config weights in one place; weight 0 computes and logs a term without optimising it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from degen_train.devices.collectives import is_distributed, sum_over_processes, world_size
from degen_train.losses.accumulation import STANDARD_COUNTS, active_window, window_mean
from degen_train.losses.options import checked
from degen_train.models.output import OPTIONAL_FIELDS, ForwardOutput


@dataclass(frozen=True)
class TermOutput:
    """A term's result: an unweighted scalar loss and detached scalars to log."""

    loss: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)


TERM_REGISTRY: dict[str, type[LossTerm]] = {}


def register_term(name: str, *, section: str = "regularizer") -> Callable[[type[LossTerm]], type[LossTerm]]:
    """Class decorator: make a term available in config under ``name``, in the config section it belongs to
    (``objective`` or ``regularizer``: conf/objective/, conf/regularizer/)."""

    def add(cls: type[LossTerm]) -> type[LossTerm]:
        if name in TERM_REGISTRY and TERM_REGISTRY[name] is not cls:
            raise ValueError(f"loss term name {name!r} is registered twice")
        cls.name, cls.section = name, section
        TERM_REGISTRY[name] = cls
        return cls

    return add


class LossTerm(nn.Module):
    """Base class of objectives and regularizers.

    Class attributes a term may set:
      requires: the optional ForwardOutput fields it reads (types.OPTIONAL_FIELDS); only those are computed.
      family:   "encoder" or "decoder" when the term only fits one model family.
      data_format: the example layout it needs ("mlm", "mlm_nsp", "causal") or None.
    """

    name: ClassVar[str] = "term"
    section: ClassVar[str] = "term"  # objective | regularizer: set by register_term
    requires: ClassVar[frozenset[str]] = frozenset()
    family: ClassVar[str | None] = None
    data_format: ClassVar[str | None] = None
    perplexity_metric: ClassVar[str | None] = None  # the metric whose exp() is the run's perplexity
    # What its means divide by (the ``over`` of each distributed_mean call): STANDARD_COUNTS' kinds or its own,
    # counted by ``count`` from each micro-batch of an accumulation window.
    averages_over: ClassVar[tuple[str, ...]] = ()
    # What it takes from the batch's other samples (in-batch negatives, a batch statistic), or None: accumulation
    # cannot give it the other micro-batches' samples, and a run says so at start.
    mixes_samples: str | None = None
    paper_metrics: ClassVar[tuple[str, ...]] = ()  # the metrics its paper reports, named in summary.json

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every term's options are checked against its constructor's annotations first (term_options.py)."""
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = checked(cls.__dict__["__init__"])  # type: ignore[method-assign]

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """The rules a term's given ``options`` obey beyond each one's annotation (between two options), raising a
        ValueError that names the key; it reads no file. The check stage asks it with no module built, before any
        data; the constructor asks it again. Default: none."""

    @classmethod
    def check_inputs(cls, options: dict[str, Any]) -> None:
        """The files the term's input options name (an option annotated ``Annotated[str | None, INPUT]``, a model it
        loads), found or refused with a ValueError that names the key: asked by the read stage (run/inputs.py), after
        the check stage and before any data. Default: none."""

    def forward(self, output: ForwardOutput) -> TermOutput:  # pragma: no cover - abstract
        raise NotImplementedError

    def setup(self, context: TermContext) -> None:
        """Check the term fits the model and data (raise a clear ValueError if not); build what it needs."""

    def head_parameters(self, backbone: nn.Module) -> list[nn.Parameter]:
        """The backbone's parameters that only this term's loss reaches (e.g. the NSP head); default: none."""
        return []

    def frozen_modules(self) -> list[nn.Module]:
        """Frozen models it runs outside the module tree (a teacher) that FSDP2 may shard; default: none."""
        return []

    def auxiliary_models(self) -> list[nn.Module]:
        """The transformer models it runs besides the backbone (a teacher, a generator's encoder), which
        model.compile compiles block by block as it compiles the backbone's; default: none."""
        return []

    def prepare_batch(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Change the model's input before the forward pass (e.g. corrupt it, add views); default: none. A term that
        replaces ``labels`` replaces ``labelled_index`` with it (else it is dropped and found again, with a wait)."""
        return batch

    def states_wanted(self, step: int, steps_per_epoch: int) -> int:
        """How many token states to sample, in eval mode without gradient, from the upcoming training batches
        before update ``step`` (I-STAR's refreshed C0); 0, the default: none."""
        return 0

    def refresh(self, outputs: Iterator[ForwardOutput], wanted: int) -> None:
        """Take the sample asked for by states_wanted: ``outputs`` runs one forward pass per next()."""

    def count(self, over: str, batch: dict[str, Tensor]) -> Tensor:
        """How many of ``over`` a collated micro-batch holds, as its forward will count them (accumulation)."""
        return STANDARD_COUNTS[over](batch)


@dataclass(frozen=True)
class TermContext:
    """What a term may check against, and build from, before training starts."""

    hidden_size: int
    vocab_size: int
    batch_size: int
    backbone: Any = None  # degen_train.models.backbone.Backbone
    block_size: int = 0  # data.block_size: the longest sequence a batch can hold


def distributed_mean(total: Tensor, count: Tensor, *, over: str | None = None) -> Tensor:
    """total / count over all processes, scaled so that DDP's gradient average gives the global mean.

    Each process returns total_r / count_global · world; DDP averages gradients over the world, so
    the update equals that of one process holding the whole global batch. Within an accumulation window
    (accumulation.py) the count is the whole window's count of ``over`` and the scale world · k.
    """
    window = active_window()
    if window is not None:
        return window_mean(window, total, count, over)
    if is_distributed():
        count = sum_over_processes(count.detach().clone())
        return total / count.clamp_min(1) * world_size()
    return total / count.clamp_min(1)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """mean(values[mask]) as Σ(values·mask) / Σmask, on the device: a boolean-mask selection would make the host wait
    to learn how many entries it keeps. 0 for an empty mask."""
    weights = mask.to(torch.float32)
    return (values.float() * weights).sum() / weights.sum().clamp_min(1)


def perplexity_source(terms: Mapping[str, LossTerm]) -> str | None:
    """``TERM/METRIC``: the first term's metric whose exp() is the run's perplexity (summary.val_perplexity_of),
    or None where no term has one."""
    return next((f"{k}/{t.perplexity_metric}" for k, t in terms.items() if t.perplexity_metric), None)


class WeightedSum(nn.Module):
    """loss = Σ_k weight_k · term_k; each term's loss and metrics are kept for logging."""

    def __init__(self, terms: Mapping[str, LossTerm], weights: Mapping[str, float]) -> None:
        super().__init__()
        for key, term in terms.items():
            unknown = term.requires - OPTIONAL_FIELDS
            if unknown:
                raise ValueError(
                    f"loss term {key!r} requires {sorted(unknown)}, which ForwardOutput does not offer; "
                    f"optional fields: {', '.join(sorted(OPTIONAL_FIELDS))}"
                )
        self.terms = nn.ModuleDict(dict(terms))
        self.weights = dict(weights)

    @property
    def perplexity_source(self) -> str | None:
        """The metric whose exp() is the run's perplexity (``perplexity_source``)."""
        return perplexity_source(self.terms)

    @property
    def requires(self) -> frozenset[str]:
        needed: set[str] = set()
        for term in self.terms.values():
            needed |= term.requires
        return frozenset(needed)

    def freeze_unweighted(self, backbone: nn.Module) -> list[str]:
        """Freeze what only weight-0 terms use: their own heads and the backbone heads no weighted term reads.

        Such parameters would get no gradient: DDP (find_unused_parameters=false) would fail on them and
        AdamW's weight decay would still move them. Frozen, they stay as built and leave the optimizer.
        Returns the names of the frozen parameters.
        """
        in_backbone = {id(p) for p in backbone.parameters()}
        weighted_heads = {id(p) for k, t in self.terms.items() if self.weights[k] for p in t.head_parameters(backbone)}
        names = {id(p): n for n, p in [*self.named_parameters(), *backbone.named_parameters()]}
        frozen: list[str] = []
        for key, term in self.terms.items():
            if self.weights[key]:
                continue
            own = [p for p in term.parameters() if id(p) not in in_backbone]
            heads = [p for p in term.head_parameters(backbone) if id(p) not in weighted_heads]
            for param in [*own, *heads]:
                if param.requires_grad:
                    param.requires_grad_(False)
                    frozen.append(names.get(id(param), key))
        return frozen

    def prepare_batch(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        for term in self.terms.values():
            prepared = term.prepare_batch(batch)
            stale = prepared.get("labels") is not batch.get("labels") and (
                prepared.get("labelled_index") is batch.get("labelled_index")
            )
            batch = {k: v for k, v in prepared.items() if k != "labelled_index"} if stale else prepared
        return batch

    def window_counts(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Every count the terms' means divide by, in one collated micro-batch (AccumulationWindows' counter)."""
        counts: dict[str, Tensor] = {}
        for term in self.terms.values():
            for over in term.averages_over:
                if over not in counts:
                    counts[over] = term.count(over, batch)
        return counts

    def forward(self, output: ForwardOutput) -> tuple[Tensor, dict[str, Tensor]]:
        total: Tensor | None = None
        logged: dict[str, Tensor] = {}
        window = active_window()
        for key, term in self.terms.items():
            if window is not None:
                window.term = key  # named in accumulation errors
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
