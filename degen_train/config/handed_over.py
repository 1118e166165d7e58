"""The one reader of settings from a handed-over folder: a branch's parent (RUN/overrides.json), a record given to
``--reproduce`` (RUN/config.yaml), a run or sweep folder given to degen-report, degen-analyze or degen-finetune.

Such a file is data, and every rule this reader applies comes from the role each setting declares where it is defined
(core/roles.py; the schema's fields carry theirs): what the run trains or measures and how it is shown are carried,
as checked values; where it writes and how it is launched are left out (this run decides them, said in one line); an
input or code is carried only at the house's own value, else refused in one line naming the file, the entry and the
command-line form (unless the user's command line gives that key); a protection only when it is no looser than the
house's. This module keeps no list of keys of its own: a setting added to the schema or conf/ brings its role.

The file is read through the typed sections themselves: ``TrainConfig`` is validated with this reader in pydantic's
context, and each section (core/section.Section) hands its own keys here as pydantic reaches it, each judged by the
role its own field declares; the values kept are then validated by that section (types, ranges, field validators).
A recorded override is read as the one-key tree it stands for.

Besides: a key the house does not have is refused, naming the file; a value must have the type and range of the field
that declares it (its section's, pydantic), a loss term's option those its term's own file declares (as the command
line checks it); a ``_target_`` may only name what its section declares the house builds there (``builds``); no
interpolation (``${...}``) is read; a group choice must name one of the group's files in conf/. Nothing read here is
handed to Hydra as text from the file: overrides are parsed with Hydra's own parser, checked as typed values and
written out again by ``Setting.override``.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from degen_train.config.house_keys import house_default, house_groups, house_keys, kind_of, schema_fields
from degen_train.config.renamed import current_target
from degen_train.config.role_lookup import (
    declared_in,
    fields_by_key,
    group_role,
    house_targets,
    role_of,
    section_in,
    sections_by_name_in,
)
from degen_train.core.handed_files import (
    CONTROL,
    LYING,
    HandedOverFileError,
    check_bounded,
    check_text_bounded,
    json_record,
    plain_file_text,
    printable,
)
from degen_train.core.roles import MEANING, Declared, Role
from degen_train.core.section import READER, Instantiated

TERM_OPTION = re.compile(r"^(objective|regularizer)\.(\w+)\.(\w+)$")
CHOICE = re.compile(r"^[\w.-]+$")
LEFT_OUT = (Role.OUTPUT, Role.LAUNCH)
THE_USERS_OWN = (Role.INPUT, Role.CODE)


class HandedOverError(HandedOverFileError):
    """A handed-over file holds a setting the house does not allow; the message names the file, key and value (its
    control characters shown escaped: a quoted value cannot forge a line on the terminal)."""


@dataclass(frozen=True)
class Setting:
    """One setting read from a file: a value at a key, a group's choice, or a key deleted (``~key``)."""

    key: str
    value: Any = None
    kind: str = "value"  # value | choice | delete
    prefix: str = ""  # Hydra's "", "+" (add) or "++" (add or override)

    def override(self) -> str:
        """The setting as a Hydra override, written from its checked value (never the file's text)."""
        if self.kind == "delete":
            return f"~{self.key}"
        if self.kind == "choice":  # names of conf/ files, checked against CHOICE
            names = self.value if isinstance(self.value, list) else [self.value]
            shown = f"[{','.join(names)}]" if isinstance(self.value, list) else names[0]
            return f"{self.prefix}{self.key}={shown}"
        return f"{self.prefix}{self.key}={hydra_literal(self.value)}"


@dataclass(frozen=True)
class Door:
    """Who reads the file and what they allow: ``given`` the keys the user's own command line sets (a handed-over
    input or code at one of them, or below it, is left out: the user's wins); ``inherit`` key prefixes whose inputs
    are carried and named (a branch: its parent's own data); ``trusted`` every input and protection carried as the user
    gave it (a run this user trained here, listed in their own runs); ``runs`` a run is built from the file
    (protections are held; a door that only
    reads keeps the inputs aside in ``Reading.inputs``); ``advice`` said after every refusal."""

    given: Mapping[str, Any] | Collection[str] = ()
    inherit: tuple[str, ...] = ()
    trusted: bool = False
    runs: bool = True
    advice: str = ""

    def gives(self, key: str) -> bool:
        """The user's command line sets ``key`` or a section above it (a group choice included): an input or code
        there is theirs."""
        parts = key.split(".")
        return any(".".join(parts[:n]) in self.given for n in range(1, len(parts) + 1))

    def sets_value(self, key: str) -> bool:
        """The user's command line sets ``key``'s value itself, or a section above it by value; a group choice
        (``trainer=cpu``, ``callbacks=default``) brings that group's yaml and sets no value below it, so a
        handed-over protection there is judged by its role as if the group were not chosen (issue 72.1)."""
        parts = key.split(".")
        prefixes = [".".join(parts[:n]) for n in range(1, len(parts) + 1)]
        return any(prefix in self.given and not _is_group(prefix) for prefix in prefixes)


def _is_group(key: str) -> bool:
    """Whether ``key`` names a config group (a folder of conf/: trainer, callbacks, data, ...)."""
    from degen_train.core.package_dir import config_dir

    return (config_dir() / key.replace(".", "/")).is_dir()


@dataclass
class Reading:
    """What a door read from one file: the settings kept, the keys left out (this run decides those), the inputs
    carried because the door inherits them, and (a door that only reads) the inputs the file names."""

    source: Path
    settings: list[Setting] = field(default_factory=list)
    tree: dict[str, Any] = field(default_factory=dict)
    left_out: dict[str, Any] = field(default_factory=dict)  # {key: the value the file gave it}
    inherited: dict[str, Any] = field(default_factory=dict)  # inputs carried by the door's leave ({key: value})
    inputs: dict[str, Any] = field(default_factory=dict)  # a reading door: inputs named, never carried

    @property
    def dropped(self) -> list[str]:
        return list(self.left_out)

    def dropped_line(self) -> str | None:
        """One line naming every key left out with the value the file gave it (where it is not the house's own), or
        None."""
        differ = {key: value for key, value in self.left_out.items() if value != house_default(key)}
        if not differ:
            return None
        shown = printable(", ".join(_shown(key, value) for key, value in differ.items()))
        return (f"{self.source}: not read, this run decides them (where it writes, logs and uploads, how it is "
                f"launched, and what your command line gives): {shown}")  # fmt: skip


def read_overrides_file(path: Path, *, door: Door | None = None) -> Reading:
    """A run's recorded command-line overrides (RUN/overrides.json: a list of strings), each parsed by Hydra's parser
    and checked as data by the role of its key (module docstring)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    door = door or Door()
    path = Path(path)
    reading = Reading(path)
    try:
        entries = json_record(path, what="list of overrides")
    except HandedOverFileError as error:
        raise HandedOverError(f"{error}{door.advice}") from None
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise HandedOverError(f"{path} is not a JSON list of override strings, as degen-train writes it")
    parser = OverridesParser.create()
    for text in entries:
        try:
            check_text_bounded(path, text, what="override")  # before Hydra's parser, which takes seconds to refuse
            override = parser.parse_overrides([text])[0]
        except HandedOverFileError as error:
            raise HandedOverError(f"{error}{door.advice}") from None
        except (HydraException, RecursionError) as error:
            why = str(error).splitlines()[0] if isinstance(error, HydraException) else "nested too deep"
            raise HandedOverError(f"{path}: {text[:200]!r} is not an override ({why[:200]}){door.advice}") from None
        if override.package is not None or override.is_sweep_override():
            raise HandedOverError(f"{path}: {text!r}: a package or a sweep is not a setting of one run{door.advice}")
        prefix = {"ADD": "+", "FORCE_ADD": "++"}.get(override.type.name, "")
        key = override.key_or_group
        if override.type.name == "DEL":
            _read_deletion(reading, door, key, text)
        elif "/" in key or key in house_groups():
            _read_choice(reading, door, key, override.value(), prefix, text)
            continue
        if override.type.name == "DEL":
            continue
        kept = _kept_at(_Reader(reading, door).read(_nested(key, override.value())), key)
        if kept is not _LEFT_OUT:
            reading.settings.append(Setting(key, kept, "value", prefix))
    return reading


def recorded_override_texts(path: Path) -> list[str]:
    """A run's recorded overrides as text to show (a report's column, a figure's title), never to run: [] when the
    file is absent; a file that is not a JSON list of strings (or a link, FIFO, device, or too large) raises
    HandedOverFileError naming it."""
    path = Path(path)
    if not os.path.lexists(path):
        return []
    entries = json_record(path, what="list of overrides")
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise HandedOverFileError(f"{path} is not a JSON list of override strings, as degen-train writes it")
    return entries


def read_config_file(path: Path, *, door: Door | None = None) -> Reading:
    """A run's recorded config (RUN/config.yaml, written resolved), every key checked as data by its role; ``tree``
    holds what was kept, without the keys left out (``with_house_outputs`` puts the house's own values there)."""
    import yaml

    door = door or Door()
    path = Path(path)
    try:
        text = plain_file_text(path, what="config")
        check_text_bounded(path, text, what="config")  # before the YAML parser
        tree = yaml.safe_load(text)
        check_bounded(path, tree, what="config")
    except HandedOverFileError as error:
        raise HandedOverError(f"{error}{door.advice}") from None
    except RecursionError:
        raise HandedOverError(f"{path}: nested deeper than any config degen-train writes; it was not read") from None
    except yaml.YAMLError as error:
        raise HandedOverError(f"{path} is not a readable YAML config ({str(error).splitlines()[0]})") from None
    if not isinstance(tree, dict):
        raise HandedOverError(f"{path} is not a config (a mapping of settings), as degen-train writes it")
    reading = Reading(path)
    reading.tree = _Reader(reading, door).read(tree)
    return reading


def with_house_outputs(tree: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """``tree`` with every setting left out put back at the house's own value for that key (the new run's folder:
    ``${run_dir}/checkpoints``, ``${run_dir}/profile``, ...): what train.yaml composes to with no override, null where
    it has none (a profiler: off; an input the user's command line gives then)."""
    for key in dropped:
        if key.startswith("~") or "/" in key or key.split(".")[0] in ("hydra", "defaults"):
            continue
        value = house_default(key)
        node = tree
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node.get(part), dict | None) else {}
        node[last] = value
    return tree


_LEFT_OUT = object()  # what a door's judgement of one setting returns where the door leaves it out


class _Nested(dict):
    """The levels a recorded override's dotted key stands for (``trainer.max_steps=5``: {trainer: {max_steps: 5}}):
    an override is read through the same sections as a config file, not checked as a section of its own."""


@dataclass(frozen=True)
class _At:
    """A section's value with the dotted key it sits at and its place in the file (the index of each key on the way
    down): how a section validated by pydantic knows where it is."""

    key: str
    value: Any
    place: tuple[int, ...] = ()


class _Reader:
    """The door's judgement of one file's settings, section by section as pydantic validates them: each section
    (core/section.Section) hands its own keys here, each judged by the role its field declares; the values kept are
    then validated by the section itself (types, ranges, its field validators), and a protection is held to its
    bound once its type holds. Pydantic visits the sections in the schema's order, so every refusal is kept with its
    place in the file and the first one in the file's order is said: the one a reader of the file meets first."""

    def __init__(self, reading: Reading, door: Door) -> None:
        self.reading, self.door = reading, door
        self.kept: dict[str, Any] = {}  # {a section's dotted key: what the door kept of it}
        self.refusals: list[tuple[tuple[int, ...], HandedOverError]] = []

    def read(self, tree: dict[str, Any]) -> dict[str, Any]:
        """What the door keeps of ``tree`` (the whole config, or an override nested at its key), or a refusal."""
        from degen_train.config.schema import TrainConfig

        try:
            TrainConfig.model_validate(_At("", tree), context={READER: self})
        except ValidationError:  # what is missing (an override sets one key), or a rule across sections: the run's
            pass
        if self.refusals:
            raise min(self.refusals, key=lambda refusal: refusal[0])[1]
        return self.kept.pop("")

    def section(self, cls: type[BaseModel], data: Any, handler: Any) -> Any:
        """Called by ``cls``'s validator (core/section.Section) for the value given at one of its places."""
        if not isinstance(data, _At):  # a list's item: pydantic's alone, its role the list's
            return handler(data)
        if isinstance(data.value, dict) and isinstance(data.value.get("_target_"), str):  # named as it is now
            data = _At(data.key, type(data.value)({**data.value, "_target_": current_target(data.value["_target_"])}),
                       data.place)  # fmt: skip
        try:
            if data.key and isinstance(data.value, dict) and not isinstance(data.value, _Nested):
                _check_section(self.reading.source, data.key, data.value, self.door.advice, cls)  # what it builds
        except HandedOverError as error:
            self.refusals.append((data.place, error))
            raise PydanticCustomError("refused", "refused by the door") from None
        if not isinstance(data.value, dict):
            return handler(data.value)
        return self._section(cls, data, handler)

    def _section(self, cls: type[BaseModel], at: _At, handler: Any) -> Any:
        source, door, key = self.reading.source, self.door, at.key
        fields = fields_by_key(cls)
        given: dict[str, Any] = {}  # what pydantic validates: each kept value, a section's as _At
        kept: dict[str, Any] = {}
        places: dict[str, tuple[int, ...]] = {}
        sections: dict[str, list[str]] = {}  # {name: the dotted keys of the sections it holds}
        bounded: list[tuple[str, Any, Declared, tuple[int, ...]]] = []  # held to their bound once typed
        for index, (raw_name, value) in enumerate(at.value.items()):
            name, place = str(raw_name), (*at.place, index)
            full, places[name] = f"{key}.{name}" if key else name, place
            try:
                if name == "_target_" and isinstance(value, str):  # recorded before its module moved (renamed.py)
                    value = current_target(value)
                _check_key_part(source, name, full, door.advice)
                info = fields.get(name)
                declared = _role_in(cls, name)
                descends = isinstance(value, dict) and (declared is None or declared.role not in LEFT_OUT)
                named = sections_by_name_in(info.annotation) if info is not None and descends else None
                if named is not None:  # objective.NAME: a term's section each
                    if not isinstance(value, _Nested):
                        _check_section(source, full, value, door.advice)
                    for item in value:
                        _check_key_part(source, str(item), f"{full}.{item}", door.advice)
                    given[name] = {item: _At(f"{full}.{item}", inner, (*place, number)) if isinstance(inner, dict)
                                   else inner for number, (item, inner) in enumerate(value.items())}  # fmt: skip
                    kept[name] = dict(given[name])
                    sections[name] = [inner.key for inner in given[name].values() if isinstance(inner, _At)]
                elif info is not None and descends and section_in(info.annotation) is not None:
                    given[name] = kept[name] = _At(full, value, place)
                    sections[name] = [full]
                else:
                    judged = self._leaf(full, value, declared, info, place=place, bounded=bounded,
                                        builds=_builds(cls))  # fmt: skip
                    if judged is not _LEFT_OUT:
                        given[name] = kept[name] = judged
            except HandedOverError as error:
                self.refusals.append((place, error))
                given.pop(name, None)
        failed: ValidationError | None = None
        try:
            validated = handler(given)
        except ValidationError as error:  # pydantic's own errors: each a refusal, except what _type_refusals leaves
            self._type_refusals(error, key, given, places)
            failed = error
        for name, inner in sections.items():
            if isinstance(kept[name], _At):
                kept[name] = self.kept.pop(inner[0], {})
            else:
                kept[name].update({entry.rsplit(".", 1)[-1]: self.kept.pop(entry, {}) for entry in inner})
        for full, value, declared, place in bounded:
            if door.runs and not declared.allows(value) and not door.trusted and not door.sets_value(full):
                try:  # the user's command line sets it: theirs wins
                    _refuse_looser(source, full, value, declared, door.advice)
                except HandedOverError as error:
                    self.refusals.append((place, error))
        self.kept[key] = kept
        if failed is not None:  # the section is not whole: its model rules (and its parent's) do not run on it
            raise failed
        return validated

    def _leaf(self, key: str, value: Any, declared: Declared | None, info: Any, *, place: tuple[int, ...],
              bounded: list, builds: tuple[str, ...]) -> Any:  # fmt: skip
        """A value at ``key``, judged by its role (module docstring): what is kept, _LEFT_OUT, or a refusal. A
        protection or measure goes to its section's ``bounded``, held to its bound once its type holds."""
        source, door = self.reading.source, self.door
        below: list[str] = []  # the parts of an override's key below this one (logger.wandb.project=...)
        while isinstance(value, _Nested):
            ((part, value),) = value.items()
            below.append(str(part))
            key = f"{key}.{part}"
        if below and declared is None:  # below a key no section lists: a _target_ there still names code
            built = fields_by_key(Instantiated).get(key.rsplit(".", 1)[-1])
            declared = declared_in(built) if built is not None else None
        if declared is None and value is None and _is_section(key):  # a section nulled: what it protects goes with it
            if door.runs:
                _refuse_removing_protections(source, key, f"{key}=null", door.advice)
            return value
        if declared is None:
            if isinstance(value, dict):
                _check_section(source, key, value, door.advice)  # what it would build: the clearest refusal
            _refuse_unknown(source, key, value, door.advice)
        if declared.role in LEFT_OUT:
            self.reading.left_out[key] = value
            return _LEFT_OUT
        if isinstance(value, dict):
            _check_section(source, key, value, door.advice)  # a mapping at a value's key: a section of the house's
        if below and info is not None:  # a key below a value: no setting of the house's
            _refuse_unknown(source, key, value, door.advice)
        _check_interpolation(source, key, value, door.advice)
        if declared.role in THE_USERS_OWN:
            value = _users_own(self.reading, door, key, value, declared.role, None if below else builds)
            if value is _LEFT_OUT:
                return value
        elif declared.role in (Role.PROTECTION, Role.MEASURES):
            bounded.append((key, value, declared, place))  # held to its bound once its type holds
        if info is None:  # no field of its section: a loss term's option, or a _target_ (module docstring)
            problem = _option_problem(key, value)
            if problem:
                said = problem if problem.startswith(key) else f"{key}={value!r}: {problem}"
                raise HandedOverError(f"{source}: {said}{door.advice}")
        return _renested(value, below)

    def _type_refusals(self, error: ValidationError, key: str, given: dict[str, Any], places: dict) -> None:
        """Each setting whose value its section refuses (its errors joined), named with the value the file gave; a
        missing key (an override sets one) and a rule across a section's keys are left to the run's own check."""
        problems: dict[tuple[str, ...], list[str]] = {}
        for found in error.errors():
            loc = [str(part) for part in found["loc"]]
            if not loc:  # a rule across the section's keys
                continue
            named = isinstance(given.get(loc[0]), dict) and len(loc) > 1 and loc[1] in given[loc[0]]
            inner = given[loc[0]][loc[1]] if named else given.get(loc[0])
            if found["type"] == "missing" or isinstance(inner, _At):  # a section says its own
                continue
            problems.setdefault(tuple(loc[:2]) if named else (loc[0],), []).append(
                found["msg"].removeprefix("Value error, ")
            )
        for at, messages in problems.items():
            value: Any = given
            for part in at:
                value = value.get(part) if isinstance(value, dict) else None
            full = ".".join([key, *at]) if key else ".".join(at)
            problem = "; ".join(messages)
            said = problem if problem.startswith(full) else f"{full}={value!r}: {problem}"
            refusal = HandedOverError(f"{self.reading.source}: {said}{self.door.advice}")
            self.refusals.append((places.get(at[0], ()), refusal))


def _builds(section: type) -> tuple[str, ...]:
    """What the house builds at a section (its ``builds``, section.Instantiated); nothing at one Hydra builds not."""
    return section.builds if issubclass(section, Instantiated) else ()


def _role_in(section: type[BaseModel], name: str) -> Declared | None:
    """The role ``section`` declares for its key ``name``: its field's, else by its own rule (``_other_role``)."""
    info = fields_by_key(section).get(name)
    return declared_in(info) if info is not None else _other_role(section, name)


def _other_role(cls: type[BaseModel], name: str) -> Declared | None:
    """The role of a key ``cls`` does not list: by the section's own rule (a term's option: its term's), else a
    ``_target_`` or ``_partial_``'s anywhere (what every section Hydra builds declares for it), else None."""
    other = getattr(cls, "other_key_role", None)
    if other is not None:
        return other(name)
    built = fields_by_key(Instantiated).get(name)
    return declared_in(built) if built is not None else None


def _nested(key: str, value: Any) -> _Nested:
    """An override's ``key=value`` as the nested tree a config holds it in."""
    tree: Any = value
    for part in reversed(key.split(".")):
        tree = _Nested({part: tree})
    return tree


def _kept_at(tree: dict[str, Any], key: str) -> Any:
    """The value ``tree`` keeps at the dotted ``key``, or _LEFT_OUT."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _LEFT_OUT
        node = node[part]
    return node


def _renested(value: Any, below: list[str]) -> Any:
    """A kept value below its section's key (an override's) nested again as the section holds it."""
    for part in reversed(below):
        value = {part: value}
    return value


def _users_own(reading: Reading, door: Door, key: str, value: Any, role: Role, builds: tuple | None = None) -> Any:
    """An input or code: the house's own value is carried; another is the user's to give (module docstring)."""
    if _is_house_value(key, value, builds):
        return value
    if door.gives(key):  # the user's command line sets it: theirs wins, the file's is named where it differs
        if isinstance(door.given, Mapping) and door.given.get(key) == value:
            return value  # the same value: kept, so the key is there for the command line to set
        reading.left_out[key] = value
        return _LEFT_OUT
    if role == Role.INPUT and (door.trusted or key.startswith(door.inherit)):
        reading.inherited[key] = value
        return value
    if role == Role.INPUT and not door.runs:  # a door that only reads: named aside, its own rule decides
        reading.inputs[key] = value
        return _LEFT_OUT
    if key.endswith("_target_"):
        raise HandedOverError(
            f"{reading.source}: _target_ {value!r} at {key}, which degen-train's own configs never build there; a "
            f"handed-over file may only name the house's targets at their keys (so it runs no code){door.advice}"
        )
    shown = printable(_shown(key, value), 240)
    never = "what a run reads" if role == Role.INPUT else "code a run hands to a library"
    raise HandedOverError(
        f"{reading.source}: {shown} is {MEANING[role]} (role: {role.value}); a handed-over file never chooses "
        f"{never}: give it on your own command line ({key}=...), or remove that entry{door.advice}"
    )


def _is_house_value(key: str, value: Any, builds: tuple[str, ...] | None = None) -> bool:
    """``value`` is nothing (null, empty), one the house's own yaml gives ``key`` (resolved on this machine), or at a
    ``_target_`` one that its section declares the house builds (``builds``, where the caller holds the section)."""
    if value in (None, "", [], {}):
        return True
    if key.endswith("_target_"):  # what the section Hydra builds there declares (section.Instantiated.builds)
        return value in (house_targets(key) if builds is None else builds)
    known = house_keys().get(key)
    return known is not None and kind_of(value) not in ("list", "dict") and value in _resolved_values(key)


@functools.cache
def _resolved_values(key: str) -> frozenset[Any]:
    """The plain values conf/ gives ``key``, an interpolation of this machine's environment resolved as here."""
    from omegaconf import OmegaConf

    values = set()
    for value in house_keys()[key].values:
        values.add(value)
        if isinstance(value, str) and "${" in value:
            try:
                values.add(OmegaConf.create({"v": value}).v)
            except Exception:  # noqa: BLE001 - an interpolation of another key (a recipe's ${teacher}): not a value
                continue
    return frozenset(values)


def _read_choice(reading: Reading, door: Door, group: str, value: Any, prefix: str, text: str) -> None:
    """A group's choice (``recipe=tacl``, ``hydra/job_logging=disabled``) by the role of what the group decides."""
    declared = group_role(group)
    if group not in house_groups():
        if declared is not None and declared.role in LEFT_OUT:  # Hydra's own groups (hydra/launcher, ...)
            reading.left_out[group] = value
            return
        raise HandedOverError(f"{reading.source}: {printable(text, 200)}: not a config group of degen-train"
                              f"{door.advice}")  # fmt: skip
    choice = _checked_choice(reading.source, group, value, door.advice)
    if declared is None:
        raise HandedOverError(f"{reading.source}: {printable(text, 200)}: the group {group} declares no role "
                              f"(core/roles.py), so a handed-over file may not choose it{door.advice}")  # fmt: skip
    if declared.role in LEFT_OUT:
        reading.left_out[group] = value
        return
    if declared.role == Role.PROTECTION and door.runs and not declared.allows(value):
        what = "a debug group changes what the run is (its steps, checkpoints and validation)" if group == "debug" \
            else f"{group}={value} would loosen {declared.guards}"  # fmt: skip
        raise HandedOverError(
            f"{reading.source}: {printable(text, 200)}: {what}; a handed-over file may not choose one: remove that "
            f"entry, or add {group}=... on your own command line{door.advice}"
        )
    reading.settings.append(Setting(group, choice, "choice", prefix))


def _read_deletion(reading: Reading, door: Door, key: str, text: str) -> None:
    """``~key``: a setting, section or group removed; what protects a run is never removed by a handed-over file."""
    declared = group_role(key) if "/" in key else None
    if declared is not None and declared.role in LEFT_OUT:  # ~hydra/job_logging: Hydra's, this run decides it
        reading.left_out[f"~{key}"] = None
        return
    key = key.replace("/", ".")
    if key not in house_keys() and key not in schema_fields():
        raise HandedOverError(f"{reading.source}: ~{key}: not a setting of degen-train's configs{door.advice}")
    declared = role_of(key)
    if declared is not None and declared.role in LEFT_OUT:
        reading.left_out[f"~{key}"] = None
        return
    if door.runs:
        _refuse_removing_protections(reading.source, key, text, door.advice)
    reading.settings.append(Setting(key, kind="delete"))


def _refuse_removing_protections(source: Path, key: str, text: str, advice: str) -> None:
    """Refuse removing (``~key``, ``key=null``) a section or setting that holds a protection."""
    guarded = [k for k in house_keys() if (k == key or k.startswith(key + ".")) and (role_of(k) or _NONE).role ==
               Role.PROTECTION]  # fmt: skip
    if not guarded:
        return
    parts = key.split(".")
    what = ("every callback" if key == "callbacks" else f"the {parts[1]} callback" if parts[0] == "callbacks" and
            len(parts) == 2 else ", ".join(sorted({role_of(k).guards for k in guarded})))  # fmt: skip
    raise HandedOverError(
        f"{source}: {printable(text, 200)} would switch off {what} (checkpoints, the SIGTERM and requeue handler, the "
        f"divergence guard, validation) in a run built from it; a handed-over file may not remove what protects a "
        f"run: remove that entry, or give the setting on your own command line{advice}"
    )


_NONE = Declared(Role.TRAINS)


def _refuse_looser(source: Path, key: str, value: Any, declared: Declared, advice: str) -> None:
    shown = printable(_shown(key, value), 200)
    if declared.role == Role.MEASURES:
        raise HandedOverError(f"{source}: {shown}: past the bound of what a run measures (role: measures; a "
                              f"handed-over file may give {declared.rule()}): remove that entry, or give it on your "
                              f"own command line{advice}")  # fmt: skip
    raise HandedOverError(
        f"{source}: {shown} would loosen {declared.guards} (role: protection; a handed-over file may give "
        f"{declared.rule()}, as tight as the house's or tighter): remove that entry, or give {key}=... on your own "
        f"command line{advice}"
    )


def _shown(key: str, value: Any) -> str:
    """``key=value``, a section's value shortened: how a left-out setting is named in one line."""
    text = json.dumps(value, default=str) if isinstance(value, dict | list) else str(value)
    return f"{key}={text if len(text) <= 200 else text[:197] + '...'}"


def _is_section(key: str) -> bool:
    known = house_keys().get(key)
    return known is not None and "dict" in known.kinds


def _check_section(source: Path, key: str, value: dict[str, Any], advice: str, section: type | None = None) -> None:
    """A mapping at ``key`` must be one of the house's sections (or a loss term's, under any name); the ``_target_``
    it would build is named first: the clearest reason a section is refused. ``section``: the typed section it is
    validated as, which declares the role of its ``_target_`` and what the house builds there."""
    if "_target_" in value:
        role = role_of(f"{key}._target_") if section is None else _role_in(section, "_target_")
        builds = None if section is None else _builds(section)
        if role is not None and role.role == Role.CODE and not _is_house_value(f"{key}._target_", value["_target_"],
                                                                               builds):  # fmt: skip
            raise HandedOverError(
                f"{source}: _target_ {value['_target_']!r} at {key}._target_, which degen-train's own configs never "
                f"build there; a handed-over file may only name the house's targets at their keys (so it runs no "
                f"code){advice}"
            )
    if not _is_section(key) and not _is_term_entry(key):
        _refuse_unknown(source, key, value, advice)


def _is_term_entry(key: str) -> bool:
    """``objective.NAME`` / ``regularizer.NAME``: a loss term's section, under any name (``term:`` says which)."""
    parts = key.split(".")
    return len(parts) == 2 and parts[0] in ("objective", "regularizer")


def _check_key_part(source: Path, part: str, key: str, advice: str) -> None:
    """A record's mapping key is one part of a setting's name: degen-train writes its sections nested, so a dotted
    key (``optimizer.lr: 0.5`` at the top) is no key it wrote, and read as one it would name another setting than
    the one its section holds (issue 72.6, NR8)."""
    if "." in part:
        dotted = printable(key, 200)
        raise HandedOverError(
            f"{source}: the key {dotted!r} holds a dot, where degen-train writes a config's sections nested "
            f"({dotted.split('.')[0]}: {{{dotted.split('.', 1)[1]}: ...}}); a dotted key is no setting it wrote: "
            f"nest it, remove it, or give {dotted}=... on your own command line{advice}"
        )


def _check_interpolation(source: Path, key: str, value: Any, advice: str) -> None:
    """No interpolation anywhere in ``value``: one read here would take this machine's environment or files; and no
    control or format character: a carried string becomes an override that Hydra echoes, and a presentation string
    (data.missing_hint) is printed to the terminal as it is (issue 72.6)."""
    for inner in _strings(value):
        if "${" in inner:
            raise HandedOverError(
                f"{source}: {key}={value!r} holds an interpolation; a recorded setting is a plain value (one read "
                f"here would take this machine's environment or files). Replace it by the value it stood for{advice}"
            )
        if CONTROL.search(inner) or LYING.search(inner):
            raise HandedOverError(
                f"{source}: {printable(_shown(key, value), 200)} holds control or format characters (shown "
                f"escaped), which no setting of degen-train holds: remove that entry, or give {key}=... on your own "
                f"command line{advice}"
            )


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _option_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` at ``key``, a key no section lists as a field, or None: a ``_target_`` is a
    name; a loss term's option is held to its term's own declaration."""
    option = TERM_OPTION.match(key)  # first: a term is built from its term:, so a _target_ there is no option
    if option:
        return _term_option_problem(*option.groups(), value)
    if key.endswith("_target_") or key.endswith("_partial_"):
        return None if kind_of(value) in ("str", "bool", "none") else "a _target_ is a name"
    return "not a setting of degen-train (no file of conf/, no field of its schema, no Trainer argument or term option)"


def _term_option_problem(section: str, name: str, option: str, value: Any) -> str | None:
    """A loss term's option checked by the term's declaration (losses/declarations.py: its annotation, strict), as
    the command line checks it: the term ``name``, or under a section named otherwise (``term:`` inside says which)
    any term that takes ``option``; None when one allows it."""
    from degen_train.losses.declarations import check_term_sections, declared_terms

    if option == "weight" and (isinstance(value, bool) or not isinstance(value, int | float)):
        return "a term's weight is a number"
    if option == "term":
        return None if value in declared_terms() else f"not a loss term of degen-train ({', '.join(declared_terms())})"
    terms = [name] if name in declared_terms() else [term for term, declared in declared_terms().items()
                                                     if option in (declared.option_names() or ())]  # fmt: skip
    problems = []
    for term in terms:
        try:
            check_term_sections({section: {name: {"term": term, option: value}}})
            return None
        except ValueError as error:
            problems.append(str(error))
    return problems[0] if problems else f"no loss term of degen-train takes the option {option!r}"


def _refuse_unknown(source: Path, key: str, value: Any, advice: str) -> None:
    shown = json.dumps(value, default=str)
    raise HandedOverError(
        f"{source}: {key}={shown[:200]}: not a section of degen-train's configs; a handed-over file may only set "
        f"the house's own settings{advice}"
        if isinstance(value, dict) else
        f"{source}: {key}={shown[:200]}: not a setting of degen-train (no file of conf/, no field of its schema, no "
        f"Trainer argument or term option with a declared role){advice}"
    )  # fmt: skip


def _checked_choice(source: Path, group: str, value: Any, advice: str) -> Any:
    names = value if isinstance(value, list) else [value]
    options = house_groups()[group]
    for name in names:
        if not isinstance(name, str) or not CHOICE.match(name) or name not in options:
            raise HandedOverError(
                f"{source}: {group}={value!r}: not one of the group's configs in conf/{group}/ "
                f"({', '.join(sorted(options))}){advice}"
            )
    return value


def hydra_literal(value: Any) -> str:
    """``value`` written in Hydra's override grammar so that Hydra's parser reads back exactly ``value``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    text = _literal(value)
    parsed = OverridesParser.create().parse_overrides([f"k={text}"])[0].value()
    if parsed != value and not (isinstance(value, tuple) and parsed == list(value)):
        raise HandedOverError(f"{value!r} cannot be passed on as a setting (it reads back as {parsed!r})")
    return text


def _literal(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):  # Hydra's quoted strings: a run of backslashes before a quote (or before the closing
        # quote) is doubled, a quote escaped; other backslashes stand for themselves (hydra_literal checks the trip)
        quoted = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
        quoted = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, quoted)
        return f"'{quoted}'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{name}:{_literal(item)}" for name, item in value.items()) + "}"
    raise HandedOverError(f"{value!r} is not a plain value")
