"""``degen-train --reproduce RUN [KEY=VALUE ...]``: launch a new run from RUN's recorded config.

The recorded config (RUN/config.yaml, resolved) becomes the primary config of the new run, with the
house's Hydra settings; later overrides still apply. The new run goes to RUN-reproduced unless
hydra.run.dir says otherwise. A different code commit than the record's is warned about, not refused.

A run folder may come from someone else, so its config is data, not code: it may only name the ``_target_``s
the house's own yaml names (read from conf/, never typed here), and every path it recorded inside RUN is
rebuilt inside the new run folder, so the reproduction never writes into RUN.
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from degen_train.paths import config_dir
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
    for key, target in foreign_targets(OmegaConf.to_container(config)):
        raise SystemExit(
            f"--reproduce {run}: {recorded} names _target_ {target!r} at {key}, which degen-train's own configs never "
            f"name; a run folder's config may only build the {len(house_targets())} targets of conf/ (so a handed-over "
            f"folder runs no code). If you wrote that config yourself, launch it with its overrides "
            f"(RUN/overrides.json)"
        )
    config = OmegaConf.create(rebased(OmegaConf.to_container(config), str(config.get("run_dir", run_dir))))
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


@functools.cache
def house_targets() -> frozenset[str]:
    """Every ``_target_`` that the house's own yaml (conf/ and its recipes) names: what a recorded config may build."""
    targets: set[str] = set()
    for path in config_dir().rglob("*.yaml"):
        targets.update(value for _, value in _targets(OmegaConf.to_container(OmegaConf.load(path)), ""))
    return frozenset(targets)


def foreign_targets(tree: Any) -> list[tuple[str, str]]:
    """(key path, target) of every ``_target_`` in ``tree`` that the house's yaml does not name."""
    allowed = house_targets()
    return [(key, value) for key, value in _targets(tree, "") if value not in allowed]


def _targets(tree: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        if key == "_target_":
            yield path, value
        else:
            yield from _targets(value, path)


def rebased(tree: Any, old_run_dir: str) -> Any:
    """``tree`` with every string that is, or lies inside, ``old_run_dir`` rewritten onto ``${run_dir}``."""
    if isinstance(tree, dict):
        return {key: rebased(value, old_run_dir) for key, value in tree.items()}
    if isinstance(tree, list):
        return [rebased(value, old_run_dir) for value in tree]
    old = old_run_dir.rstrip("/")
    if isinstance(tree, str) and old and (tree == old or tree.startswith(old + "/")):
        return "${run_dir}" + tree[len(old) :]
    return tree


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
