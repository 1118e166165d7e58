"""eval: the probes and evaluations a run makes on its export at the end (run/export.py runs them through this
package's instruments: export_probes.py, generation.py, lm_eval_tasks.py; finetune/ the GLUE grid), each field with
its role. Imports no framework: the command line checks it before torch loads."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import ConfigDict, Field

from degen_train.core.roles import CODE, INPUT, MEASURES
from degen_train.core.section import MAX_ITEMS, MAX_PROMPTS, MAX_TOKENS, Section
from degen_train.finetune.section import FinetuneConfig

# What the instruments take, declared once here (metrics/ reads them; a section imports no framework)
Pooling = Literal["mean", "cls"]  # STS sentence vectors: the token mean, or [CLS]
PoolingLayer = Literal["last", "first_last"]  # besides a layer index
Decoding = Literal["greedy", "beam", "top_k", "nucleus", "contrastive"]
# cut: SimCTG's release (no minimum length, cut at the first end-of-text); banned: every continuation full length
EndOfText = Literal["cut", "banned"]


class EvalConfig(Section):
    """eval: the probes and evaluations run on the export at the end of a run (conf/train.yaml says each one)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    sts: Annotated[list[str], INPUT] = Field(default_factory=list)
    wic: Annotated[str | None, INPUT] = None
    wic_fit: Annotated[str | None, INPUT] = None
    # STS files whose pairs the whitening is fitted on (BERT-whitening's release: train + dev + the scored split);
    # []: the scored split itself
    sts_whitening_fit: Annotated[list[str], INPUT] = Field(default_factory=list, max_length=16)
    layer: Annotated[Annotated[int, Field(ge=-1000, le=1000)] | PoolingLayer, MEASURES] = "last"
    pooling: Annotated[Pooling, MEASURES] = "mean"
    # task names, checked with their files by finetune/tasks.py
    glue: Annotated[list[str], MEASURES] = Field(default_factory=list, max_length=16)
    glue_dir: Annotated[str | None, INPUT] = None
    # conf/finetune.yaml's keys, checked by the protocol's rules (finetune/section.py)
    finetune: FinetuneConfig = Field(default_factory=lambda: FinetuneConfig())
    w8a8: Annotated[str | None, INPUT] = None
    # held-out text: degen-eval --generate on a decoder's export (evaluation/generation.py)
    generate: Annotated[str | None, INPUT] = None
    generate_prompts: Annotated[int, MEASURES] = Field(default=200, ge=1, le=MAX_PROMPTS)
    generate_prefix_tokens: Annotated[int, MEASURES] = Field(default=32, ge=1, le=MAX_TOKENS)
    generate_new_tokens: Annotated[int, MEASURES] = Field(default=128, ge=1, le=MAX_TOKENS)
    generate_end_of_text: Annotated[EndOfText, MEASURES] = "cut"
    generate_decodings: Annotated[list[Decoding], MEASURES] = Field(default_factory=lambda: list(get_args(Decoding)),
                                                                  min_length=1)  # fmt: skip
    # the evaluators, each a model folder or hub name (None: the release's where present, else a named stand-in)
    featurizer: Annotated[str | None, INPUT] = None  # MAUVE's (released: gpt2-large)
    coherence_encoder: Annotated[str | None, INPUT] = None  # coherence_simcse's (sup-simcse-bert-base-uncased)
    coherence_model: Annotated[str | None, INPUT] = None  # coherence_opt's (facebook/opt-2.7b)
    # lm-evaluation-harness task names (evaluation/lm_eval_tasks.py)
    lm_eval: Annotated[list[str], MEASURES] = Field(default_factory=list, max_length=256)
    lm_eval_include: Annotated[str | None, CODE] = None
    lm_eval_limit: Annotated[int | None, MEASURES] = Field(default=None, ge=1, le=MAX_ITEMS)
