"""The one reader of settings from a handed-over folder: a branch's parent (RUN/overrides.json), a record given to
``--reproduce`` (RUN/config.yaml), a run or sweep folder given to degen-report, degen-analyze or degen-finetune.

Such a file is data. Every setting in it goes through one typed allow-list built from the house itself
(house_keys.py: the keys and ``_target_``s of conf/, the typed schema, the Trainer's arguments, the terms' options):

- a key the house does not have is refused, naming the file; a value must have the type the house gives that key
  (the schema's own check, or the kind of value conf/ holds there);
- a ``_target_`` may only name what the house's yaml builds at that same key; no interpolation (``${...}``) is read;
- a group choice (``recipe=tacl``) must name one of the group's files in conf/;
- where a run writes (checkpoint folder and file name, loggers, the Trainer's root, profiler folders, the data
  cache), how it was launched (Hydra's settings, the cluster group) and what it uploads (``push_to_hub``) are never
  read: they come from the new run's own folder and command line, and what was left out is said in one line.

A door reads through this module and adds no rules of its own: a new door cannot forget one. Nothing read here is
handed to Hydra as text from the file: overrides are parsed with Hydra's own parser, checked as typed values and
written out again by ``Setting.override``.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from degen_train.config.house_keys import house_groups, house_keys, house_value, kind_of, schema_fields
from degen_train.config.renamed import current_target
from degen_train.core.handed_files import HandedOverFileError, check_bounded, json_record, plain_file_text, printable

# Sections a handed-over file never decides: how and where it was launched, published or logged.
NOT_READ = {
    "hydra": "Hydra's settings",
    "defaults": "its defaults list",
    "logger": "its loggers",
    "push_to_hub": "its upload",
    "cluster": "its launcher",
    "run_dir": "its folder",
    "ckpt_path": "its checkpoint",
}
# Keys, wherever they are, that say where something is written: the new run's own folder decides them.
OUTPUT_LEAVES = ("dirpath", "filename", "save_dir", "log_dir", "output_dir", "root_dir", "cache_dir",
                 "default_root_dir")  # fmt: skip
TERM_OPTION = re.compile(r"^(objective|regularizer)\.(\w+)\.(\w+)$")
# What protects a run (its checkpoints, its SIGTERM/requeue handler, its divergence guard) and the Trainer switches that
# change what a run is (a few batches, no checkpoint, an epoch or time limit that ends it before its steps): a file
# that would switch one off is refused for a run read from it (a branch, a reproduction), never passed on silently.
PROTECTIVE_CALLBACKS = ("checkpoint", "preemption", "divergence")
TRAINER_SWITCHES = {
    "fast_dev_run": "runs a few batches and writes no checkpoint",
    "limit_train_batches": "trains on part of each epoch only",
    "overfit_batches": "trains on a few repeated batches",
    "enable_checkpointing": "decides whether checkpoints are written",
    "max_epochs": "ends the run after epochs instead of its steps (degen-train counts steps: -1)",
    "max_time": "ends the run at a wall-clock time instead of its steps",
}
KEY = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
CHOICE = re.compile(r"^[\w.-]+$")


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


@dataclass
class Reading:
    """What a door read from one file: the settings kept and the keys left out (this run decides those)."""

    source: Path
    settings: list[Setting] = field(default_factory=list)
    tree: dict[str, Any] = field(default_factory=dict)
    left_out: dict[str, Any] = field(default_factory=dict)  # {key: the value the file gave it}

    @property
    def dropped(self) -> list[str]:
        return list(self.left_out)

    def dropped_line(self) -> str | None:
        """One line naming every key left out with the value the file gave it, or None."""
        if not self.left_out:
            return None
        shown = printable(", ".join(_shown(key, value) for key, value in self.left_out.items()))
        return (f"{self.source}: not read, this run decides them (where it writes, logs and uploads, how it is "
                f"launched): {shown}")  # fmt: skip


def read_overrides_file(
    path: Path, *, also_not_read: tuple[str, ...] = (), advice: str = "", runs: bool = True
) -> Reading:
    """A run's recorded command-line overrides (RUN/overrides.json: a list of strings), each parsed by Hydra's parser
    and checked as data. ``also_not_read``: keys this door leaves out besides NOT_READ (a branch: ``branch_from``).
    ``runs``: a run is built from the file, so a setting that switches off its protections is refused."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    path = Path(path)
    reading = Reading(path)
    try:
        entries = json_record(path, what="list of overrides")
    except HandedOverFileError as error:
        raise HandedOverError(f"{error}{advice}") from None
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise HandedOverError(f"{path} is not a JSON list of override strings, as degen-train writes it")
    parser = OverridesParser.create()
    for text in entries:
        try:
            override = parser.parse_overrides([text])[0]
        except (HydraException, RecursionError) as error:
            why = str(error).splitlines()[0] if isinstance(error, HydraException) else "nested too deep"
            raise HandedOverError(f"{path}: {text[:200]!r} is not an override ({why[:200]}){advice}") from None
        key = override.key_or_group
        if override.package is not None or override.is_sweep_override():
            raise HandedOverError(f"{path}: {text!r}: a package or a sweep is not a setting of one run{advice}")
        if _not_read(key.replace("/", "."), also_not_read):
            reading.left_out[key] = override.value()
            continue
        prefix = {"ADD": "+", "FORCE_ADD": "++"}.get(override.type.name, "")
        if runs:
            _check_protections(path, text, key, override.value(), override.type.name == "DEL", advice)
        if override.type.name == "DEL":
            _check_known(path, key, advice)
            reading.settings.append(Setting(key, kind="delete"))
        elif key in house_groups():
            choice = _checked_choice(path, key, override.value(), advice)
            reading.settings.append(Setting(key, choice, "choice", prefix))
        else:
            value = _cleaned(path, key, override.value(), reading.left_out, also_not_read, advice)
            reading.settings.append(Setting(key, value, "value", prefix))
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


def read_config_file(
    path: Path, *, also_not_read: tuple[str, ...] = (), advice: str = "", runs: bool = True
) -> Reading:
    """A run's recorded config (RUN/config.yaml, written resolved), every key checked as data; ``tree`` holds what
    was kept, without the keys left out (``with_house_outputs`` puts the house's own values there). ``runs``: a run
    is built from the file, so a value that switches off its protections is refused."""
    import yaml

    path = Path(path)
    try:
        tree = yaml.safe_load(plain_file_text(path, what="config"))
        check_bounded(path, tree, what="config")
    except HandedOverFileError as error:
        raise HandedOverError(f"{error}{advice}") from None
    except RecursionError:
        raise HandedOverError(f"{path}: nested deeper than any config degen-train writes; it was not read") from None
    except yaml.YAMLError as error:
        raise HandedOverError(f"{path} is not a readable YAML config ({str(error).splitlines()[0]})") from None
    if not isinstance(tree, dict):
        raise HandedOverError(f"{path} is not a config (a mapping of settings), as degen-train writes it")
    if runs:
        _check_recorded_protections(path, tree, advice)
    reading = Reading(path)
    for key, value in tree.items():
        if _not_read(str(key), also_not_read):
            reading.left_out[str(key)] = value
            continue
        reading.tree[str(key)] = _cleaned(path, str(key), value, reading.left_out, also_not_read, advice)
    return reading


def with_house_outputs(tree: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """``tree`` with every output location left out put back at the house's own value for that key (the new run's
    folder: ``${run_dir}/checkpoints``, ``${run_dir}/profile``, ...), and the house's default logger."""
    for key in dropped:
        if key.split(".")[0] in NOT_READ:
            continue
        value = house_value(key)
        if value is not None:
            node = tree
            *parents, last = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
    return tree


def _check_protections(source: Path, text: str, key: str, value: Any, deleted: bool, advice: str) -> None:
    """Refuse an override that switches off a run's protections: the callbacks section or a protective callback
    deleted or set to null, a Trainer switch that changes what the run is, a debug group."""
    parts = key.replace("/", ".").split(".")
    shown = printable(text, 200)
    gone = deleted or value is None
    if parts[0] == "callbacks" and gone and (len(parts) == 1 or (len(parts) == 2 and parts[1] in PROTECTIVE_CALLBACKS)):
        what = "every callback" if len(parts) == 1 else f"the {parts[1]} callback"
        raise HandedOverError(
            f"{source}: {shown} would switch off {what} (checkpoints, the SIGTERM and requeue handler, the divergence "
            f"guard) in a run built from it; a handed-over file may not remove what protects a run: remove that "
            f"entry, or give the setting on your own command line{advice}"
        )
    if len(parts) == 2 and parts[0] == "trainer" and parts[1] in TRAINER_SWITCHES and not _harmless(parts[1], value):
        raise HandedOverError(
            f"{source}: {shown}: trainer.{parts[1]} {TRAINER_SWITCHES[parts[1]]}, which changes what the run is; a "
            f"handed-over file may not set it: remove that entry, or give it on your own command line{advice}"
        )
    if parts[0] == "debug":
        raise HandedOverError(
            f"{source}: {shown}: a debug group changes what the run is (its steps, checkpoints and validation); a "
            f"handed-over file may not choose one: remove that entry, or add debug=... on your own command line{advice}"
        )


def _check_recorded_protections(source: Path, tree: dict[str, Any], advice: str) -> None:
    """The same refusals for a recorded config (config.yaml): a null callbacks section or protective callback, a
    Trainer switch at a value that changes what the run is."""
    if "callbacks" in tree:
        callbacks = tree["callbacks"]
        if callbacks is None:
            _check_protections(source, "callbacks: null", "callbacks", None, False, advice)
        elif isinstance(callbacks, dict):
            for name in PROTECTIVE_CALLBACKS:
                if name in callbacks and callbacks[name] is None:
                    _check_protections(source, f"callbacks.{name}: null", f"callbacks.{name}", None, False, advice)
    trainer = tree.get("trainer")
    for name, value in trainer.items() if isinstance(trainer, dict) else ():
        if name in TRAINER_SWITCHES:
            _check_protections(source, f"trainer.{name}: {value!r}", f"trainer.{name}", value, False, advice)


def _harmless(switch: str, value: Any) -> bool:
    """The value at which a Trainer switch leaves the run as it is (the house's own, or Lightning's default)."""
    harmless = {"fast_dev_run": (False, 0), "limit_train_batches": (None, 1.0, 1), "overfit_batches": (0, 0.0),
                "enable_checkpointing": (None, True), "max_epochs": (None, -1), "max_time": (None,)}  # fmt: skip
    return any(value is h or (not isinstance(value, bool) and value == h and not isinstance(h, bool))
               for h in harmless[switch])  # fmt: skip


def _shown(key: str, value: Any) -> str:
    """``key=value``, a section's value shortened: how a left-out setting is named in one line."""
    text = json.dumps(value, default=str) if isinstance(value, dict | list) else str(value)
    return f"{key}={text if len(text) <= 80 else text[:77] + '...'}"


def _not_read(key: str, also: tuple[str, ...]) -> bool:
    parts = key.split(".")
    return parts[0] in NOT_READ or parts[-1] in OUTPUT_LEAVES or key in also or parts[0] in also


def _cleaned(source: Path, key: str, value: Any, dropped: dict[str, Any], also: tuple[str, ...], advice: str) -> Any:
    """``value`` at ``key`` checked leaf by leaf; output locations inside a section are left out (listed); a
    ``_target_`` recorded before its module moved is read as the module's name now (renamed.py)."""
    if isinstance(value, dict) and isinstance(value.get("_target_"), str):
        value = {**value, "_target_": current_target(value["_target_"])}
    if key.endswith("_target_") and isinstance(value, str):
        value = current_target(value)
    if isinstance(value, dict):
        if "_target_" in value:  # what it would build is named first: the clearest reason a section is refused
            _check_leaf(source, f"{key}._target_", value["_target_"], advice)
        if not (house_keys().get(key) and "dict" in house_keys()[key].kinds) and not _is_term_entry(key):
            _refuse_unknown(source, key, value, advice)
        kept = {}
        for name, item in value.items():
            inner = f"{key}.{name}"
            if _not_read(inner, also):
                dropped[inner] = item
                continue
            kept[name] = _cleaned(source, inner, item, dropped, also, advice)
        return kept
    if isinstance(value, list | tuple):
        _check_leaf(source, key, list(value), advice)
        return [_cleaned(source, f"{key}[]", item, dropped, also, advice) if isinstance(item, dict | list) else item
                for item in value]  # fmt: skip
    _check_leaf(source, key, value, advice)
    return value


def _is_term_entry(key: str) -> bool:
    """``objective.NAME`` / ``regularizer.NAME``: a loss term's section, under any name (``term:`` says which)."""
    parts = key.split(".")
    return len(parts) == 2 and parts[0] in ("objective", "regularizer")


def _check_leaf(source: Path, key: str, value: Any, advice: str) -> None:
    for inner in _strings(value):
        if "${" in inner:
            raise HandedOverError(
                f"{source}: {key}={value!r} holds an interpolation; a recorded setting is a plain value (one read "
                f"here would take this machine's environment or files). Replace it by the value it stood for{advice}"
            )
    if key.endswith("_target_"):
        allowed = house_keys().get(key)
        if not isinstance(value, str) or allowed is None or value not in allowed.values:
            raise HandedOverError(
                f"{source}: _target_ {value!r} at {key}, which degen-train's own configs never build there; a "
                f"handed-over file may only name the house's targets at their keys (so it runs no code){advice}"
            )
        return
    problem = _type_problem(key, value)
    if problem:
        raise HandedOverError(f"{source}: {key}={value!r}: {problem}{advice}")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _type_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` at ``key`` for the house, or None: the schema's own type and range where the
    schema lists the key, else the kind of value conf/ holds there, else a Trainer argument or a term's option."""
    checker = _schema_checker(key)
    if checker is not None:
        from pydantic import ValidationError

        try:
            checker.validate_python(value)
        except ValidationError as error:
            return "; ".join(e["msg"] for e in error.errors())
        return None
    known = house_keys().get(key)
    if known is not None:
        return _kind_problem(known.kinds, value)
    if not _plain(value):
        return "a Trainer argument or a loss term's option holds a plain value (a number, string or list of them)"
    if key.startswith("trainer.") and key.count(".") == 1 and key.split(".")[1] in _trainer_arguments():
        return None
    option = TERM_OPTION.match(key)
    if option and option.group(3) in _term_options(option.group(2)):
        return None
    return "not a setting of degen-train (no file of conf/, no field of its schema, no Trainer argument or term option)"


def _kind_problem(kinds: set[str], value: Any) -> str | None:
    kind = kind_of(value)
    if kind == "none" or "none" in kinds or kind in kinds:
        return None
    if kind == "int" and "float" in kinds:
        return None
    named = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string", "list": "a list",
             "dict": "a section"}  # fmt: skip
    return f"the house's value there is {' or '.join(named.get(k, k) for k in sorted(kinds))}"


def _plain(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_plain(item) for item in value)
    return kind_of(value) in ("none", "bool", "int", "float", "str")


def _refuse_unknown(source: Path, key: str, value: Any, advice: str) -> None:
    shown = json.dumps(value, default=str)
    raise HandedOverError(
        f"{source}: {key}={shown[:200]}: not a section of degen-train's configs; a handed-over file may only set "
        f"the house's own settings{advice}"
    )


def _check_known(source: Path, key: str, advice: str) -> None:
    if key not in house_keys() and key not in schema_fields():
        raise HandedOverError(f"{source}: ~{key}: not a setting of degen-train's configs{advice}")


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


@functools.cache
def _schema_checker(key: str) -> Any:
    from typing import Annotated

    from pydantic import TypeAdapter

    info = schema_fields().get(key)
    if info is None:
        return None
    annotation = Annotated.__class_getitem__((info.annotation, *info.metadata)) if info.metadata else info.annotation
    return TypeAdapter(annotation)


@functools.cache
def _trainer_arguments() -> frozenset[str]:
    from degen_train.config.overrides import trainer_arguments

    return frozenset(trainer_arguments())


@functools.cache
def _term_options(name: str) -> frozenset[str]:
    """The options conf/objective/ and conf/regularizer/ give the term ``name`` (every option of every term is a key
    of its yaml: tests/unit/test_term_options.py), and ``weight`` and ``term``; of every term when ``name`` is a
    section's own name (``term: NAME`` inside says which)."""
    keys = [k.split(".") for k in house_keys() if k.startswith(("objective.", "regularizer.")) and k.count(".") == 2]
    named = {option for section, term, option in keys if term == name}
    return frozenset((named or {option for _, _, option in keys}) | {"weight", "term"})


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
