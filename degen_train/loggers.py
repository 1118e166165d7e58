"""Logger factories that are safe offline."""

from __future__ import annotations

import netrc
import os
from typing import Any

from lightning.pytorch.loggers import WandbLogger

WANDB_MODES = ("auto", "online", "offline", "disabled")


def wandb_has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc().authenticators("api.wandb.ai")
    except (FileNotFoundError, netrc.NetrcParseError):
        return False
    return auth is not None


def wandb_logger(
    *, mode: str = "auto", save_dir: str, project: str, group: str | None = None, name: str | None = None, **kwargs: Any
) -> WandbLogger:
    """A WandbLogger that never prompts: mode=auto is online only with credentials, else offline."""
    if mode not in WANDB_MODES:
        raise ValueError(f"logger.wandb.mode={mode!r} is not one of {', '.join(WANDB_MODES)}")
    if mode == "auto":
        mode = os.environ.get("WANDB_MODE") or ("online" if wandb_has_credentials() else "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_CONSOLE", "off")
    return WandbLogger(
        project=project, group=group, name=name, save_dir=save_dir, mode=mode, anonymous="never", **kwargs
    )
