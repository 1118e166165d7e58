"""The typed schema of a training config, checked once before any data, model or file is touched.

Every section allows keys the schema does not list (any ``lightning.pytorch.Trainer`` argument, a
term's own options): those are checked where they are used. What is listed here is checked for type,
range and the constraints between sections, and every problem is reported at once, each naming the
key, the value and what is allowed.

This file is the one place a listed key's type, range and default are said. ``validate_config``'s
``TrainConfig`` is the config that runs: the layers below the CLI receive its typed sections (run/checks.py's
``RunPlan``), read each listed key as an attribute, and never check or default it again; ``checked_config`` is the
same as a DictConfig, for a config composed in Python (tests, notebooks, tools).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from degen_train.config.callback_sections import CallbacksConfig
from degen_train.config.roles import (
    CODE,
    INPUT,
    LAUNCH,
    MEASURES,
    OUTPUT,
    PRESENTATION,
    TRAINS,
    VALIDATION,
    Declared,
    group,
    measures,
    protection,
)
from degen_train.config.section import MAX_ITEMS, MAX_PROMPTS, MAX_TOKENS, Closed, Instantiated, Open, given_only
from degen_train.config.trainer_section import TrainerConfig

Section = TypeVar("Section", bound=BaseModel)


class MaskingConfig(BaseModel):
    model_config = Open
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


class TokenizerConfig(BaseModel):
    model_config = Closed
    path: Annotated[str | None, INPUT] = None  # a folder or hub name; null: trained on the corpus (cached)
    vocab_size: Annotated[int, TRAINS] = Field(ge=10)
    min_frequency: Annotated[int, TRAINS] = Field(ge=1)
    lowercase: Annotated[bool, TRAINS] = True
    max_documents: Annotated[int | None, TRAINS] = Field(default=None, ge=1)


class DataConfig(BaseModel):
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
    num_workers: Annotated[Annotated[int, Field(ge=0)] | Literal["auto"], LAUNCH] = "auto"
    num_proc: Annotated[int | None, LAUNCH] = Field(default=None, ge=1)
    # training batches made ahead on a background thread when no worker process makes them (data/prefetch.py); auto:
    # by the machine (data/datamodule.prefetch_depth)
    prefetch: Annotated[Annotated[int, Field(ge=0, le=64)] | Literal["auto"], LAUNCH] = "auto"
    # a weighted mixture, checked in data/mixture.py (mixture_sources)
    sources: Annotated[list[Any] | None, INPUT] = None
    overfit_batches: Annotated[int, protection("the run's data", keeps=(0,))] = Field(default=0, ge=0)
    validation_fraction: Annotated[float, TRAINS] = Field(gt=0, lt=1)
    examples: Annotated[Literal["packed", "sentences"], TRAINS] = "packed"
    tokenize_parts: Annotated[int, LAUNCH] = Field(default=1, ge=1)
    tokenize_part: Annotated[int | None, LAUNCH] = Field(default=None, ge=0)
    tokenizer: TokenizerConfig

    @model_validator(mode="after")
    def part_within_parts(self) -> DataConfig:
        if self.tokenize_part is not None and self.tokenize_part >= self.tokenize_parts:
            raise ValueError(
                f"data.tokenize_part={self.tokenize_part} must be in 0..{self.tokenize_parts - 1}: this node's "
                f"index among data.tokenize_parts={self.tokenize_parts} nodes"
            )
        return self


class AttentionVariantConfig(BaseModel):
    """model.attention_variant: how heads may do nothing (degen_train/models/attention_variants.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Annotated[Literal["softmax", "clipped_softmax", "gated", "output_gate", "kv_bias"], TRAINS] = "softmax"
    # clipped softmax: γ = −α/T; null = the family's released α
    alpha: Annotated[float | None, TRAINS] = Field(default=None, ge=0)
    eta: Annotated[float, TRAINS] = Field(default=1.0, ge=1)  # clipped softmax: ζ, the stretch above 1
    # gated: G_h's form; null = the family's released one
    gate: Annotated[Literal["linear", "mlp"] | None, TRAINS] = None
    # gated: π_init; null = the family's released one
    gate_init: Annotated[float | None, TRAINS] = Field(default=None, gt=0, lt=1)
    granularity: Annotated[Literal["headwise", "elementwise"], TRAINS] = "elementwise"  # output gate


class ModelConfig(BaseModel):
    # Closed: every key a model preset or architecture reads is listed, so `+model.hiden_size=64` is refused
    # (naming the nearest setting) instead of training the preset's width in silence.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    family: Annotated[Literal["encoder", "decoder"], TRAINS]
    arch: Annotated[str | None, TRAINS] = None  # checked against models.architectures where the model is built
    hidden_size: Annotated[int, TRAINS] = Field(ge=1)
    num_layers: Annotated[int, TRAINS] = Field(ge=1)
    num_heads: Annotated[int, TRAINS] = Field(ge=1)
    num_kv_heads: Annotated[int | None, TRAINS] = Field(default=None, ge=1)
    intermediate_size: Annotated[int | None, TRAINS] = Field(default=None, ge=1)
    max_position: Annotated[int, TRAINS] = Field(ge=8)
    dropout: Annotated[float, TRAINS] = Field(ge=0, lt=1)
    attention_dropout: Annotated[float, TRAINS] = Field(default=0.1, ge=0, lt=1)
    tie_embeddings: Annotated[bool, TRAINS] = True
    # transformers' attention implementation (eager, sdpa, flash_attention_2, ...), checked where the model is built;
    # a Hub kernel (namespace/repo) is code downloaded and run, which degen-train never does (issue 72.6)
    attention: Annotated[str, TRAINS] = "sdpa"
    init_from: Annotated[str | None, INPUT] = None
    compile: Annotated[bool, TRAINS] = False
    # every objective's head + cross-entropy compiled (losses/catalog.with_compiled_heads)
    compile_head: Annotated[bool, TRAINS] = False
    # models/activation_checkpointing.py: none, full, or every k-th block (an integer k >= 1)
    activation_checkpointing: Annotated[Literal["none", "full"] | Annotated[int, Field(ge=1)], LAUNCH] = "none"
    # models/vocabulary.py: 1 = the tokenizer's size
    pad_vocab_to_multiple_of: Annotated[int, TRAINS] = Field(default=1, ge=1)
    # none: the absolute table zeroed and frozen
    position_embeddings: Annotated[Literal["learned", "none"], TRAINS] = "learned"
    local_attention: Annotated[int, TRAINS] = Field(default=128, ge=1)  # ModernBERT's sliding window (its released 128)
    # Llama / Qwen2's RoPE base (Llama's released 10,000)
    rope_theta: Annotated[float, TRAINS] = Field(default=10000.0, gt=0)
    norm_eps: Annotated[float, TRAINS] = Field(default=1e-6, gt=0)  # Llama / Qwen2's RMSNorm ε (both released at 1e-6)
    attention_variant: AttentionVariantConfig = Field(default_factory=AttentionVariantConfig)

    @model_validator(mode="after")
    def clipped_softmax_runs_eager(self) -> ModelConfig:
        if self.attention_variant.name == "clipped_softmax" and self.attention != "eager":
            raise ValueError(
                f"attention_variant.name=clipped_softmax needs the score matrix, which attention={self.attention} "
                f"never forms: set model.attention=eager"
            )
        return self

    @model_validator(mode="after")
    def heads_divide_width(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not a multiple of num_heads={self.num_heads}")
        if self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}: each key/value "
                f"head serves a whole number of query heads"
            )
        return self

    @field_validator("attention")
    @classmethod
    def no_hub_kernel(cls, value: str) -> str:
        if "/" in value:
            raise ValueError(f"{value!r} names a kernel on the Hugging Face Hub: code downloaded and run, which "
                             f"degen-train never does (as it never passes trust_remote_code); choose a transformers "
                             f"implementation: eager, sdpa, flash_attention_2, flex_attention")  # fmt: skip
        return value


class OptimizerConfig(Instantiated):
    lr: Annotated[float, TRAINS] = Field(gt=0)
    weight_decay: Annotated[float, TRAINS] = Field(ge=0)
    eps: Annotated[float, TRAINS] = Field(gt=0)
    betas: Annotated[tuple[float, float], TRAINS]
    # optimizer=muon (degen_train.optim.muon): Muon's own settings; the four above are its AdamW part's
    muon_lr: Annotated[float | None, TRAINS] = Field(default=None, gt=0)
    muon_weight_decay: Annotated[float | None, TRAINS] = Field(default=None, ge=0)
    muon_momentum: Annotated[float | None, TRAINS] = Field(default=None, ge=0, lt=1)
    muon_ns_steps: Annotated[int | None, TRAINS] = Field(default=None, ge=1, lt=100)
    muon_adjust_lr: Annotated[Literal["original", "match_rms_adamw"] | None, TRAINS] = None
    muon_ns_dtype: Annotated[Literal["bfloat16", "float32"] | None, TRAINS] = None
    muon_nesterov: Annotated[bool | None, TRAINS] = given_only()
    muon_ns_coefficients: Annotated[list[float] | None, TRAINS] = given_only()
    fused: Annotated[bool | None, TRAINS] = given_only()  # null: fused on a GPU and for FSDP2's sharded parameters

    @model_validator(mode="after")
    def betas_in_range(self) -> OptimizerConfig:
        if not all(0 <= beta < 1 for beta in self.betas):
            raise ValueError(f"betas={list(self.betas)}: each must be in [0, 1)")
        return self


class SchedulerConfig(Instantiated):
    schedule: Annotated[Literal["linear", "cosine", "constant", "wsd"], TRAINS]
    warmup_steps: Annotated[int, TRAINS] = Field(ge=0)
    total_steps: Annotated[int, TRAINS] = Field(ge=1)
    min_ratio: Annotated[float, TRAINS] = Field(ge=0, le=1)
    # wsd: the decay's length (wins over decay_fraction)
    decay_steps: Annotated[int | None, TRAINS] = Field(default=None, ge=1)
    decay_fraction: Annotated[float, TRAINS] = Field(default=0.2, gt=0, le=1)  # wsd: the decay's share of total_steps
    decay_shape: Annotated[Literal["linear", "cosine", "one_minus_sqrt"], TRAINS] = "linear"
    # the warm-up starts at lr / this (wsd: 100, released)
    warmup_init_div: Annotated[float | None, TRAINS] = Field(default=None, ge=1)

    @model_validator(mode="after")
    def decay_fits_the_run(self) -> SchedulerConfig:
        if self.schedule == "wsd":
            from degen_train.optim import wsd_decay_steps

            wsd_decay_steps(self.total_steps, self.warmup_steps, self.decay_steps, self.decay_fraction)
        return self


class RunGlueProtocolConfig(BaseModel):
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


class TermSection(BaseModel):
    """objective.NAME / regularizer.NAME: a loss term's options, checked by the term's own declaration
    (losses/declarations.py). Every option is what the run trains (OTHER_KEYS), except those that name a file a term
    reads, declared here (a term names them in ``reads``; tests/unit/test_roles.py holds the two to each other)."""

    model_config = Open
    OTHER_KEYS: ClassVar[Declared] = TRAINS
    teacher: Annotated[str | None, INPUT] = given_only()  # TaCL's frozen teacher (losses/tacl.py)


class EvalConfig(BaseModel):
    """eval: the probes and evaluations run on the export at the end of a run (conf/train.yaml says each one)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    sts: Annotated[list[str], INPUT] = Field(default_factory=list)
    wic: Annotated[str | None, INPUT] = None
    wic_fit: Annotated[str | None, INPUT] = None
    # STS files whose pairs the whitening is fitted on (BERT-whitening's release: train + dev + the scored split);
    # []: the scored split itself
    sts_whitening_fit: Annotated[list[str], INPUT] = Field(default_factory=list, max_length=16)
    layer: Annotated[Annotated[int, Field(ge=-1000, le=1000)] | Literal["last", "first_last"], MEASURES] = "last"
    pooling: Annotated[Literal["mean", "cls"], MEASURES] = "mean"
    # task names, checked with their files by finetune/tasks.py
    glue: Annotated[list[str], MEASURES] = Field(default_factory=list, max_length=16)
    glue_dir: Annotated[str | None, INPUT] = None
    # conf/finetune.yaml, checked with its protocols by finetune/settings.py
    finetune: FinetuneConfig = Field(default_factory=lambda: FinetuneConfig())
    w8a8: Annotated[str | None, INPUT] = None
    # held-out text: degen-eval --generate on a decoder's export (evaluation/generation.py)
    generate: Annotated[str | None, INPUT] = None
    generate_prompts: Annotated[int, MEASURES] = Field(default=200, ge=1, le=MAX_PROMPTS)
    generate_prefix_tokens: Annotated[int, MEASURES] = Field(default=32, ge=1, le=MAX_TOKENS)
    generate_new_tokens: Annotated[int, MEASURES] = Field(default=128, ge=1, le=MAX_TOKENS)
    # cut: SimCTG's release (no minimum length, cut at the first end-of-text); banned: every continuation full length
    generate_end_of_text: Annotated[Literal["cut", "banned"], MEASURES] = "cut"
    generate_decodings: Annotated[list[Literal["greedy", "beam", "top_k", "nucleus", "contrastive"]], MEASURES] = \
        Field(default_factory=lambda: ["greedy", "beam", "top_k", "nucleus", "contrastive"], min_length=1)
    # the evaluators, each a model folder or hub name (None: the release's where present, else a named stand-in)
    featurizer: Annotated[str | None, INPUT] = None  # MAUVE's (released: gpt2-large)
    coherence_encoder: Annotated[str | None, INPUT] = None  # coherence_simcse's (sup-simcse-bert-base-uncased)
    coherence_model: Annotated[str | None, INPUT] = None  # coherence_opt's (facebook/opt-2.7b)
    # lm-evaluation-harness task names (evaluation/lm_eval_tasks.py)
    lm_eval: Annotated[list[str], MEASURES] = Field(default_factory=list, max_length=256)
    lm_eval_include: Annotated[str | None, CODE] = None
    lm_eval_limit: Annotated[int | None, MEASURES] = Field(default=None, ge=1, le=MAX_ITEMS)


class PushToHubConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    repo_id: Annotated[str | None, OUTPUT] = None
    private: Annotated[bool, OUTPUT] = True
    message: Annotated[str, OUTPUT] = "degen_train export"
    dry_run: Annotated[bool, OUTPUT] = False

    @field_validator("repo_id")
    @classmethod
    def owner_and_name(cls, value: str | None) -> str | None:
        if value is not None and len(value.split("/")) != 2:
            raise ValueError("must be OWNER/NAME, e.g. my-lab/bert-tiny-cosreg")
        return value


class SearchConfig(BaseModel):
    """search: what a hyper-parameter search minimises (sweep.search_objective)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    metric: Annotated[str, MEASURES] = "val_loss"  # a summary.json key, or a val/... key of its val_metrics
    cosine_weight: Annotated[float, MEASURES] = Field(default=0.0, ge=0)
    cosine_bound: Annotated[float | None, MEASURES] = Field(default=None, ge=-1, le=1)


class PlanConfig(BaseModel):
    """plan: debug=plan's question, does this run fit a card and how long will it take (run/memory_plan.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # true (debug=plan): print the plan and stop, nothing built on a device, nothing written
    only: Annotated[bool, LAUNCH] = False
    card: Annotated[Literal["h100", "h200", "a100"], LAUNCH] = "h100"
    # the model FLOPs utilisation the step time is quoted at
    mfu: Annotated[float, LAUNCH] = Field(default=0.4, gt=0, le=1)
    devices: Annotated[int | None, LAUNCH] = Field(default=None, ge=1)  # null: trainer.devices x trainer.num_nodes
    # tokens to train: the plan gives the hours
    token_budget: Annotated[float | None, LAUNCH] = Field(default=None, gt=0)
    # the share of the card's memory a plan may fill
    headroom: Annotated[float, LAUNCH] = Field(default=0.9, gt=0, le=1)
    # another memory size for the card (a 40 GB A100, ...)
    memory_gib: Annotated[float | None, LAUNCH] = Field(default=None, gt=0)


class TrainConfig(BaseModel):
    model_config = Open
    seed: Annotated[int, TRAINS] = Field(ge=0)
    ckpt_path: Annotated[str | None, LAUNCH] = None
    branch_from: Annotated[str | None, INPUT] = None
    allow_slow_precision: Annotated[bool, LAUNCH] = False
    prepare_only: Annotated[bool, LAUNCH] = False
    export_hf: Annotated[bool, OUTPUT] = True
    final_validation: Annotated[bool, protection(VALIDATION, keeps=(True,))] = True
    threads: Annotated[Any, LAUNCH] = "auto"
    eval: EvalConfig = Field(default_factory=EvalConfig)
    push_to_hub: PushToHubConfig = Field(default_factory=PushToHubConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    plan: PlanConfig = Field(default_factory=PlanConfig)
    masking: MaskingConfig
    data: Annotated[DataConfig, group(TRAINS)]
    model: Annotated[ModelConfig, group(TRAINS)]
    trainer: Annotated[TrainerConfig, group(LAUNCH)]
    optimizer: Annotated[OptimizerConfig, group(TRAINS)]
    scheduler: Annotated[SchedulerConfig, group(TRAINS)]
    callbacks: Annotated[CallbacksConfig | None, group(protection("every callback", keeps=("default",)))] = None
    objective: Annotated[dict[str, TermSection], TRAINS, group(TRAINS)] = Field(default_factory=dict)
    regularizer: Annotated[dict[str, TermSection] | None, TRAINS, group(TRAINS)] = given_only()
    # where the run writes, and how it is launched: this run's own, never a handed-over file's
    run_dir: Annotated[str | None, OUTPUT] = given_only()
    logger: Annotated[dict[str, Any] | None, OUTPUT, group(OUTPUT)] = given_only()
    strategy: Annotated[dict[str, Any] | str | None, LAUNCH, group(LAUNCH)] = given_only()
    cluster: Annotated[dict[str, Any] | None, LAUNCH, group(LAUNCH)] = given_only()
    hydra: Annotated[dict[str, Any] | None, LAUNCH, group(LAUNCH)] = given_only()
    defaults: Annotated[list[Any] | None, LAUNCH] = given_only()  # a config file's own defaults list: its composition
    # a recipe's own inputs, interpolated into the keys that read them (recipes/tacl.yaml: teacher, simcse: start)
    teacher: Annotated[str | None, INPUT] = given_only()
    start: Annotated[str | None, INPUT] = given_only()
    # Groups whose files set keys across sections (``# @package _global_``): the role of choosing one of their files
    GLOBAL_GROUPS: ClassVar[dict[str, Declared]] = {
        "recipe": TRAINS, "method": TRAINS, "speed": TRAINS,
        "debug": protection("the run's steps, checkpoints and validation", keeps=(None,)),  # no choice keeps them
    }  # fmt: skip

    def plain_settings(self) -> dict[str, Any]:
        """The config that runs, as plain values: every listed key with its checked value or the schema's default,
        except that a section Hydra builds (``_target_``: the optimizer, the scheduler, each callback, the trainer)
        keeps only the keys given, as its constructor receives them. What run/build.py instantiates from and what
        the run records (config.json, config.yaml); derived from this typed config, never carried beside it."""
        # JSON's types (a tuple as a list), as OmegaConf held them and every recorded config.json has them
        return _filled(self.model_dump(by_alias=True, mode="json"),
                       self.model_dump(exclude_unset=True, by_alias=True, mode="json"))  # fmt: skip

    @field_validator("threads")
    @classmethod
    def threads_is_auto_or_a_count(cls, value: Any) -> Any:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError("must be auto (the CPUs this process may use) or a thread count >= 1, e.g. threads=1")

    @model_validator(mode="after")
    def sections_agree(self) -> TrainConfig:
        if self.push_to_hub.repo_id and not self.export_hf:
            raise ValueError(
                f"push_to_hub.repo_id={self.push_to_hub.repo_id} needs export_hf=true: the export is what is pushed"
            )
        if self.eval.glue and not self.export_hf:
            raise ValueError("eval.glue fine-tunes the export: it needs export_hf=true")
        if self.eval.glue and not self.eval.glue_dir:
            raise ValueError(
                "eval.glue needs eval.glue_dir: the folder GLUE's download wrote (holding RTE/, SST-2/, ...)"
            )
        if self.data.tokenize_part is not None and not self.prepare_only:
            raise ValueError(
                f"data.tokenize_part={self.data.tokenize_part} tokenizes one node's share of the corpus and stops: "
                f"give prepare_only=true with it, then train without it once every part is in the cache"
            )
        nsp = [key for key, term in self.objective.items()
               if key == "nsp" or ((term.model_extra or {}) if term else {}).get("term") == "nsp"]
        if self.data.examples == "sentences" and nsp:
            raise ValueError("data.examples=sentences cannot make NSP pairs: use data.examples=packed with NSP")
        if self.model.init_from is None and self.data.block_size > self.model.max_position:
            raise ValueError(
                f"data.block_size={self.data.block_size} is longer than model.max_position={self.model.max_position}: "
                f"lower data.block_size or raise model.max_position"
            )
        return self


def validate_config(cfg: DictConfig) -> TrainConfig:
    """Check ``cfg`` against the schema; raise one ValueError naming every bad key, value and what is allowed."""
    try:
        raw: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    except (MissingMandatoryValue, InterpolationToMissingValueError) as error:  # a recipe's ??? (teacher=, start=)
        missing = str(error).split("Missing mandatory value:")[-1].split("\n")[0].strip()
        raise ValueError(
            f"{missing} has no value, and {error.full_key} needs it: give {missing}=... on the command line "
            f"(the recipe's header says what it is)"
        ) from None
    try:
        checked = TrainConfig.model_validate(raw)
    except ValidationError as error:
        raise ValueError("invalid config:\n" + "\n".join(_describe(e, raw) for e in error.errors())) from None
    scheduler = checked.scheduler
    if scheduler.warmup_steps >= scheduler.total_steps:
        # A log line as every other caution of a run (train.log keeps it), not a Python warning.
        logging.getLogger("degen_train").warning(
            "scheduler.warmup_steps=%s >= scheduler.total_steps=%s: the learning rate never reaches optimizer.lr=%s "
            "in this run", scheduler.warmup_steps, scheduler.total_steps, checked.optimizer.lr)  # fmt: skip
    return checked


def checked_config(cfg: DictConfig) -> DictConfig:
    """The config that runs, as a DictConfig: ``cfg`` checked by ``validate_config`` and rebuilt from its plain
    settings, so every listed key is present with its checked value or the schema's default (unlisted keys as
    given)."""
    runs = OmegaConf.create(validate_config(cfg).plain_settings())
    OmegaConf.set_struct(runs, True)  # as Hydra's: reading a key nobody set raises instead of returning None
    return runs


def _filled(full: Any, given: Any) -> Any:
    """``full`` (defaults filled), except that a section Hydra instantiates (``_target_``: the optimizer, the
    scheduler, each callback) keeps only the keys given: its constructor receives them as arguments."""
    if not isinstance(full, dict):
        return full
    if isinstance(given, dict) and "_target_" in given:
        return given
    return {key: _filled(value, given.get(key) if isinstance(given, dict) else None) for key, value in full.items()}


def model_section(cfg: ModelConfig | DictConfig | Mapping[str, Any]) -> ModelConfig:
    """The model section typed; a section composed in Python (tests, notebooks, tools) is checked here."""
    if isinstance(cfg, ModelConfig):
        return cfg
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    return _checked_section(ModelConfig, raw, "model")


def data_section(cfg: DataConfig | DictConfig | Mapping[str, Any], *, where: str = "data") -> DataConfig:
    """The data section typed; a section composed in Python, or a mixture's source (``where``: data.sources[i]),
    is checked here."""
    if isinstance(cfg, DataConfig):
        return cfg
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    return _checked_section(DataConfig, raw, "data", where=where)


def _checked_section(kind: type[Section], raw: Any, key: str, *, where: str | None = None) -> Section:
    """``raw`` validated as the section ``key`` of the config; every problem named under ``where`` (default key)."""
    try:
        return kind.model_validate(raw)
    except ValidationError as error:
        lines = [_describe({**e, "loc": (key, *e["loc"])}, {key: raw}) for e in error.errors()]
        lines = [f"  {where or key}{line.removeprefix('  ' + key)}" for line in lines]
        raise ValueError("invalid config:\n" + "\n".join(lines)) from None


def _describe(error: dict[str, Any], raw: dict[str, Any]) -> str:
    location = [str(part) for part in error["loc"] if not str(part).startswith("function-after")]
    key = ".".join(location)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"  {key}: missing"
    if error["type"] == "extra_forbidden":
        return f"  {key}: {_unknown_setting(location)}"
    value = _lookup(raw, location)
    if isinstance(value, dict):  # a cross-field rule: the message names the keys and values itself
        return f"  {key}: {message}"
    return f"  {key}={value!r}: {message}"


def _unknown_setting(location: list[str]) -> str:
    """What to say of a key a closed section does not have: the nearest known key, and all of them."""
    section: Any = TrainConfig
    for part in location[:-1]:
        section = section.model_fields[part].annotation
    known = sorted(section.model_fields)
    near = difflib.get_close_matches(location[-1], known, n=1)
    hint = f" (did you mean {'.'.join([*location[:-1], near[0]])}?)" if near else ""
    return f"not a setting of {'.'.join(location[:-1])}{hint}; its settings: {', '.join(known)}"


def _lookup(tree: Any, path: list[str]) -> Any:
    for part in path:
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        elif isinstance(tree, list | tuple) and part.isdigit() and int(part) < len(tree):
            tree = tree[int(part)]
        else:
            return None
    return tree
