"""Every loss term by the name a config gives it, and the build of the configured ones.

Which code runs for ``regularizer=cosreg``: conf/regularizer/cosreg.yaml puts its options under the key ``cosreg``;
the module imported for that name below, degen_train/losses/cosreg.py, registers its class with
``@register_term("cosreg")``. The builtin terms are imported here by name (no module is found by searching a
folder); a separate package adds terms through the entry-point group ``degen_train.terms``:

    [project.entry-points."degen_train.terms"]
    my_term = "my_package.my_term"            # a module that uses @register_term, or
    my_term = "my_package.my_term:MyTerm"     # a LossTerm class, registered under the entry's name
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

# The builtin terms, one module each (the objectives, then the regularizers): importing a module registers its term.
from degen_train.losses import (  # noqa: F401  # noqa: F401
    agg,
    coco_clm,
    coco_scl,
    cosreg,
    electra,
    istar,
    mle,
    mlm,
    nsp,
    simcse,
    simctg,
    spectrum,
    tacl,
    unlikelihood,
)
from degen_train.losses.contract import TERM_REGISTRY, LossTerm, register_term
from degen_train.losses.options import TermOptionError

ENTRY_POINT_GROUP = "degen_train.terms"


def discover_terms() -> dict[str, type[LossTerm]]:
    """The registry: the builtin terms (imported above) and those of installed plugins (entry points)."""
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
        except Exception as error:  # a broken plugin must say which one it is
            raise ImportError(f"loss-term plugin {entry.name} = {entry.value!r} failed to import: {error}") from error
        if isinstance(loaded, type) and issubclass(loaded, LossTerm) and loaded not in TERM_REGISTRY.values():
            register_term(entry.name)(loaded)
    return TERM_REGISTRY


def term_options(term: type[LossTerm]) -> list[str] | None:
    """The options a term's yaml may set: its constructor's keywords, plus ``weight`` and ``term``; None when the
    constructor takes ``**kwargs`` (anything goes)."""
    parameters = inspect.signature(term.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    own = [p.name for p in parameters if p.name != "self" and p.kind is not inspect.Parameter.VAR_POSITIONAL]
    return ["weight", "term", *own]


def unknown_option_message(section: str, key: str, registered: str, option: str, options: list[str]) -> str:
    """What to say of ``section.key.option`` when the term has no such option: the close ones, then all of them."""
    close = difflib.get_close_matches(option, options, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    listed = ", ".join(options)
    return f"{section}.{key}.{option} is not an option of loss term {registered}; {hint}its options: {listed}"


def build_terms(sections: Mapping[str, Mapping[str, Any] | None]) -> tuple[dict[str, LossTerm], dict[str, float]]:
    """Build terms from config sections, e.g. {"objective": {"mlm": {"weight": 1}}, "regularizer": {}}.

    A key names a registered term, or any name with ``term: REGISTERED_NAME`` inside (to use one
    term twice with different settings). Every other key is a keyword argument of the term.
    """
    registry = discover_terms()
    terms: dict[str, LossTerm] = {}
    weights: dict[str, float] = {}
    for section, entries in sections.items():
        for key, options in (entries or {}).items():
            options = dict(options or {})
            registered = options.pop("term", key)
            if registered not in registry:
                raise ValueError(
                    f"unknown loss term {registered!r} in {section}; registered terms: {', '.join(sorted(registry))}"
                )
            weight = float(options.pop("weight", 1.0))
            if weight < 0:
                raise ValueError(f"{section}.{key}.weight must be >= 0, got {weight}")
            if key in terms:
                raise ValueError(f"loss term {key!r} appears in more than one config section")
            allowed = term_options(registry[registered])
            for option in options:
                if allowed is not None and option not in allowed:
                    raise ValueError(unknown_option_message(section, key, registered, option, allowed))
            try:
                terms[key] = registry[registered](**options)
            except TermOptionError as error:  # said under the key the config has, not the term's default one
                raise error.at(f"{section}.{key}") from None
            except TypeError as error:
                raise ValueError(f"bad options for loss term {section}.{key}: {error}") from error
            weights[key] = weight
    if not terms:
        raise ValueError("no loss terms configured: choose an objective, e.g. objective=mlm")
    return terms, weights


def with_compiled_heads(objective: Mapping[str, Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """model.compile_head=true: every objective term with a ``compiled`` option (mlm, mle) gets compiled=true and
    whole logits (chunk_size=null), the head and its cross-entropy as one graph (losses/compiled_head.py; equal loss
    and gradient, tests/unit/test_compiled_head.py). Terms without the option are left as they are."""
    registry = discover_terms()
    out: dict[str, dict[str, Any]] = {}
    for key, options in objective.items():
        options = dict(options or {})
        registered = registry.get(options.get("term", key))
        allowed = term_options(registered) if registered is not None else None
        if allowed is not None and "compiled" in allowed:
            options["compiled"] = True
            if "chunk_size" in allowed:
                options["chunk_size"] = None
        out[key] = options
    return out


TERM_KEY = re.compile(r"^(objective|regularizer)\.(\w+)\.(\w+)=")


def refuse_unknown_term_options(overrides: Sequence[str]) -> None:
    """An ``objective.TERM.OPTION=VALUE`` / ``regularizer.TERM.OPTION=VALUE`` whose term has no such option is
    refused here, naming the close options and all of them, instead of Hydra's "use +key" (the wrong fix: it only
    moves the error to the build). Keys that are not a registered term's name (``term: NAME`` entries) are left to
    the build's check, which says the same."""
    matches = [m for m in map(TERM_KEY.match, overrides) if m is not None]
    registry = discover_terms() if matches else {}
    for match in matches:
        section, key, option = match.groups()
        options = term_options(registry[key]) if key in registry else None
        if options is not None and option not in options:
            raise SystemExit("degen-train: error: " + unknown_option_message(section, key, key, option, options))
