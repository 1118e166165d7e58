"""Every loss term by the name a config gives it, and the build of the configured ones.

Which code runs for ``regularizer=cosreg``: conf/regularizer/cosreg.yaml puts its options under the key ``cosreg``;
degen_train/losses/cosreg.py declares ``@register_term("cosreg")`` on its class. The files are found by what they
declare (losses/declarations.py reads each file of the folder; no list names them), and importing them registers
their classes. A separate package adds terms through the entry-point group ``degen_train.terms``:

    [project.entry-points."degen_train.terms"]
    my_term = "my_package.my_term"            # a module that uses @register_term, or
    my_term = "my_package.my_term:MyTerm"     # a LossTerm class, registered under the entry's name
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from degen_train.losses.contract import TERM_REGISTRY, LossTerm, TermContext, register_term
from degen_train.losses.declarations import (  # noqa: F401 - the command line's light checks, said here too
    check_term_sections,
    check_terms_fit_family,
    declared_terms,
    import_term_modules,
    refuse_unknown_term_options,
    unknown_option_message,
)
from degen_train.losses.options import TermOptionError, check_given

ENTRY_POINT_GROUP = "degen_train.terms"
import_term_modules()  # every term file of the folder registers its class


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
    """The options a term's yaml may set, ``weight`` and ``term`` included: its declaration's (its constructor's
    keywords and those of a base it passes **options on to, losses/declarations.py), else, for a plugin's term, its
    constructor's keywords; None when a plugin's constructor takes ``**kwargs`` (anything goes)."""
    declared = declared_terms().get(getattr(term, "name", ""))
    if declared is not None and declared.module == term.__module__:
        return declared.option_names()
    return signature_options(term)


def signature_options(term: type[LossTerm]) -> list[str] | None:
    """``weight``, ``term`` and the constructor's own keywords; None when it takes ``**kwargs``."""
    parameters = inspect.signature(term.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    own = [p.name for p in parameters if p.name != "self" and p.kind is not inspect.Parameter.VAR_POSITIONAL]
    return ["weight", "term", *own]


@dataclass(frozen=True)
class TermSpec:
    """A configured term before it is built: its key in the config, its class, its options (checked) and weight. The
    check stage makes these (no module built); the build stage builds them (``build``)."""

    section: str  # objective | regularizer
    key: str  # its name in the section (a registered name, or any with ``term:`` inside)
    term: type[LossTerm]
    options: dict[str, Any]
    weight: float

    @property
    def path(self) -> str:
        return f"{self.section}.{self.key}"

    def check(self) -> None:
        """Each option against its annotation and the term's rules between them (LossTerm.check_options). An option
        whose annotation the term's declaration reads was checked by it with the config (check_term_sections, before
        the frameworks loaded): only the others (a plugin's, a name only the full module knows) are checked here, so
        no option is checked twice."""
        declared = declared_terms().get(getattr(self.term, "name", ""))
        if declared is not None and declared.module != self.term.__module__:
            declared = None  # a plugin registered under a house name: its own constructor's annotations
        unread = {option: value for option, value in self.options.items()
                  if declared is None or declared.hint(option) is None}  # fmt: skip
        try:
            check_given(self.term, unread)
            self.term.check_options(dict(self.options))
        except TermOptionError as error:  # said under the key the config has, not the term's default one
            raise error.at(self.path) from None

    def check_inputs(self) -> None:
        """The files the term's input options name, found (LossTerm.check_inputs: the read stage's question)."""
        self.term.check_inputs(dict(self.options))

    def build(self) -> LossTerm:
        try:
            return self.term(**self.options)
        except TermOptionError as error:
            raise error.at(self.path) from None
        except TypeError as error:
            raise ValueError(f"bad options for loss term {self.path}: {error}") from error


def term_specs(sections: Mapping[str, Mapping[str, Any] | None], *, checked: bool = False) -> dict[str, TermSpec]:
    """The configured terms from config sections, e.g. {"objective": {"mlm": {"weight": 1}}, "regularizer": {}},
    each checked (``TermSpec.check``), none built.

    A key names a registered term, or any name with ``term: REGISTERED_NAME`` inside (to use one
    term twice with different settings). Every other key is a keyword argument of the term.
    """
    registry = discover_terms()
    if not checked:  # the command checked them already, before the frameworks loaded (run/config_alone.py)
        plugins = set(registry) - set(declared_terms())
        check_term_sections({section: dict(entries or {}) for section, entries in sections.items()},
                            plugins=bool(plugins))  # fmt: skip
    specs: dict[str, TermSpec] = {}
    for section, entries in sections.items():
        for key, options in (entries or {}).items():
            options = dict(options or {})
            registered = options.pop("term", key)
            if registered not in registry:
                raise ValueError(
                    f"unknown loss term {registered!r} in {section}; registered terms: {', '.join(sorted(registry))}"
                )
            weight = float(options.pop("weight", 1.0))
            allowed = term_options(registry[registered])
            for option in options:  # a plugin's term: its constructor's keywords (declared terms were checked above)
                if allowed is not None and option not in allowed:
                    raise ValueError(unknown_option_message(section, key, registered, option, allowed))
            specs[key] = TermSpec(section, key, registry[registered], options, weight)
            specs[key].check()
    if not specs:
        raise ValueError("no loss terms configured: choose an objective, e.g. objective=mlm")
    return specs


def build_specs(specs: Mapping[str, TermSpec]) -> tuple[dict[str, LossTerm], dict[str, float]]:
    """The terms built from their specs, and their weights."""
    return {key: spec.build() for key, spec in specs.items()}, {key: spec.weight for key, spec in specs.items()}


def build_terms(sections: Mapping[str, Mapping[str, Any] | None], *,
                checked: bool = False) -> tuple[dict[str, LossTerm], dict[str, float]]:  # fmt: skip
    """Build terms from config sections (``term_specs``, then each built): the terms and their weights."""
    return build_specs(term_specs(sections, checked=checked))


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


def data_format_for(terms: Mapping[str, LossTerm | TermSpec], family: str, model_name: str) -> str:
    """Check every term (built, or its spec: family and layout are its class's) fits the model family and return
    the example layout they need."""
    check_terms_fit_family(_classes_of(terms), family, model_name)
    return data_format_of(terms, family)


def data_format_of(terms: Mapping[str, LossTerm | TermSpec], family: str) -> str:
    """The example layout the terms need (their families already checked: run/config_alone.py)."""
    terms = _classes_of(terms)
    formats = {term.data_format for term in terms.values() if term.data_format}
    if "mlm_nsp" in formats:
        return "mlm_nsp"
    if formats:
        return formats.pop()
    return "mlm" if family == "encoder" else "causal"


def _classes_of(terms: Mapping[str, LossTerm | TermSpec]) -> dict[str, Any]:
    return {key: term.term if isinstance(term, TermSpec) else term for key, term in terms.items()}


def setup_terms(terms: dict[str, LossTerm], context: TermContext) -> None:
    for term in terms.values():
        term.setup(context)
