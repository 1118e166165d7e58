"""What every typed section of the config shares: how open it is, the two keys of a section Hydra builds, and how a
section's problems are said (each naming the key, the value and what is allowed).

A field that only some configs give (a Lightning Trainer argument, a callback's own setting, a recipe's input) is
declared with ``GIVEN_ONLY``: it carries its role like every field, and the config that runs holds it only where it
was given (null: absent), so declaring a setting never adds it to what a constructor receives.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, ClassVar, TypeVar, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from degen_train.core.roles import CODE
from degen_train.core.source_reading import callable_keywords

# Every number a config gives is finite: an inf or NaN (optimizer.lr=inf) would pass the range checks and fail
# after data preparation, in a linear-algebra routine.
Open = ConfigDict(extra="allow", allow_inf_nan=False)
# Closed sections: every key a component reads is listed with its type, so the section reaches the component as a
# typed object (data.prepare_data, models.build_hf_model) and a misspelt key is refused, naming the nearest one.
Closed = ConfigDict(extra="forbid", allow_inf_nan=False)
# The bounds of what a run measures (roles.py: a handed-over file's measure is held to them like the user's own):
# prompts to continue (SimCTG's WikiText-103 test set has 1,314 documents), tokens of a prefix or continuation, items
# of an evaluation.
MAX_PROMPTS = 10_000
MAX_TOKENS = 8192
MAX_ITEMS = 1_000_000


def _is_none(value: Any) -> bool:
    return value is None


def given_only(default: Any = None, **constraints: Any) -> Any:
    """A field the config that runs holds only where it was given (module docstring)."""
    return Field(default=default, exclude_if=_is_none, **constraints)


# The key of a validation context that holds a handed-over file's reader (config/handed_over.py).
READER = "handed_over_reader"


class Section(BaseModel):
    """Every typed section of the config. Validated with a handed-over file's reader in its context
    (``model_validate(..., context={READER: reader})``), a section hands its own keys to the reader, which judges
    each by the role its field declares before pydantic checks their types: a handed-over file is read through the
    sections themselves, one section at a time as pydantic descends, never by a walk of its own."""

    @model_validator(mode="wrap")
    @classmethod
    def _read_by_roles(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        reader = (info.context or {}).get(READER)
        return handler(data) if reader is None else reader.section(cls, data, handler)


class Instantiated(Section):
    """A section Hydra builds: its ``_target_`` (and ``_partial_``) name code. ``builds`` declares what the house
    builds there (each of conf/'s yaml at this section names one of them, tests/unit/test_roles.py holds it): a
    handed-over file may name only those (config/handed_over.py); the user's own command line may name any."""

    model_config = Open
    builds: ClassVar[tuple[str, ...]] = ()
    target: Annotated[str | None, CODE] = Field(default=None, alias="_target_", exclude_if=_is_none)
    partial: Annotated[bool | None, CODE] = Field(default=None, alias="_partial_", exclude_if=_is_none)

    @model_validator(mode="after")
    def keys_its_target_takes(self) -> Instantiated:
        """Each key given is an argument of what ``_target_`` names, where its source says which (a misspelt
        ``+optimizer.weight_decy`` was the constructor's TypeError once the data and the model were built)."""
        takes = callable_keywords(self.target) if self.target else None
        if takes is None:
            return self
        fields = type(self).model_fields
        given = [fields[name].alias or name if name in fields else name  # a field by its key (validate, _target_)
                 for name in (*self.model_fields_set, *(self.model_extra or {})) if name not in ("target", "partial")]
        unknown = [name for name in given if name not in takes]
        if unknown:
            near = difflib.get_close_matches(unknown[0], takes, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(f"{unknown[0]} is not an argument of {self.target}{hint}; its arguments: "
                             f"{', '.join(takes)}")  # fmt: skip
        return self


SectionT = TypeVar("SectionT", bound=BaseModel)


def checked_section(kind: type[SectionT], raw: Any, key: str, *, where: str | None = None) -> SectionT:
    """``raw`` validated as the section ``key`` of the config; every problem named under ``where`` (default key)."""
    try:
        return kind.model_validate(raw)
    except ValidationError as error:
        lines = describe_errors(error, raw, kind, at=(where or key,))
        raise ValueError("invalid config:\n" + "\n".join(lines)) from None


def describe_errors(error: ValidationError, raw: Any, root: type[BaseModel], *, at: tuple[str, ...] = ()) -> list[str]:
    """Each problem of ``raw`` (validated as ``root``) in one line, under its key (``at``: the keys above it); a value
    that fits no member of a union (``int >= 0 | 'auto'``) is said once, with what each member allows."""
    lines: dict[str, list[str]] = {}
    for found in error.errors():
        said, problem = _described(found, raw, root, at)
        lines.setdefault(said, []).append(problem)
    lead = "Input should be "  # pydantic's: said once for the members of one union
    return [f"{said}: {problems[0]}" + "".join(f", or {p.removeprefix(lead)}" for p in problems[1:])
            for said, problems in lines.items()]  # fmt: skip


def _described(error: Any, raw: Any, root: type[BaseModel], at: tuple[str, ...]) -> tuple[str, str]:
    """One of pydantic's errors as (where it is, ``  key`` or ``  key=value``; what is wrong there)."""
    inner = [str(part) for part in error["loc"] if not str(part).startswith("function-after")]
    value = None
    if error["type"] != "missing":  # a union's member names its tag (num_workers: int | auto): no key of the config
        inner, value = _found(raw, inner)
    location = [*at, *inner]
    key = ".".join(location)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"  {key}", "missing"
    if error["type"] == "extra_forbidden":
        return f"  {key}", _unknown_setting(location, root, len(at))
    if isinstance(value, dict):  # a cross-field rule: the message names the keys and values itself
        return f"  {key}", message
    return f"  {key}={value!r}", message


def _unknown_setting(location: list[str], root: type[BaseModel], above: int) -> str:
    """What to say of a key a closed section does not have: the nearest known key, and all of them."""
    section: Any = root
    for part in location[above:-1]:
        info = section.model_fields.get(part)
        if info is None:  # a mapping's key (objective.NAME): the section of its values holds the next part
            continue
        section = next((c for c in (info.annotation, *get_args(info.annotation))  # an Optional's, a mapping's
                        if isinstance(c, type) and issubclass(c, BaseModel)), section)  # fmt: skip
    known = sorted(field.alias or name for name, field in section.model_fields.items())
    near = difflib.get_close_matches(location[-1], known, n=1)
    hint = f" (did you mean {'.'.join([*location[:-1], near[0]])}?)" if near else ""
    return f"not a setting of {'.'.join(location[:-1]) or 'the config'}{hint}; its settings: {', '.join(known)}"


def _found(tree: Any, path: list[str]) -> tuple[list[str], Any]:
    """The parts of an error's location that are keys of the config given (or indices of its lists), and the value
    they lead to; a part that is neither (a union member's tag) is passed over."""
    keys = []
    for part in path:
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        elif isinstance(tree, list | tuple) and part.isdigit() and int(part) < len(tree):
            tree = tree[int(part)]
        else:
            continue
        keys.append(part)
    return keys, tree
