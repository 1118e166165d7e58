"""Push a run's hf/ export to the Hugging Face Hub (online users), with a dry run that uploads nothing."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("degen_train")


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def check_push(cfg: Any) -> None:
    """Before training: a push needs a network unless it is a dry run (run/sections.PushToHubConfig checks the keys)."""
    if not cfg.repo_id:
        return
    if hub_offline() and not cfg.dry_run:
        raise ValueError(
            f"push_to_hub.repo_id={cfg.repo_id} but HF_HUB_OFFLINE=1: go online, or set push_to_hub.dry_run=true "
            f"to see what would be uploaded"
        )


def push_export(folder: Path, cfg: Any) -> dict[str, Any]:
    """Upload ``folder`` to ``cfg.repo_id`` (created if missing); a dry run lists what would go, and stops there."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    plan = {
        "repo_id": str(cfg.repo_id),
        "private": bool(cfg.private),
        "files": [str(p.relative_to(folder)) for p in files],
        "bytes": sum(p.stat().st_size for p in files),
        "dry_run": bool(cfg.dry_run),
    }
    if plan["dry_run"]:
        log.info("push_to_hub dry run: would upload %d files (%d bytes) to %s", len(files), plan["bytes"], cfg.repo_id)
        return plan
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(str(cfg.repo_id), private=plan["private"], exist_ok=True)
    commit = api.upload_folder(folder_path=str(folder), repo_id=str(cfg.repo_id), commit_message=cfg.message)
    plan["url"] = str(getattr(commit, "commit_url", commit))
    log.info("pushed %s to %s", folder, plan["url"])
    return plan
