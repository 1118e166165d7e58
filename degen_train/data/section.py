"""The data's typed sections: data.* (where the corpus comes from and how it is cut), data.tokenizer.* and masking.*
(the MLM collator's 80/10/10). Each field says its role where it is declared (core/roles.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import Field, model_validator

from degen_train.core.roles import INPUT, LAUNCH, LAUNCH_ALONE, OUTPUT, PRESENTATION, TRAINS, protection
from degen_train.core.section import Closed, Section, checked_section


class MaskingConfig(Section):
    model_config = Closed  # every key the collator reads (data/datamodule.py): a misspelt one is named
    probability: Annotated[float, TRAINS] = Field(gt=0, le=1)
    mask_fraction: Annotated[float, TRAINS] = Field(ge=0, le=1)
    random_fraction: Annotated[float, TRAINS] = Field(ge=0, le=1)

    @model_validator(mode="after")
    def fractions_fit(self) -> MaskingConfig:
        if self.mask_fraction + self.random_fraction > 1:
            raise ValueError(
                f"mask_fraction + random_fraction = {self.mask_fraction} + {self.random_fraction} > 1: "
                f"the rest of the selected tokens is kept, so the two must add up to at most 1"
            )
        return self


class TokenizerConfig(Section):
    model_config = Closed
    path: Annotated[str | None, INPUT] = None  # a folder or hub name; null: trained on the corpus (cached)
    vocab_size: Annotated[int, TRAINS] = Field(ge=10)
    min_frequency: Annotated[int, TRAINS] = Field(ge=1)
    lowercase: Annotated[bool, TRAINS] = True
    max_documents: Annotated[int | None, TRAINS] = Field(default=None, ge=1)


class DataConfig(Section):
    """data: where the corpus comes from and how it is cut (conf/data/builtin.yaml says each key)."""

    model_config = Closed
    source: Annotated[Literal["builtin", "text", "hub"], TRAINS]
    path: Annotated[str | None, INPUT] = None  # text: a file or folder
    validation_path: Annotated[str | None, INPUT] = None
    text_column: Annotated[str, TRAINS] = "text"
    document_unit: Annotated[Literal["line", "paragraph", "document"], TRAINS] = "paragraph"
    on_decode_error: Annotated[Literal["error", "skip"], TRAINS] = "error"
    streaming: Annotated[bool, TRAINS] = False
    validation_documents: Annotated[int, TRAINS] = Field(default=200, ge=1)  # with streaming: the first N documents
    split_seed: Annotated[int, TRAINS] = Field(default=0, ge=0)
    cache_dir: Annotated[str, OUTPUT]
    name: Annotated[str | None, INPUT] = None  # hub: the data set, its config, splits and revision
    config: Annotated[str | None, INPUT] = None
    split: Annotated[str, TRAINS] = "train"
    validation_split: Annotated[str | None, TRAINS] = None
    revision: Annotated[str | None, INPUT] = None
    missing_hint: Annotated[str | None, PRESENTATION] = None  # said when a file is missing (data=wikitext2)
    block_size: Annotated[int, TRAINS] = Field(ge=8)
    batch_size: Annotated[int, TRAINS] = Field(ge=1)
    num_workers: Annotated[Annotated[int, Field(ge=0)] | Literal["auto"], LAUNCH_ALONE] = "auto"
    num_proc: Annotated[int | None, LAUNCH_ALONE] = Field(default=None, ge=1)
    # training batches made ahead on a background thread when no worker process makes them (data/prefetch.py); auto:
    # by the machine (data/datamodule.prefetch_depth)
    prefetch: Annotated[Annotated[int, Field(ge=0, le=64)] | Literal["auto"], LAUNCH_ALONE] = "auto"
    # a weighted mixture, checked in data/mixture.py (mixture_sources)
    sources: Annotated[list[Any] | None, INPUT] = None
    overfit_batches: Annotated[int, protection("the run's data", keeps=(0,))] = Field(default=0, ge=0)
    validation_fraction: Annotated[float, TRAINS] = Field(gt=0, lt=1)
    examples: Annotated[Literal["packed", "sentences"], TRAINS] = "packed"
    tokenize_parts: Annotated[int, LAUNCH] = Field(default=1, ge=1)
    tokenize_part: Annotated[int | None, LAUNCH] = Field(default=None, ge=0)
    tokenizer: TokenizerConfig

    @model_validator(mode="after")
    def a_source_names_its_corpus(self) -> DataConfig:
        if self.sources:  # a mixture: each of its sources is checked as a section of its own (data/mixture.py)
            return self
        if self.source == "text" and not self.path:
            raise ValueError("source=text reads files: give a file or directory, e.g. data.path=corpus.txt")
        if self.source == "hub" and not self.name:
            raise ValueError("source=hub needs a data set's name, e.g. data.name=wikitext "
                             "data.config=wikitext-2-raw-v1")
        return self

    @model_validator(mode="after")
    def part_within_parts(self) -> DataConfig:
        if self.tokenize_part is not None and self.tokenize_part >= self.tokenize_parts:
            raise ValueError(
                f"data.tokenize_part={self.tokenize_part} must be in 0..{self.tokenize_parts - 1}: this node's "
                f"index among data.tokenize_parts={self.tokenize_parts} nodes"
            )
        return self


def data_section(cfg: DataConfig | DictConfig | Mapping[str, Any], *, where: str = "data") -> DataConfig:
    """The data section typed; a section composed in Python, or a mixture's source (``where``: data.sources[i]),
    is checked here."""
    if isinstance(cfg, DataConfig):
        return cfg
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    return checked_section(DataConfig, raw, "data", where=where)
