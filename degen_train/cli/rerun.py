"""``degen-train --reproduce RUN [KEY=VALUE ...]``: launch a new run from RUN's recorded config.

The recorded config (RUN/config.yaml, resolved) becomes the primary config of the new run, with the
house's Hydra settings; later overrides still apply. The new run goes to RUN-reproduced unless
hydra.run.dir says otherwise. A different code commit than the record's is warned about, not refused.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from degen_train.cli.paths import config_dir
from degen_train.provenance import code_version

log = logging.getLogger("degen_train")

# Keys that describe where and how the old run was launched, not what it trained.
NOT_REPRODUCED = {"run_dir": "${hydra:runtime.output_dir}", "ckpt_path": None}


def reproduce_argv(run: str, overrides: list[str]) -> list[str]:
    """Hydra arguments that launch RUN's recorded config again (in a fresh run folder)."""
    run_dir = Path(run).expanduser()
    recorded = run_dir / "config.yaml"
    if not recorded.is_file():
        raise SystemExit(f"--reproduce {run}: {recorded} does not exist (is {run} a degen-train run folder?)")
    config = OmegaConf.load(recorded)
    for key, value in NOT_REPRODUCED.items():
        config[key] = value
    primary = OmegaConf.merge({"defaults": [{"hydra": "default"}, "_self_"]}, config)
    primary.hydra = {"searchpath": [f"file://{config_dir()}"]}
    folder = Path(tempfile.mkdtemp(prefix="degen-reproduce-"))
    (folder / "reproduce.yaml").write_text(OmegaConf.to_yaml(primary))
    _warn_if_code_differs(run_dir)
    if not any(o.startswith("hydra.run.dir=") for o in overrides):
        overrides = [*overrides, f"hydra.run.dir={run_dir.resolve()}-reproduced"]
    return ["--config-path", str(folder), "--config-name", "reproduce", *overrides]


def _warn_if_code_differs(run_dir: Path) -> None:
    summary = run_dir / "summary.json"
    if not summary.is_file():
        return
    then = json.loads(summary.read_text()).get("provenance", {}).get("code", {})
    now = code_version()
    if then.get("git_sha") and then.get("git_sha") != now.get("git_sha"):
        log.warning(
            "RUN was trained by commit %s, this code is %s: results may differ", then["git_sha"], now["git_sha"]
        )
    if then.get("dirty"):
        log.warning("RUN was trained from a work tree with uncommitted changes: its exact code is not recorded")
