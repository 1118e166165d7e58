"""The fine-tuning protocol, typed once: ``Protocol``, one cell's settings (its rules checked as it is made), and
eval.finetune.*, the section of the same keys as a run gives them (conf/finetune.yaml says each; a key left out is
the file's, merged by finetune/settings.py). Each field is what the run measures, bounded; imports no framework."""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass

from degen_train.core.roles import MEASURES, measures
from degen_train.core.section import Closed, Section, given_only

ProtocolName = Literal["papers", "run_glue"]  # the defaults (papers), or conf/finetune.yaml's run_glue block over them


@dataclass(frozen=True, config=ConfigDict(extra="forbid", allow_inf_nan=False))
class Protocol:
    """One cell's fine-tuning settings (conf/finetune.yaml holds the defaults and their sources)."""

    epochs: Annotated[float, Field(gt=0)] = 3
    batch_size: Annotated[int, Field(gt=0)] = 32
    max_length: Annotated[int, Field(gt=0)] = 128
    warmup_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.06
    weight_decay: float = 0.01
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    precision: str = "32-true"
    fused_adamw: bool = True  # torch's fused AdamW kernel (HF Trainer's default optimizer since torch 2.8)
    eval_batch_size: Annotated[int, Field(gt=0)] = 64
    max_train_examples: int | None = None  # a fixed subset (the first N rows), e.g. of SST-2 on a CPU
    padding: Literal["dynamic", "max_length"] = "dynamic"  # each batch to its longest row; max_length: run_glue's


PROTOCOL_KEYS = tuple(field.name for field in fields(Protocol))


def protocol_problems(given: dict, where: str = "") -> str | None:
    """What ``Protocol`` refuses of the settings ``given`` (None values: not given), said in one line, or None."""
    try:
        Protocol(**{key: value for key, value in given.items() if key in PROTOCOL_KEYS and value is not None})
    except ValidationError as error:
        keys = [".".join([where, *map(str, e["loc"])] if where else map(str, e["loc"])) for e in error.errors()]
        return "; ".join(f"{key}={e['input']!r}: {e['msg']}" for key, e in zip(keys, error.errors(), strict=True))
    return None


class RunGlueProtocolConfig(Section):
    """eval.finetune.run_glue: the run_glue protocol's own values (conf/finetune.yaml)."""

    model_config = Closed
    learning_rates: Annotated[list[float] | None, measures(at_most=64)] = given_only()
    seeds: Annotated[int | list[int] | None, measures(at_most=100)] = given_only()  # a count, or the seeds
    batch_size: Annotated[int | None, measures(at_most=65_536)] = given_only()
    eval_batch_size: Annotated[int | None, measures(at_most=65_536)] = given_only()
    padding: Annotated[str | None, MEASURES] = given_only()
    warmup_ratio: Annotated[float | None, MEASURES] = given_only()
    weight_decay: Annotated[float | None, MEASURES] = given_only()

    @model_validator(mode="after")
    def a_protocol_a_cell_takes(self) -> RunGlueProtocolConfig:
        problems = protocol_problems(self.model_dump())
        if problems:
            raise ValueError(problems)
        return self


class FinetuneConfig(RunGlueProtocolConfig):
    """eval.finetune: the fine-tuning protocol of eval.glue (conf/finetune.yaml says each key), checked by the rules
    of ``Protocol``; finetune/settings.py merges these over the file's defaults."""

    protocol: Annotated[ProtocolName | None, MEASURES] = given_only()
    epochs: Annotated[int | float | None, measures(at_most=100)] = given_only()
    max_length: Annotated[int | None, measures(at_most=8192)] = given_only()
    max_train_examples: Annotated[int | None, measures(at_most=10_000_000)] = given_only()
    adam_eps: Annotated[float | None, MEASURES] = given_only()
    max_grad_norm: Annotated[float | None, MEASURES] = given_only()
    precision: Annotated[str | None, MEASURES] = given_only()
    fused_adamw: Annotated[bool | None, MEASURES] = given_only()
    run_glue: RunGlueProtocolConfig | None = given_only()
