"""The typed schema of a training config, checked once before any data, model or file is touched.

Every section allows keys the schema does not list (any ``lightning.pytorch.Trainer`` argument, a
term's own options): those are checked where they are used. What is listed here is checked for type,
range and the constraints between sections, and every problem is reported at once, each naming the
key, the value and what is allowed.

This file is the one place a listed key's type, range and default are said. ``checked_config`` is
the config that runs: the layers below the CLI receive it (the model section as a typed
``ModelConfig``), read each listed key as an attribute, and never check or default it again.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# Every number a config gives is finite: an inf or NaN (optimizer.lr=inf) would pass the range checks and fail
# after data preparation, in a linear-algebra routine.
Open = ConfigDict(extra="allow", allow_inf_nan=False)
Section = TypeVar("Section", bound=BaseModel)


class MaskingConfig(BaseModel):
    model_config = Open
    probability: float = Field(gt=0, le=1)
    mask_fraction: float = Field(ge=0, le=1)
    random_fraction: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def fractions_fit(self) -> MaskingConfig:
        if self.mask_fraction + self.random_fraction > 1:
            raise ValueError(
                f"mask_fraction + random_fraction = {self.mask_fraction} + {self.random_fraction} > 1: "
                f"the rest of the selected tokens is kept, so the two must add up to at most 1"
            )
        return self


# Closed sections: every key a component reads is listed with its type, so the section reaches the component as a
# typed object (data.prepare_data, models.build_hf_model) and a misspelt key is refused, naming the nearest one.
Closed = ConfigDict(extra="forbid", allow_inf_nan=False)


class TokenizerConfig(BaseModel):
    model_config = Closed
    path: str | None = None  # a folder or hub name; null: trained on the corpus (cached)
    vocab_size: int = Field(ge=10)
    min_frequency: int = Field(ge=1)
    lowercase: bool = True
    max_documents: int | None = Field(default=None, ge=1)


class DataConfig(BaseModel):
    """data: where the corpus comes from and how it is cut (conf/data/builtin.yaml says each key)."""

    model_config = Closed
    source: Literal["builtin", "text", "hub"]
    path: str | None = None  # text: a file or folder
    validation_path: str | None = None
    text_column: str = "text"
    document_unit: Literal["line", "paragraph", "document"] = "paragraph"
    on_decode_error: Literal["error", "skip"] = "error"
    streaming: bool = False
    validation_documents: int = Field(default=200, ge=1)  # with streaming: the first N documents
    split_seed: int = Field(default=0, ge=0)
    cache_dir: str
    name: str | None = None  # hub: the data set, its config, splits and revision
    config: str | None = None
    split: str = "train"
    validation_split: str | None = None
    revision: str | None = None
    missing_hint: str | None = None  # said when a file is missing (data=wikitext2)
    block_size: int = Field(ge=8)
    batch_size: int = Field(ge=1)
    num_workers: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    num_proc: int | None = Field(default=None, ge=1)
    sources: list[Any] | None = None  # a weighted mixture, checked in data/mixture.py (mixture_sources)
    overfit_batches: int = Field(default=0, ge=0)
    validation_fraction: float = Field(gt=0, lt=1)
    examples: Literal["packed", "sentences"] = "packed"
    tokenize_parts: int = Field(default=1, ge=1)
    tokenize_part: int | None = Field(default=None, ge=0)
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
    name: Literal["softmax", "clipped_softmax", "gated", "output_gate", "kv_bias"] = "softmax"
    alpha: float | None = Field(default=None, ge=0)  # clipped softmax: γ = −α/T; null = the family's released α
    eta: float = Field(default=1.0, ge=1)  # clipped softmax: ζ, the stretch above 1
    gate: Literal["linear", "mlp"] | None = None  # gated: G_h's form; null = the family's released one
    gate_init: float | None = Field(default=None, gt=0, lt=1)  # gated: π_init; null = the family's released one
    granularity: Literal["headwise", "elementwise"] = "elementwise"  # output gate


class ModelConfig(BaseModel):
    # Closed: every key a model preset or architecture reads is listed, so `+model.hiden_size=64` is refused
    # (naming the nearest setting) instead of training the preset's width in silence.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    family: Literal["encoder", "decoder"]
    arch: str | None = None  # checked against models.architectures where the model is built
    hidden_size: int = Field(ge=1)
    num_layers: int = Field(ge=1)
    num_heads: int = Field(ge=1)
    num_kv_heads: int | None = Field(default=None, ge=1)
    intermediate_size: int | None = Field(default=None, ge=1)
    max_position: int = Field(ge=8)
    dropout: float = Field(ge=0, lt=1)
    attention_dropout: float = Field(default=0.1, ge=0, lt=1)
    tie_embeddings: bool = True
    attention: str = "sdpa"  # checked by transformers where the model is built
    init_from: str | None = None
    compile: bool = False
    compile_head: bool = False  # every objective's head + cross-entropy compiled (losses/catalog.with_compiled_heads)
    # models/activation_checkpointing.py: none, full, or every k-th block (an integer k >= 1)
    activation_checkpointing: Literal["none", "full"] | Annotated[int, Field(ge=1)] = "none"
    pad_vocab_to_multiple_of: int = Field(default=1, ge=1)  # models/vocabulary.py: 1 = the tokenizer's size
    position_embeddings: Literal["learned", "none"] = "learned"  # none: the absolute table zeroed and frozen
    local_attention: int = Field(default=128, ge=1)  # ModernBERT's sliding window (its released 128)
    rope_theta: float = Field(default=10000.0, gt=0)  # Llama / Qwen2's RoPE base (Llama's released 10,000)
    norm_eps: float = Field(default=1e-6, gt=0)  # Llama / Qwen2's RMSNorm ε (both released at 1e-6)
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


class TrainerConfig(BaseModel):
    model_config = Open
    max_steps: int = Field(ge=1)
    accumulate_grad_batches: int = Field(ge=1)
    log_every_n_steps: int = Field(ge=1)
    gradient_clip_val: float | None = Field(default=None, ge=0)
    val_check_interval: Annotated[int | float, Field(gt=0)] | Literal["auto"] | None = None


class OptimizerConfig(BaseModel):
    model_config = Open
    lr: float = Field(gt=0)
    weight_decay: float = Field(ge=0)
    eps: float = Field(gt=0)
    betas: tuple[float, float]
    # optimizer=muon (degen_train.optim.muon): Muon's own settings; the four above are its AdamW part's
    muon_lr: float | None = Field(default=None, gt=0)
    muon_weight_decay: float | None = Field(default=None, ge=0)
    muon_momentum: float | None = Field(default=None, ge=0, lt=1)
    muon_ns_steps: int | None = Field(default=None, ge=1, lt=100)
    muon_adjust_lr: Literal["original", "match_rms_adamw"] | None = None
    muon_ns_dtype: Literal["bfloat16", "float32"] | None = None

    @model_validator(mode="after")
    def betas_in_range(self) -> OptimizerConfig:
        if not all(0 <= beta < 1 for beta in self.betas):
            raise ValueError(f"betas={list(self.betas)}: each must be in [0, 1)")
        return self


class SchedulerConfig(BaseModel):
    model_config = Open
    schedule: Literal["linear", "cosine", "constant", "wsd"]
    warmup_steps: int = Field(ge=0)
    total_steps: int = Field(ge=1)
    min_ratio: float = Field(ge=0, le=1)
    decay_steps: int | None = Field(default=None, ge=1)  # wsd: the decay's length (wins over decay_fraction)
    decay_fraction: float = Field(default=0.2, gt=0, le=1)  # wsd: the decay's share of total_steps
    decay_shape: Literal["linear", "cosine", "one_minus_sqrt"] = "linear"
    warmup_init_div: float | None = Field(default=None, ge=1)  # the warm-up starts at lr / this (wsd: 100, released)

    @model_validator(mode="after")
    def decay_fits_the_run(self) -> SchedulerConfig:
        if self.schedule == "wsd":
            from degen_train.optim import wsd_decay_steps

            wsd_decay_steps(self.total_steps, self.warmup_steps, self.decay_steps, self.decay_fraction)
        return self


class CheckpointCallbackConfig(BaseModel):
    model_config = Open
    every_n_train_steps: int | None = Field(default=None, ge=1)
    save_top_k: int = Field(default=1, ge=-1)
    background: bool | Literal["auto"] = "auto"


class IsotropyCallbackConfig(BaseModel):
    model_config = Open
    every_n_steps: int = Field(ge=1)
    probe_size: int = Field(ge=1)


class DivergenceCallbackConfig(BaseModel):
    model_config = Open
    on_nonfinite: Literal["stop", "skip"]
    max_skips: int = Field(ge=0)
    spike_sigma: float | None = Field(default=None, gt=0)
    spike_window: int = Field(ge=2)


class CallbacksConfig(BaseModel):
    model_config = Open
    checkpoint: CheckpointCallbackConfig | None = None
    isotropy: IsotropyCallbackConfig | None = None
    divergence: DivergenceCallbackConfig | None = None


class EvalConfig(BaseModel):
    """eval: the probes and evaluations run on the export at the end of a run (conf/train.yaml says each one)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    sts: list[str] = Field(default_factory=list)
    wic: str | None = None
    wic_fit: str | None = None
    layer: int | Literal["last", "first_last"] = "last"
    pooling: Literal["mean", "cls"] = "mean"
    glue: list[str] = Field(default_factory=list)  # task names, checked with their files by finetune/tasks.py
    glue_dir: str | None = None
    finetune: dict[str, Any] = Field(default_factory=dict)  # conf/finetune.yaml, checked by finetune/grid.py
    w8a8: str | None = None
    generate: str | None = None  # held-out text: degen-eval --generate on a decoder's export (evaluation/generation.py)
    generate_prompts: int = Field(default=200, ge=1)
    generate_prefix_tokens: int = Field(default=32, ge=1)
    generate_new_tokens: int = Field(default=128, ge=1)
    lm_eval: list[str] = Field(default_factory=list)  # lm-evaluation-harness task names (evaluation/lm_eval_tasks.py)
    lm_eval_include: str | None = None
    lm_eval_limit: int | None = Field(default=None, ge=1)


class PushToHubConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    repo_id: str | None = None
    private: bool = True
    message: str = "degen_train export"
    dry_run: bool = False

    @field_validator("repo_id")
    @classmethod
    def owner_and_name(cls, value: str | None) -> str | None:
        if value is not None and len(value.split("/")) != 2:
            raise ValueError("must be OWNER/NAME, e.g. my-lab/bert-tiny-cosreg")
        return value


class SearchConfig(BaseModel):
    """search: what a hyper-parameter search minimises (sweep.search_objective)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    metric: str = "val_loss"  # a summary.json key, or a val/... key of its val_metrics
    cosine_weight: float = Field(default=0.0, ge=0)
    cosine_bound: float | None = Field(default=None, ge=-1, le=1)


class PlanConfig(BaseModel):
    """plan: debug=plan's question, does this run fit a card and how long will it take (run/memory_plan.py)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    only: bool = False  # true (debug=plan): print the plan and stop, nothing built on a device, nothing written
    card: Literal["h100", "h200", "a100"] = "h100"
    mfu: float = Field(default=0.4, gt=0, le=1)  # the model FLOPs utilisation the step time is quoted at
    devices: int | None = Field(default=None, ge=1)  # null: trainer.devices x trainer.num_nodes
    token_budget: float | None = Field(default=None, gt=0)  # tokens to train: the plan gives the hours
    headroom: float = Field(default=0.9, gt=0, le=1)  # the share of the card's memory a plan may fill
    memory_gib: float | None = Field(default=None, gt=0)  # another memory size for the card (a 40 GB A100, ...)


class TrainConfig(BaseModel):
    model_config = Open
    seed: int = Field(ge=0)
    ckpt_path: str | None = None
    branch_from: str | None = None
    allow_slow_precision: bool = False
    prepare_only: bool = False
    export_hf: bool = True
    final_validation: bool = True
    threads: Any = "auto"
    eval: EvalConfig = Field(default_factory=EvalConfig)
    push_to_hub: PushToHubConfig = Field(default_factory=PushToHubConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    plan: PlanConfig = Field(default_factory=PlanConfig)
    masking: MaskingConfig
    data: DataConfig
    model: ModelConfig
    trainer: TrainerConfig
    optimizer: OptimizerConfig
    scheduler: SchedulerConfig
    callbacks: CallbacksConfig | None = None
    objective: dict[str, Any] = Field(default_factory=dict)

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
        nsp = [key for key, term in self.objective.items() if key == "nsp" or (term or {}).get("term") == "nsp"]
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
    """The config that runs: ``cfg`` checked by ``validate_config`` and rebuilt from what the check returned, so
    every listed key is present with its checked value or the schema's default (unlisted keys as given)."""
    checked = validate_config(cfg)
    runs = OmegaConf.create(_filled(checked.model_dump(), checked.model_dump(exclude_unset=True)))
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
