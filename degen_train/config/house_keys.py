"""The house's own settings: every key its yaml (conf/) or its typed schema names, with the types and values found
there. The allow-list a handed-over file is read through (handed_over.py) is built from this and the sections' own
declarations (a ``_target_``'s: its section's ``builds``), so a setting added to conf/ or to the schema is allowed
without editing a list by hand."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from degen_train.core.package_dir import config_dir

PACKAGE_LINE = re.compile(r"^#\s*@package\s+(\S+)")
# conf/ files that are not part of a training config: another application's config (degen-reproduce's, and its
# presets in conf/reproduce/), and Hydra's own settings.
NOT_TRAINING = ("reproduce.yaml", "reproduce", "hydra")
# conf/ files at the top that a defaults list places under a package of their own (train.yaml: finetune@eval.finetune)
TOP_PACKAGES = {"train.yaml": "", "finetune.yaml": "eval.finetune"}


@dataclass
class HouseKey:
    """What the house's yaml holds at one key: the kinds of value (bool, int, float, str, none, list, dict) and the
    plain values it gives there (at a ``_target_`` key: the names it builds there)."""

    kinds: set[str] = field(default_factory=set)
    values: set[Any] = field(default_factory=set)


def kind_of(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    for kind, types in (("int", int), ("float", float), ("str", str), ("list", list | tuple), ("dict", dict)):
        if isinstance(value, types):
            return kind
    return type(value).__name__


def yaml_files(root: Path) -> list[Path]:
    """Every yaml under ``root``, through linked folders too (conf/recipe is a link to recipes/ in a checkout)."""
    found = []
    for folder, _, names in os.walk(root, followlinks=True):
        found += [Path(folder) / name for name in names if name.endswith(".yaml")]
    return sorted(found)


@functools.cache
def house_files() -> tuple[tuple[str, dict[str, Any]], ...]:
    """(package, content) of every yaml of conf/ that a training config is composed from, ``defaults`` left out."""
    files = []
    root = config_dir()
    for path in yaml_files(root):
        relative = path.relative_to(root)
        if relative.parts[0] in NOT_TRAINING:
            continue
        tree = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
        tree.pop("defaults", None)
        files.append((_package_of(path, relative), tree))
    return tuple(files)


@functools.cache
def house_keys() -> dict[str, HouseKey]:
    """{dotted key: HouseKey} over every yaml of conf/ at the package its defaults list places it in (a list's items
    under ``KEY[]``)."""
    keys: dict[str, HouseKey] = {}
    for package, tree in house_files():
        _collect(tree, package, keys)
    return keys


def _package_of(path: Path, relative: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines()[:5]:
        found = PACKAGE_LINE.match(line)
        if found:
            return "" if found.group(1) == "_global_" else found.group(1)
    if len(relative.parts) == 1:
        return TOP_PACKAGES.get(relative.name, relative.stem)
    return relative.parts[0]  # a group's file, nested ones (model/family/encoder: model@_here_) included


def _collect(tree: Any, prefix: str, keys: dict[str, HouseKey]) -> None:
    if isinstance(tree, dict):
        if prefix:
            keys.setdefault(prefix, HouseKey()).kinds.add("dict")
        for key, value in tree.items():
            _collect(value, f"{prefix}.{key}" if prefix else str(key), keys)
        return
    entry = keys.setdefault(prefix, HouseKey())
    entry.kinds.add(kind_of(tree))
    if kind_of(tree) in ("none", "bool", "int", "float", "str"):
        entry.values.add(tree)
    if isinstance(tree, list):
        for item in tree:
            _collect(item, f"{prefix}[]", keys)


def house_default(key: str) -> Any:
    """The value ``key`` takes in the house's own config with no override (train.yaml and its default choices, as
    written: an interpolation stays one); None where it has none (a profiler, a second logger: off)."""
    node: Any = _default_config()
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


@functools.cache
def _default_config() -> dict[str, Any]:
    """train.yaml composed with no override, by Hydra, beside any Hydra app this process runs (its state is kept)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            composed = compose(config_name="train")
    finally:
        restore_gh_from_backup(backup)
    return OmegaConf.to_container(composed, resolve=False)


def house_value(key: str) -> Any:
    """The value the house's yaml gives ``key`` where one file alone sets it (an output location such as
    ``callbacks.checkpoint.dirpath``); None where none or several do."""
    found = []
    for package, tree in house_files():
        parts = key.split(".")
        if package:
            prefix = package.split(".")
            if parts[: len(prefix)] != prefix:
                continue
            parts = parts[len(prefix) :]
        node: Any = tree
        for part in parts:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            found.append(node)
    return found[0] if len({repr(v) for v in found}) == 1 else None


@functools.cache
def house_groups() -> dict[str, frozenset[str]]:
    """{config group: its options}, e.g. {"recipe": {"tacl", ...}, "model/family": {"encoder", "decoder"}}."""
    root = config_dir()
    groups: dict[str, set[str]] = {}
    for path in yaml_files(root):
        relative = path.relative_to(root)
        if len(relative.parts) > 1 and relative.parts[0] != "reproduce":  # degen-reproduce's presets, not a run's
            groups.setdefault("/".join(relative.parts[:-1]), set()).add(path.stem)
    return {group: frozenset(options) for group, options in groups.items()}


@functools.cache
def schema_fields() -> dict[str, Any]:
    """{dotted key: FieldInfo} of every field of the typed schema (config/schema.py and the sections it composes),
    sections left out, a mapping of named sections (the loss terms) kept whole: the value a key may hold, as the
    run's own check reads it."""
    from pydantic import BaseModel

    from degen_train.config.schema import TrainConfig

    fields: dict[str, Any] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            key = f"{prefix}.{info.alias or name}" if prefix else info.alias or name
            section = _model_in(info.annotation)
            if section is not None:
                walk(section, key)
            else:
                fields[key] = info

    walk(TrainConfig, "")
    return fields


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation is (or is Optional of), else None (a mapping of them included)."""
    from typing import get_args

    from pydantic import BaseModel

    candidates = [annotation, *get_args(annotation)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
