"""Compose the training config from Python (tests, notebooks) exactly as the CLI does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from degen_train.config.inherited import inherited_overrides
from degen_train.config.overrides import open_trainer_keys
from degen_train.core.paths import config_dir


def load_config(overrides: Sequence[str] = (), *, run_dir: str | Path | None = None) -> DictConfig:
    """The resolved-on-access config for ``overrides`` (CLI syntax), with ``run_dir`` set."""
    overrides = inherited_overrides(list(overrides))  # a branch: its parent's overrides first (branching.py)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=open_trainer_keys(overrides), return_hydra_config=True)
    # Register the hydra node (group choices, ${hydra:...}) as the CLI would, then drop it from cfg.
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
        if run_dir is not None:
            cfg.run_dir = str(run_dir)
    return cfg
