"""The config alone, checked before any framework loads: what `degen-train` refuses in about a second.

The typed config (config/schema.py composing each component's section.py: fields, roles and cross-field rules)
and the loss terms' options as their files declare them (losses/declarations.py: names, values, weights) need
neither torch, Lightning nor transformers. The command runs this first and hands its result to the run's check
stage (run/checks.py), which then asks only what needs the machine or the terms' own rules (the files at the read
stage, run/inputs.py): nothing is validated twice.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from degen_train.config.schema import TrainConfig, validate_config
from degen_train.losses.declarations import check_term_sections, check_terms_fit_family, declared_terms
from degen_train.models.section import DEFAULT_ARCH, next_sentence_refusal


def check_config_alone(cfg: DictConfig) -> TrainConfig:
    """The typed config, the one form below the command line: the schema once, then every loss term's options by
    its declaration; raises ValueError naming the first bad key."""
    config = validate_config(cfg)
    settings = config.plain_settings()
    sections: dict[str, Any] = {"objective": settings["objective"], "regularizer": settings.get("regularizer")}
    check_term_sections(sections, plugins=_plugins_installed())
    if not config.model.init_from:  # an init_from model's family is its config.json's, read at the check stage
        declared = declared_terms()
        terms = {key: declared[name] for section in sections.values() for key, options in (section or {}).items()
                 if (name := (options or {}).get("term", key)) in declared}  # fmt: skip
        check_terms_fit_family(terms, config.model.family, _choice("model"))
        refusal = next_sentence_refusal(config.model.arch or DEFAULT_ARCH[config.model.family])
        if refusal and any(term.data_format == "mlm_nsp" for term in terms.values()):
            raise ValueError(refusal)
    return config


def _choice(group: str) -> str:
    """The group's choice on the command line (``model=tiny``), as a refusal names it."""
    from hydra.core.hydra_config import HydraConfig

    return str(HydraConfig.get().runtime.choices.get(group, group)) if HydraConfig.initialized() else group


def _plugins_installed() -> bool:
    """Whether an installed package adds loss terms (entry points): their terms are checked when built."""
    import importlib.metadata

    return bool(importlib.metadata.entry_points(group="degen_train.terms"))
