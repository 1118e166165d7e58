"""A loss term's options checked against its constructor's annotations, before the constructor runs.

A term states what an option may be where it declares it (``Literal["all", "seen"]``, ``Annotated[float, Gt(0)]``,
``Annotated[float, Interval(gt=0, lt=1)] | None``); pydantic checks each option given, and a bad one is named in
one form for every term: ``regularizer.cosreg.rows='rare' is not one of all, seen``, ``objective.agg.alpha must be
in (0, 1), got 1.5``. The key path is the term's default one (``objective.NAME``, ``regularizer.NAME``) when a term
is built in Python, and the real one (``SECTION.KEY``) when ``build_terms`` builds it from a config.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError


class TermOptionError(ValueError):
    """A term option outside what its annotation allows; ``at(path)`` says it under another key path."""

    def __init__(self, path: str, option: str, value: Any, hint: Any, error: dict[str, Any]) -> None:
        self.option, self.value, self.hint, self.error = option, value, hint, error
        super().__init__(describe(f"{path}.{option}", value, hint, error))

    def at(self, path: str) -> ValueError:
        return ValueError(describe(f"{path}.{self.option}", self.value, self.hint, self.error))


def default_path(term: type) -> str:
    """Where a term's options live in a config when it is configured under its own name."""
    return f"{getattr(term, 'section', 'term')}.{getattr(term, 'name', term.__name__)}"


def checked(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` (a term's ``__init__``) that first checks every option given against its annotation."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def init_checked(self: Any, *args: Any, **kwargs: Any) -> None:
        given = dict(signature.bind(self, *args, **kwargs).arguments)
        given.pop("self", None)
        check_given(type(self), given, init)
        type(self).check_options(given)  # the rules between options (LossTerm.check_options), asked at stage 1 too
        init(self, *args, **kwargs)

    return init_checked  # functools.wraps keeps init as __wrapped__: check_given reads it


def check_given(term: type, given: dict[str, Any], init: Callable[..., None] | None = None) -> None:
    """Each option given to ``term`` against its constructor's annotation, with no module built."""
    init = init or getattr(term.__init__, "__wrapped__", term.__init__)
    hints = option_hints(init)
    for option, value in given.items():
        if option in hints:
            _check(term, option, value, hints[option])


@functools.cache
def option_hints(init: Callable[..., None]) -> dict[str, Any]:
    """The parameters' annotations resolved in the term's module (one that cannot be resolved is not checked)."""
    hints = {}
    for name, parameter in inspect.signature(init).parameters.items():
        annotation = parameter.annotation
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, init.__globals__)  # noqa: S307 - the term module's own annotation
            except Exception:  # noqa: BLE001 - a name only imported for type checking: left unchecked
                continue
        if annotation is not inspect.Parameter.empty:
            hints[name] = annotation
    return hints


@functools.cache
def _adapter(hint: Any) -> TypeAdapter:
    return TypeAdapter(hint)


def _check(term: type, option: str, value: Any, hint: Any) -> None:
    check_value(default_path(term), option, value, hint)


def check_value(path: str, option: str, value: Any, hint: Any) -> None:
    """``value`` of ``path.option`` against its annotation ``hint`` (strict: 'false' is no bool, '3' no int)."""
    try:
        _adapter(hint).validate_python(value, strict=True)
    except ValidationError as error:
        raise TermOptionError(path, option, value, hint, error.errors()[0]) from None


BOUND_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


def describe(key: str, value: Any, hint: Any, error: dict[str, Any]) -> str:
    """One message for a bad option: its choices, its range, or pydantic's words for a wrong type."""
    nullable, inner = _without_none(hint)
    or_null = " or null" if nullable else ""
    if typing.get_origin(inner) is typing.Literal:
        return f"{key}={value!r} is not one of {', '.join(map(str, typing.get_args(inner)))}{or_null}"
    rule = _range(inner)
    if rule and error["type"] in BOUND_ERRORS:
        return f"{key} must be {rule}{or_null}, got {value}"
    return f"{key}={value!r}: {error['msg']}"


def allowed(hint: Any) -> str | None:
    """What an annotation allows, said briefly: 'all|seen', '> 0', 'in (0, 1) or null'; None for a plain type."""
    nullable, inner = _without_none(hint)
    or_null = " or null" if nullable else ""
    if typing.get_origin(inner) is typing.Literal:
        return "|".join(map(str, typing.get_args(inner))) + ("|null" if nullable else "")
    rule = _range(inner)
    return f"{rule}{or_null}" if rule else None


def _without_none(hint: Any) -> tuple[bool, Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(rest) < len(typing.get_args(hint)) and len(rest) == 1:
            return True, rest[0]
    return False, hint


def _range(hint: Any) -> str | None:
    """'> 0', '>= 1', 'in (0, 1]' ... from an Annotated hint's annotated_types bounds; None without bounds."""
    if typing.get_origin(hint) is not typing.Annotated:
        return None
    bounds: dict[str, Any] = {}
    for item in typing.get_args(hint)[1:]:
        for name in ("gt", "ge", "lt", "le"):
            if getattr(item, name, None) is not None:  # Gt(0), Ge(1), Interval(gt=0, le=1), ...
                bounds[name] = getattr(item, name)
    low = f"({bounds['gt']}" if "gt" in bounds else f"[{bounds['ge']}" if "ge" in bounds else None
    high = f"{bounds['lt']})" if "lt" in bounds else f"{bounds['le']}]" if "le" in bounds else None
    if low and high:
        return f"in {low}, {high}"
    if low:
        return f"> {bounds['gt']}" if "gt" in bounds else f">= {bounds['ge']}"
    if high:
        return f"< {bounds['lt']}" if "lt" in bounds else f"<= {bounds['le']}"
    return None
