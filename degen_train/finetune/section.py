"""eval.finetune.*: the typed section of the fine-tuning protocol eval.glue runs (conf/finetune.yaml says each key;
finetune/settings.py merges them over the file's defaults). Each field is what the run measures, bounded."""

from __future__ import annotations

from typing import Annotated

from degen_train.core.roles import MEASURES, measures
from degen_train.core.section import Open, Section, given_only


class RunGlueProtocolConfig(Section):
    """eval.finetune.run_glue: the run_glue protocol's own values (conf/finetune.yaml)."""

    model_config = Open
    learning_rates: Annotated[list[float] | None, measures(at_most=64)] = given_only()
    seeds: Annotated[int | list[int] | None, measures(at_most=100)] = given_only()  # a count, or the seeds
    batch_size: Annotated[int | None, measures(at_most=65_536)] = given_only()
    eval_batch_size: Annotated[int | None, measures(at_most=65_536)] = given_only()
    padding: Annotated[str | None, MEASURES] = given_only()
    warmup_ratio: Annotated[float | None, MEASURES] = given_only()
    weight_decay: Annotated[float | None, MEASURES] = given_only()


class FinetuneConfig(RunGlueProtocolConfig):
    """eval.finetune: the fine-tuning protocol of eval.glue (conf/finetune.yaml says each key); unknown keys and
    protocols are refused by finetune/settings.py, which merges these over the file's defaults."""

    protocol: Annotated[str | None, MEASURES] = given_only()
    epochs: Annotated[int | float | None, measures(at_most=100)] = given_only()
    max_length: Annotated[int | None, measures(at_most=8192)] = given_only()
    max_train_examples: Annotated[int | None, measures(at_most=10_000_000)] = given_only()
    adam_eps: Annotated[float | None, MEASURES] = given_only()
    max_grad_norm: Annotated[float | None, MEASURES] = given_only()
    precision: Annotated[str | None, MEASURES] = given_only()
    fused_adamw: Annotated[bool | None, MEASURES] = given_only()
    run_glue: RunGlueProtocolConfig | None = given_only()
