"""Validate a config and build the pieces of a run, failing early with messages that name the value."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
from hydra.errors import InstantiationException
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from omegaconf import DictConfig, OmegaConf

from degen_train.callbacks.plain_progress import PlainProgress
from degen_train.checkpoints import AtomicCheckpointIO, CheckpointError, checkpoint_header, newest_checkpoint
from degen_train.models.architectures import DEFAULT_ARCH
from degen_train.terms import LossTerm, TermContext

log = logging.getLogger("degen_train")

CHECKPOINT_MODEL_KEYS = (
    "family",
    "arch",
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
            decoders, encoders = "model=gpt2_tiny, llama_tiny, qwen2_tiny, ...", "model=tiny, roberta_tiny, ..."
            hint = decoders if term.family == "decoder" else encoders
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


RESUME_CHOICES = ("last", "auto")


def resolve_checkpoint(ckpt_path: str | None, run_dir: Path) -> Path | None:
    """The checkpoint a run starts from.

    ``last``: the newest checkpoint of RUN that verifies (or, lacking a sidecar, loads), an error if none;
    ``auto``: the same, or a fresh start when RUN has none (for requeued cluster jobs); a path: that file;
    null: a fresh run, refused if RUN already holds checkpoints (they would be overwritten).
    """
    folder = run_dir / "checkpoints"
    if ckpt_path in (None, "", "null"):
        existing = sorted(p.name for p in folder.glob("*.ckpt")) if folder.is_dir() else []
        if existing:
            raise FileExistsError(
                f"{run_dir} already holds checkpoints ({', '.join(existing)}): a fresh run would overwrite them. "
                f"Resume it with ckpt_path=last (or auto), or give this run another hydra.run.dir"
            )
        return None
    if ckpt_path in RESUME_CHOICES:
        path, notes = newest_checkpoint(folder)
        for note in notes:
            log.warning("passed over %s", note)
        if path is None:
            if ckpt_path == "auto":
                log.info("ckpt_path=auto: no checkpoint in %s, starting a fresh run", folder)
                return None
            found = sorted(p.name for p in folder.glob("*.ckpt")) if folder.is_dir() else []
            raise FileNotFoundError(
                f"ckpt_path=last but {folder} holds no checkpoint that loads (files there: "
                f"{', '.join(found) or 'none'}); check that hydra.run.dir names the run to continue, or use "
                f"ckpt_path=auto to start afresh when there is none"
            )
        log.info("ckpt_path=%s: resuming from %s", ckpt_path, path)
        return path
    path = Path(ckpt_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"ckpt_path={ckpt_path} does not exist (or use ckpt_path=last / auto)")
    return path


def check_checkpoint_matches(path: Path, cfg: DictConfig, term_names: list[str]) -> dict[str, Any]:
    """Refuse a checkpoint written by another model shape or another set of loss terms; returns it (weights only)."""
    loaded = checkpoint_header(path)
    saved = loaded.get("degen_train")
    if saved is None:
        raise CheckpointError(f"{path} is not a degen_train checkpoint (no 'degen_train' entry)")
    for key in CHECKPOINT_MODEL_KEYS:
        before, now = saved["model"].get(key), cfg.model.get(key)
        if key == "arch" and before is None:  # written before model.arch existed: the family's architecture
            before = DEFAULT_ARCH.get(saved["model"].get("family"))
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
    return loaded


def check_signature(path: Path, saved: dict[str, Any] | None, current: dict[str, Any]) -> None:
    """Refuse a checkpoint whose model shape (vocabulary size, widths, class) differs from the model just built.

    The config keys are checked before any data is read; this catches what only the built model shows,
    e.g. a tokenizer retrained with another vocabulary size.
    """
    if saved is None:
        raise CheckpointError(f"{path} has no model signature: it was not written by degen_train")
    differing = [f"{k}: checkpoint {saved.get(k)!r}, this run {v!r}" for k, v in current.items() if saved.get(k) != v]
    if differing:
        raise ValueError(
            f"checkpoint {path} does not fit this run's model ({'; '.join(differing)}): resume with the run's own "
            f"data and tokenizer settings, or start a new run from its export (model.init_from=RUN/hf)"
        )


def check_tokenizer(path: Path, saved: dict[str, Any], tokenizer: Any) -> None:
    """Refuse to resume with another tokenizer than the checkpoint was trained with (its recorded hash)."""
    from degen_train.data.tokenizer import tokenizer_identity

    recorded = (saved.get("provenance") or {}).get("tokenizer_sha")
    now = tokenizer_identity(tokenizer)
    if recorded and recorded != now:
        raise ValueError(
            f"checkpoint {path} was trained with tokenizer {recorded}, this run has {now} (the same vocabulary size, "
            f"other tokens): resume with the run's own tokenizer (RUN/tokenizer/, or data.tokenizer.path=RUN/tokenizer)"
        )


def instantiate(cfg: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, but our own input errors surface as themselves, not wrapped."""
    try:
        return hydra.utils.instantiate(cfg, **kwargs)
    except InstantiationException as error:
        if isinstance(error.__cause__, ValueError | OSError):
            raise error.__cause__ from None
        raise


def build_strategy(cfg: DictConfig) -> Any:
    if cfg.get("_target_"):
        return instantiate(cfg)
    return cfg.name


def build_trainer(cfg: DictConfig, *, interactive: bool | None = None) -> pl.Trainer:
    """The Trainer with our callbacks, loggers and checkpoint IO.

    ``interactive``: is the output a terminal (default: ask stderr)? If not, the progress bar becomes plain
    log lines every ``trainer.log_every_n_steps`` steps (a bar in a file is carriage returns and escapes).
    """
    callbacks = [instantiate(c) for c in (cfg.callbacks or {}).values() if c is not None]
    bar_wanted = cfg.trainer.get("enable_progress_bar", True) and any(isinstance(c, ProgressBar) for c in callbacks)
    interactive = sys.stderr.isatty() if interactive is None else interactive
    overrides: dict[str, Any] = {}
    if not cfg.trainer.get("enable_progress_bar", True) or not interactive:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
        overrides["enable_progress_bar"] = False
    if bar_wanted and not interactive:
        callbacks.append(PlainProgress(every_n_steps=int(cfg.trainer.get("log_every_n_steps", 10))))
    loggers = [instantiate(c) for c in (cfg.logger or {}).values() if c is not None]
    if not loggers:  # logger=none: nothing for a learning-rate monitor to write to
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    return instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=loggers or False,
        strategy=build_strategy(cfg.strategy),
        plugins=[AtomicCheckpointIO(), *slurm_without_auto_requeue()],  # staged, verified, weights-only checkpoints
        **overrides,
    )


def slurm_without_auto_requeue() -> list[Any]:
    """Under SLURM, Lightning's environment with its auto-requeue off: the Preemption callback owns SIGUSR1.

    Lightning's own requeue writes ``RUN/hpc_ckpt_N.ckpt`` beside the run's verified checkpoints, resumes from it only
    when no ckpt_path is given, and restores it in any later ``validate()`` (the export then held stale weights).
    """
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
