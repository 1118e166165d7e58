"""Validate a config and build the pieces of a run, failing early with messages that name the value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
import torch
from hydra.errors import InstantiationException
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from omegaconf import DictConfig, OmegaConf

from degen_train.terms import LossTerm, TermContext

CHECKPOINT_MODEL_KEYS = (
    "family",
    "hidden_size",
    "num_layers",
    "num_heads",
    "intermediate_size",
    "max_position",
    "tie_embeddings",
    "init_from",
)


def data_format_for(terms: dict[str, LossTerm], family: str, model_name: str) -> str:
    """Check every term fits the model family and return the example layout the terms need."""
    for key, term in terms.items():
        if term.family is not None and term.family != family:
            hint = "model=gpt2_tiny (or another gpt2_*)" if term.family == "decoder" else "model=tiny, mini, small, ..."
            raise ValueError(
                f"loss term {key!r} needs the {term.family} family but model={model_name} is {family}: use {hint}"
            )
    formats = {term.data_format for term in terms.values() if term.data_format}
    if "mlm_nsp" in formats:
        return "mlm_nsp"
    if formats:
        return formats.pop()
    return "mlm" if family == "encoder" else "causal"


def setup_terms(terms: dict[str, LossTerm], context: TermContext) -> None:
    for term in terms.values():
        term.setup(context)


def resolve_checkpoint(ckpt_path: str | None, run_dir: Path) -> Path | None:
    """``last`` -> RUN/checkpoints/last.ckpt; a path must exist."""
    if ckpt_path in (None, "", "null"):
        return None
    if ckpt_path == "last":
        path = run_dir / "checkpoints" / "last.ckpt"
        if not path.exists():
            found = sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt")) if path.parent.exists() else []
            raise FileNotFoundError(
                f"ckpt_path=last but {path} does not exist (checkpoints there: {', '.join(found) or 'none'}); "
                f"pass hydra.run.dir=RUN of the run to continue"
            )
        return path
    path = Path(ckpt_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"ckpt_path={ckpt_path} does not exist")
    return path


def check_checkpoint_matches(path: Path, cfg: DictConfig, term_names: list[str]) -> None:
    """Refuse a checkpoint written by another model shape or another set of loss terms."""
    saved = torch.load(path, map_location="cpu", weights_only=False, mmap=True).get("degen_train")
    if saved is None:
        raise ValueError(f"{path} is not a degen_train checkpoint (no 'degen_train' entry)")
    for key in CHECKPOINT_MODEL_KEYS:
        before, now = saved["model"].get(key), cfg.model.get(key)
        if before != now:
            raise ValueError(
                f"checkpoint {path} was written with model.{key}={before}, this run has model.{key}={now}: "
                f"use the run's model settings, or start a new run from its export (model.init_from=RUN/hf)"
            )
    if sorted(saved["terms"]) != sorted(term_names):
        raise ValueError(
            f"checkpoint {path} was trained with loss terms {sorted(saved['terms'])}, this run has "
            f"{sorted(term_names)}: resume with the same terms, or start a new run from model.init_from=RUN/hf"
        )


def instantiate(cfg: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, but our own input errors surface as themselves, not wrapped."""
    try:
        return hydra.utils.instantiate(cfg, **kwargs)
    except InstantiationException as error:
        if isinstance(error.__cause__, ValueError | FileNotFoundError):
            raise error.__cause__ from None
        raise


def build_strategy(cfg: DictConfig) -> Any:
    if cfg.get("_target_"):
        return instantiate(cfg)
    return cfg.name


def build_trainer(cfg: DictConfig) -> pl.Trainer:
    callbacks = [instantiate(c) for c in (cfg.callbacks or {}).values() if c is not None]
    if not cfg.trainer.get("enable_progress_bar", True):
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    loggers = [instantiate(c) for c in (cfg.logger or {}).values() if c is not None]
    if not loggers:  # logger=none: nothing for a learning-rate monitor to write to
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, strategy=build_strategy(cfg.strategy))


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
