"""The role of a dotted key or a config group's choice, read from the typed sections' fields that declare them
(core/roles.py says what the roles are). No list of keys is kept here: a field added to a section brings its role.

A key is looked up by walking the sections: a field that is a section goes on into it; a mapping of sections (the
loss terms: ``objective.NAME.OPTION``) passes the name by; a field that is a value declares the role of everything
below it (``logger.wandb.project`` is ``logger``'s); a key a section does not declare takes the role the
section's ``other_key_role`` gives (a term's options: the one the term's own file declares), else none (refused by
every door); a ``_target_`` or ``_partial_`` anywhere has the role every section Hydra builds declares for it
(section.Instantiated).
"""

from __future__ import annotations

import functools
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from degen_train.config.house_keys import house_keys, schema_fields
from degen_train.config.schema import TrainConfig
from degen_train.core.roles import Declared, GroupRole, Role
from degen_train.core.section import Instantiated


def declared_in(info: FieldInfo, kind: type = Declared) -> Any:
    """The ``kind`` (a Declared, a GroupRole) a field's annotation carries, or None."""
    return next((m for m in info.metadata if isinstance(m, kind)), None)


def section_in(annotation: Any) -> type[BaseModel] | None:
    """The section an annotation is (or is Optional of), else None."""
    candidates = [annotation, *get_args(annotation)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def sections_by_name_in(annotation: Any) -> type[BaseModel] | None:
    """The section of a mapping of named sections (``dict[str, TermSection]``, or Optional of one), else None."""
    for candidate in [annotation, *get_args(annotation)]:
        if get_origin(candidate) is dict:
            return section_in(get_args(candidate)[1])
    return None


def fields_by_key(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A section's fields by the key a config gives them (``_target_`` for the field aliased so)."""
    return {info.alias or name: info for name, info in model.model_fields.items()}


@functools.cache
def role_of(key: str) -> Declared | None:
    """The role declared for the dotted ``key`` (a list's items as ``KEY[]``: the list's), or None."""
    if key.endswith("[]"):
        return role_of(key[:-2])
    declared = _declared_at(key)
    last = key.rsplit(".", 1)[-1]
    built = fields_by_key(Instantiated)
    if declared is None and last in built:  # a _target_ anywhere names code, as every section Hydra builds declares
        return declared_in(built[last])
    return declared


def _declared_at(key: str) -> Declared | None:
    return _walk(key)[0]


def section_at(key: str) -> type[BaseModel] | None:
    """The typed section the dotted ``key`` names (``callbacks.checkpoint``: CheckpointCallbackConfig), or None."""
    return _walk(key)[1]


def _walk(key: str) -> tuple[Declared | None, type[BaseModel] | None]:
    """The role declared at ``key`` and the section it names (None where it names a value, or nothing)."""
    model: type[BaseModel] = TrainConfig
    parts = key.split(".")
    index = 0
    while index < len(parts):
        info = fields_by_key(model).get(parts[index])
        if info is None:  # a key the section does not list: its role by the section's own rule, where it has one
            other = getattr(model, "other_key_role", None)
            return (other(parts[index]) if other is not None else None), None
        declared = declared_in(info)
        inner, named = section_in(info.annotation), sections_by_name_in(info.annotation)
        if index == len(parts) - 1:
            return declared, inner
        if named is not None:  # objective.NAME.OPTION: the name passed by
            model, index = named, index + 2
            if index == len(parts):  # objective.NAME itself: a term's section
                return declared, named
            continue
        if inner is not None:
            model, index = inner, index + 1
            continue
        return declared, None  # a value's role covers what lies below it (logger.wandb.project)
    return None, None


def house_targets(key: str) -> tuple[str, ...]:
    """What the house builds at ``key`` (a ``..._target_``): what its section declares (section.Instantiated)."""
    section = section_at(key.removesuffix("_target_").removesuffix("."))
    return section.builds if section is not None and issubclass(section, Instantiated) else ()


def group_role(group: str) -> Declared | None:
    """The role of a config group's choice (``model/family`` is the model's; ``hydra/job_logging`` Hydra's)."""
    top = group.split("/")[0]
    info = TrainConfig.model_fields.get(top)
    found = declared_in(info, GroupRole) if info is not None else None
    return found.declared if found is not None else TrainConfig.GLOBAL_GROUPS.get(top)


def inputs_named(tree: Any, prefix: str = "") -> list[str]:
    """'KEY=VALUE' for every setting of ``tree`` (a resolved config) whose role is an input and that names one (not
    null, not empty): what a run with this config reads besides this package."""
    found: list[str] = []
    items = tree.items() if isinstance(tree, dict) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        declared = role_of(path)
        if declared is not None and declared.role == Role.INPUT and value not in (None, "", [], {}):
            found.append(f"{path}={value}")
        elif isinstance(value, dict):
            found.extend(inputs_named(value, path))
    return found


def declared_keys() -> list[str]:
    """Every setting the house names: each field of the schema and every key of conf/ that is not a section."""
    keys = house_keys()
    return sorted(k for k in set(keys) | set(schema_fields()) if not (k in keys and keys[k].kinds == {"dict"}))


def role_counts() -> dict[Role, int]:
    """How many settings declare each role (docs/runs.md's table)."""
    counts = dict.fromkeys(Role, 0)
    for key in declared_keys():
        declared = role_of(key)
        if declared is not None:
            counts[declared.role] += 1
    return counts
