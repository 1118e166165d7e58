"""The checked config is the config that runs (schema.py): every listed key filled from the schema, read below
the CLI without a default of its own, and a section handed in from Python checked as the command line's is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from degen_train.config import load_config
from degen_train.config.schema import TrainConfig, validate_config
from degen_train.data.mixture import mixture_sources
from degen_train.data.section import DataConfig
from degen_train.evaluation.section import EvalConfig
from degen_train.models.backbone import build_hf_model
from degen_train.models.section import ModelConfig
from degen_train.run.sections import PushToHubConfig, SearchConfig, TrainerConfig

PACKAGE = Path(__file__).resolve().parents[2] / "degen_train"


def test_the_config_that_runs_holds_every_listed_key_with_the_schema_default(tmp_path: Path) -> None:
    runs = validate_config(load_config(["model=tiny"], run_dir=tmp_path)).plain_settings()
    for key in ("rope_theta", "norm_eps", "local_attention"):  # bert has none of them in its preset
        assert runs["model"][key] == ModelConfig.model_fields[key].default
    assert runs["model"]["attention_variant"]["name"] == "softmax"
    assert runs["data"]["tokenize_parts"] == 1 and runs["data"]["tokenize_part"] is None
    assert runs["data"]["num_proc"] is None
    # A section Hydra instantiates keeps the keys given: its constructor's signature holds the rest.
    assert "_target_" in runs["optimizer"] and "muon_lr" not in runs["optimizer"]
    assert runs["callbacks"]["divergence"]["on_nonfinite"] == "stop"


def test_no_listed_key_is_defaulted_or_checked_again_below_the_schema() -> None:
    """One file says what a key means, its type, range and default: no ``cfg....get("KEY", default)`` elsewhere."""
    sections = (TrainConfig, ModelConfig, DataConfig, TrainerConfig, EvalConfig, PushToHubConfig, SearchConfig)
    # a given-only field (core/section.py: a Trainer argument, a callback's setting) is absent unless given, so its
    # default is its consumer's, read where it is used
    listed = {key for section in sections for key, info in section.model_fields.items() if info.exclude_if is None}
    pattern = re.compile(r"cfg(?:\.\w+)*\.get\(\"(\w+)\"")
    found = [
        f"{path.relative_to(PACKAGE)}: {match.group(0)}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "schema.py"
        for match in pattern.finditer(path.read_text())
        if match.group(1) in listed
    ]
    assert found == []


def test_a_mixture_source_is_checked_as_the_data_section_is() -> None:
    cfg = load_config(["data.sources=[{weight: 0.5}, {path: README.md, weight: 0.5, validation_fraction: 2}]"])
    with pytest.raises(ValueError, match=r"data\.sources\[1\]\.validation_fraction=2: Input should be less than 1"):
        mixture_sources(cfg.data)


def test_an_attention_that_names_a_hub_kernel_is_refused() -> None:
    """Issue 72.6: ``model.attention=namespace/repo`` makes transformers download a kernel from the Hub and run it
    (code a config chose); it is refused naming the implementations there are, before anything loads."""
    from degen_train.models.section import ModelConfig

    section = OmegaConf.to_container(load_config(["model=tiny"]).model, resolve=True)
    with pytest.raises(ValueError, match=r"names a kernel on the Hugging Face Hub: code downloaded and run"):
        ModelConfig.model_validate({**section, "attention": "kernels-community/flash-attn"})
    assert ModelConfig.model_validate({**section, "attention": "eager"}).attention == "eager"


def test_the_model_section_takes_exactly_the_attention_implementations_transformers_registers() -> None:
    """model.attention is checked before transformers loads, from its registry's source
    (models/section.ATTENTION_REGISTRY): the names transformers' own check accepts."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from degen_train.models.section import ModelConfig, attention_implementations

    registered = ALL_ATTENTION_FUNCTIONS.valid_keys()  # with those degen-train registers for its own use, no choice
    theirs = {name for name in registered if not ALL_ATTENTION_FUNCTIONS[name].__module__.startswith("degen_train")}
    assert set(attention_implementations()) == {"eager", *theirs}
    section = OmegaConf.to_container(load_config(["model=tiny"]).model, resolve=True)
    with pytest.raises(ValueError, match=r"not one of transformers' attention implementations \(eager, "):
        ModelConfig.model_validate({**section, "attention": "flash"})


def test_a_model_section_from_python_is_checked_by_name() -> None:
    section = OmegaConf.to_container(load_config(["model=tiny"]).model)
    section["hiden_size"] = 64
    with pytest.raises(ValueError, match=r"model\.hiden_size: not a setting of model \(did you mean model\.hidden_s"):
        build_hf_model(OmegaConf.create(section), tokenizer=range(30), with_nsp_head=False)


def test_nsp_under_another_key_cannot_take_sentence_examples(tmp_path: Path) -> None:
    """data.examples=sentences with NSP is refused by the schema whatever key the NSP term is configured under."""
    cfg = load_config(["recipe=bert_mlm_nsp", "data.examples=sentences"], run_dir=tmp_path)
    with open_dict(cfg):
        cfg.objective.pairs = {**cfg.objective.nsp, "term": "nsp"}
        del cfg.objective["nsp"]
    with pytest.raises(ValueError, match="data.examples=sentences cannot make NSP pairs"):
        validate_config(cfg)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["push_to_hub.repo_id=tiny-mlm"], r"push_to_hub.repo_id='tiny-mlm': must be OWNER/NAME, e.g. my-lab/"),
        (["push_to_hub.repo_id=my-lab/x", "export_hf=false"], r"repo_id=my-lab/x needs export_hf=true"),
        (["eval.pooling=max"], r"eval.pooling='max': Input should be 'mean' or 'cls'"),
        (["eval.glue=[rte]"], r"eval.glue needs eval.glue_dir"),
        (["eval.glue=[rte]", "eval.glue_dir=x", "export_hf=false"], r"eval.glue fine-tunes the export"),
        (["search.cosine_weight=-1"], r"search.cosine_weight=-1: Input should be greater than or equal to 0"),
    ],
)
def test_eval_push_and_search_settings_are_checked_before_any_work(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=message):
        validate_config(load_config(overrides, run_dir=tmp_path))


def test_the_trainer_section_takes_exactly_the_precisions_lightning_declares() -> None:
    """trainer.precision is checked before Lightning loads, from the Literals its source declares
    (run/sections.LIGHTNING_PRECISIONS): the same set Lightning's own connector accepts."""
    from typing import get_args

    from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT

    from degen_train.run.sections import lightning_precisions

    taken = {value for part in get_args(_PRECISION_INPUT) for value in get_args(part)}
    assert set(lightning_precisions()) == taken
    assert TrainerConfig.model_validate({"max_steps": 1, "accumulate_grad_batches": 1, "log_every_n_steps": 1,
                                         "precision": "bf16-mixed"}).precision == "bf16-mixed"  # fmt: skip
    with pytest.raises(ValueError, match="not one of Lightning's precisions .*input_value='bf17'"):
        TrainerConfig.model_validate({"max_steps": 1, "accumulate_grad_batches": 1, "log_every_n_steps": 1,
                                      "precision": "bf17"})  # fmt: skip


def test_a_misspelt_key_is_named_at_the_top_and_below_an_optional_section() -> None:
    """The config is closed at every level: a top-level key no section declares was accepted (the run trained on
    with it), and a key below an Optional section (eval.finetune.run_glue) ended in an AttributeError."""
    with pytest.raises(ValueError, match=r"sed: not a setting of the config \(did you mean seed\?\)"):
        validate_config(load_config(["+sed=3"]))
    with pytest.raises(ValueError, match=r"eval.finetune.run_glue.bogus: not a setting of eval.finetune.run_glue; "
                                         r"its settings: batch_size, "):  # fmt: skip
        validate_config(load_config(["+eval.finetune.run_glue.bogus=1"]))
    with pytest.raises(ValueError, match=r"masking.probabilty: not a setting of masking \(did you mean masking.prob"):
        validate_config(load_config(["+masking.probabilty=0.2"]))  # was kept, and the collator read its 15%


def test_a_built_sections_keys_are_its_targets_arguments_where_its_source_says() -> None:
    """core/section.Instantiated: a key given to a section Hydra builds must be an argument of its _target_, read
    from the target's source (core/source_reading.callable_keywords) before anything is imported; where the source
    cannot say (a **kwargs, an inherited __init__, a name imported from elsewhere) the constructor decides."""
    from degen_train.core.source_reading import callable_keywords

    assert callable_keywords("degen_train.optim.schedule.build_scheduler")[:3] == ("optimizer", "schedule",
                                                                                     "warmup_steps")  # fmt: skip
    assert "spike_sigma" in callable_keywords("degen_train.callbacks.divergence.DivergenceGuard")  # its own __init__
    assert callable_keywords("degen_train.callbacks.checkpoint.RunCheckpoint") is None  # **kwargs to Lightning's
    assert callable_keywords("degen_train.callbacks.throughput.StepProgressBar") is None  # an inherited __init__
    assert callable_keywords("lightning.pytorch.callbacks.LearningRateMonitor") is None  # defined elsewhere
    with pytest.raises(ValueError, match=r"callbacks.divergence: spike_sigm is not an argument of degen_train\."
                                         r"callbacks\.divergence\.DivergenceGuard \(did you mean spike_sigma\?\)"):
        validate_config(load_config(["+callbacks.divergence.spike_sigm=3"]))
    assert validate_config(load_config(["callbacks.weight_averaging.validate=both", "callbacks.weight_averaging."
                                        "kind=ema"])).callbacks.weight_averaging.validate_with == "both"  # its key
