"""``degen-train --reproduce RUN [KEY=VALUE ...]``: launch a new run from RUN's recorded config.

The recorded config (RUN/config.yaml, resolved) becomes the primary config of the new run, with the
house's Hydra settings; later overrides still apply. The new run goes to RUN-reproduced unless
hydra.run.dir says otherwise. A different code commit than the record's is warned about, not refused.

A run folder may come from someone else, so its config is data, not code:
- it may only name the ``_target_``s the house's own yaml names (read from conf/, never typed here);
- it holds no interpolation (``${...}``: it was resolved when it was written; one now would read this user's
  environment or files), and its ``hydra`` and ``defaults`` sections are dropped, saying so;
- every output location is the new run folder's (checkpoints, logs, profiles, the Trainer's root; a logger's
  folder and name), whatever the record says; the data cache is this user's own (``data.cache_dir``'s default);
  ``push_to_hub`` is dropped, saying so (an upload is this user's decision, not the record's);
- the inputs it reads (corpora, tokenizer, teacher, starting weights, probe files) are printed before any work.
So the reproduction writes nowhere but its own folder and this user's cache.
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

from degen_train.core.paths import config_dir, writable_folder
from degen_train.run.provenance import code_version

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
    for key, value in interpolations(OmegaConf.to_container(config, resolve=False)):
        raise SystemExit(
            f"--reproduce {run}: {recorded} holds the interpolation {value!r} at {key}; a recorded config is written "
            f"resolved, so this one was edited, and an interpolation here would read this machine's environment or "
            f"files. Replace it by the value it stood for"
        )
    for key, target in foreign_targets(OmegaConf.to_container(config)):
        raise SystemExit(
            f"--reproduce {run}: {recorded} names _target_ {target!r} at {key}, which degen-train's own configs never "
            f"name; a run folder's config may only build the {len(house_targets())} targets of conf/ (so a handed-over "
            f"folder runs no code). If you wrote that config yourself, launch it with its overrides "
            f"(RUN/overrides.json)"
        )
    tree = OmegaConf.to_container(config)
    for line in dropped_sections(tree):
        log.warning("--reproduce %s: %s", run, line)
    tree = rebased(tree, str(tree.get("run_dir", run_dir)))
    for line in own_outputs(tree):
        log.warning("--reproduce %s: %s", run, line)
    config = OmegaConf.create(tree)
    for key, value in NOT_REPRODUCED.items():
        config[key] = value
    inputs = recorded_inputs(tree)
    print(f"degen-train --reproduce {run}: the recorded config reads " + ("; ".join(inputs) if inputs else
          "nothing outside this package (the builtin corpus)"), flush=True)  # fmt: skip
    primary = OmegaConf.merge({"defaults": [{"hydra": "default"}, "_self_"]}, config)
    primary.hydra = {"searchpath": [f"file://{config_dir()}"]}
    folder = Path(tempfile.mkdtemp(prefix="degen-reproduce-"))
    (folder / "reproduce.yaml").write_text(OmegaConf.to_yaml(primary))
    _warn_if_code_differs(run_dir)
    if not any(o.startswith("hydra.run.dir=") for o in overrides):
        default = Path(f"{run_dir.resolve()}-reproduced")
        try:
            writable_folder(default.parent, "hydra.run.dir")
        except ValueError as error:
            raise SystemExit(f"--reproduce {run}: the reproduction goes beside it, to {default}, but {error}") from None
        overrides = [*overrides, f"hydra.run.dir={default}"]
    return ["--config-path", str(folder), "--config-name", "reproduce", *overrides]


# The sections of a record that say how and where it was launched or published, never what it trained.
DROPPED = {"hydra": "its Hydra settings", "defaults": "its defaults list"}
# Output locations: set to the new run folder's, whatever the record says (house values, conf/).
OUTPUTS = {
    ("trainer", "default_root_dir"): "${run_dir}",
    ("callbacks", "checkpoint", "dirpath"): "${run_dir}/checkpoints",
}
OUTPUT_NAMES = ("dirpath", "save_dir", "default_root_dir", "log_dir", "output_dir", "root_dir")  # anywhere else


def interpolations(tree: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(key path, value) of every string holding an interpolation ``${...}``."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, str) and "${" in value:
            yield path, value
        else:
            yield from interpolations(value, path)


def dropped_sections(tree: dict[str, Any]) -> list[str]:
    """Remove what a record may not decide (its Hydra settings, defaults list, hub upload); one line for each."""
    said = []
    for key, what in DROPPED.items():
        if tree.pop(key, None) is not None:
            said.append(f"{what} ({key}:) dropped: this run uses the house's")
    push = tree.get("push_to_hub") or {}
    if push.get("repo_id"):
        said.append(f"push_to_hub.repo_id={push['repo_id']} dropped: a reproduction uploads nothing unless you "
                    f"give push_to_hub.repo_id yourself")  # fmt: skip
    tree["push_to_hub"] = {**push, "repo_id": None}
    return said


def own_outputs(tree: dict[str, Any]) -> list[str]:
    """Point every output location at the new run folder and the cache at this user's default; one line for each
    the record had elsewhere."""
    said = []
    for path, value in OUTPUTS.items():
        node = tree
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(path[-1]) not in (None, value):
            said.append(f"{'.'.join(path)}={node[path[-1]]} replaced by {value}")
            node[path[-1]] = value
    for section in ("trainer", "callbacks", "logger"):
        for key, old in _named(tree.get(section), OUTPUT_NAMES, section):
            said.append(f"{key}={old} replaced by the new run folder")
    loggers = tree.get("logger") or {}
    for name, logger in loggers.items():
        if isinstance(logger, dict):
            for key in ("name", "version"):  # joined under save_dir: a record's '../..' would leave the folder
                if isinstance(logger.get(key), str) and ("/" in logger[key] or ".." in logger[key]):
                    said.append(f"logger.{name}.{key}={logger[key]} replaced by {name!r}")
                    logger[key] = name if key == "name" else ""
    data = tree.get("data")
    if isinstance(data, dict) and "cache_dir" in data:
        data["cache_dir"] = house_cache_dir()
    return said


def _named(tree: Any, names: tuple[str, ...], prefix: str) -> Iterator[tuple[str, str]]:
    """Set each key of ``names`` under ``tree`` that is not already in the run folder to it; yield what it was."""
    if not isinstance(tree, dict):
        return
    for key, value in tree.items():
        path = f"{prefix}.{key}"
        if key in names and isinstance(value, str) and not value.startswith("${run_dir}"):
            checkpoints = key == "dirpath" and prefix.startswith("callbacks")
            tree[key] = "${run_dir}/checkpoints" if checkpoints else "${run_dir}"
            yield path, value
        else:
            yield from _named(value, names, path)


@functools.cache
def house_cache_dir() -> str:
    """data.cache_dir as the house's yaml sets it (this user's DEGEN_TRAIN_CACHE, else ~/.cache/degen_train)."""
    return str(OmegaConf.load(config_dir() / "data" / "builtin.yaml")["cache_dir"])


INPUT_KEYS = ("path", "validation_path", "name", "init_from", "teacher", "start", "sts", "wic", "wic_fit", "w8a8",
              "glue_dir", "branch_from")  # fmt: skip


def recorded_inputs(tree: Any, prefix: str = "") -> list[str]:
    """'KEY=VALUE' for every input the record names (a corpus, a tokenizer, a teacher, probe files, a parent run)."""
    found: list[str] = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        wanted = key in INPUT_KEYS and (key != "name" or path.startswith("data"))  # data.name: a hub dataset
        if wanted and value not in (None, "", []):
            found.append(f"{path}={value}")
        elif isinstance(value, dict | list):
            found.extend(recorded_inputs(value, path))
    return found


@functools.cache
def house_targets() -> frozenset[str]:
    """Every ``_target_`` that the house's own yaml (conf/ and its recipes) names: what a recorded config may build."""
    from degen_train import MOVED

    targets: set[str] = set()
    for path in config_dir().rglob("*.yaml"):
        targets.update(value for _, value in _targets(OmegaConf.to_container(OmegaConf.load(path)), ""))
    # A run recorded before the package layout names the same targets under the modules' old names.
    renamed = {f"degen_train.{new}.": f"degen_train.{old}." for old, new in MOVED.items()}
    for target in list(targets):
        for new, old in renamed.items():
            if target.startswith(new):
                targets.add(old + target[len(new):])
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
