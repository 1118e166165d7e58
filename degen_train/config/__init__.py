"""Compose the training config from Python (tests, notebooks) exactly as the CLI does."""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from degen_train.config.inherited import inherited_overrides
from degen_train.config.overrides import open_trainer_keys
from degen_train.core.package_dir import config_dir


def load_config(overrides: Sequence[str] = (), *, run_dir: str | Path | None = None) -> DictConfig:
    """The resolved-on-access config for ``overrides`` (CLI syntax), with ``run_dir`` set."""
    overrides = inherited_overrides(list(overrides))  # a branch: its parent's overrides first (branching.py)
    cfg = copy.deepcopy(_composed(tuple(open_trainer_keys(overrides))))
    # Register the hydra node (group choices, ${hydra:...}) as the CLI would, then drop it from cfg.
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
        if run_dir is not None:
            cfg.run_dir = str(run_dir)
    return cfg


@functools.lru_cache(maxsize=256)
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    """Hydra's composition of conf/ with ``overrides``: a function of those alone (interpolations resolve on access),
    so a process that composes the same overrides again (a sweep in a notebook, the test suite) composes once; callers
    get a copy."""
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)
