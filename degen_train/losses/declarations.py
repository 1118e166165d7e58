"""Every loss term as its own file declares it, read from the file's text without importing it (nor torch).

A term is a class decorated ``@register_term("NAME", section=...)`` in a file of this folder: that is the whole
registration, found by reading each file's syntax tree (``ast``), so adding a term is its file, its yaml and its test
with no list to edit. What the declaration holds is what the command line needs before the frameworks load: the
name, the section, the docstring's first line, each option's annotation and default (its constructor's keywords,
and its base class's where it passes ``**options`` on), and what it says of itself (``family``, ``data_format``,
whether it mixes samples). The annotations are evaluated with the names the file imports from ``typing`` and
``annotated_types`` only, so ``Literal["all", "seen"]`` and ``Annotated[float, Gt(0)]`` check a value as the built
term's constructor will (losses/options.py), and nothing of the file runs.

``import_term_modules`` imports every declaring file (the registry the build uses is then complete): the same list,
never a second one.
"""

from __future__ import annotations

import ast
import functools
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from degen_train.core.roles import Declared

LOSSES = Path(__file__).parent
PACKAGE = "degen_train.losses"
# annotation names taken from these alone (the roles: an option that loads a file says it is an input)
LIGHT_MODULES = ("typing", "annotated_types", "typing_extensions", "degen_train.core.roles")
NO_DEFAULT = object()


@dataclass(frozen=True)
class OptionDeclaration:
    """One keyword a term's constructor takes: its annotation's and default's source text."""

    name: str
    annotation: str | None
    default: str | None  # None: no default (the option must be given)

    def default_value(self) -> Any:
        """The default as a value (a literal), or NO_DEFAULT."""
        if self.default is None:
            return NO_DEFAULT
        try:
            return ast.literal_eval(self.default)
        except (ValueError, SyntaxError):
            return NO_DEFAULT


@dataclass(frozen=True)
class TermDeclaration:
    """A registered term, as its file declares it."""

    name: str
    section: str  # objective | regularizer
    module: str  # degen_train.losses.FILE
    class_name: str
    summary: str  # the class docstring's first paragraph, on one line
    options: tuple[OptionDeclaration, ...]
    accepts_any: bool  # a **kwargs no base resolves: any option goes
    family: str | None = None
    data_format: str | None = None
    mixes_samples: bool = False  # it sets mixes_samples (a batch statistic, in-batch negatives) for some options
    averages_over: tuple[str, ...] = ()
    namespace: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the annotations' names

    def option_names(self) -> list[str] | None:
        """The options its yaml may set (``weight`` and ``term`` too), None where any goes."""
        return None if self.accepts_any else ["weight", "term", *(o.name for o in self.options)]

    def hint(self, option: str) -> Any:
        """The option's annotation as a type (pydantic-checkable), None where it cannot be read without imports."""
        found = next((o for o in self.options if o.name == option), None)
        if found is None or found.annotation is None:
            return None
        try:
            return eval(found.annotation, {"__builtins__": BUILTINS}, dict(self.namespace))  # noqa: S307 - our own file
        except Exception:  # noqa: BLE001 - a name only the full module knows: left to the build's check
            return None


    def role(self, option: str) -> Declared | None:
        """The role the option's annotation declares (``Annotated[str | None, INPUT]``), or None: what it trains."""
        hint = self.hint(option)
        return next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Declared)), None)


BUILTINS = {name: getattr(__builtins__, name, None) if not isinstance(__builtins__, dict) else __builtins__[name]
            for name in ("int", "float", "str", "bool", "tuple", "list", "dict", "None")}  # fmt: skip


@dataclass(frozen=True)
class _Class:
    node: ast.ClassDef
    module: str
    namespace: dict[str, Any]


def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def _light_namespace(tree: ast.Module) -> dict[str, Any]:
    """The names the file imports from typing and annotated_types, imported for real (both are light)."""
    namespace: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in LIGHT_MODULES:
            module = importlib.import_module(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    namespace[alias.asname or alias.name] = getattr(module, alias.name)
    return namespace


@functools.cache
def _classes() -> dict[str, _Class]:
    """Every class of the losses folder by name (a term's base class may live in another file of it)."""
    found: dict[str, _Class] = {}
    for path in sorted(LOSSES.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        namespace = _light_namespace(tree)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, _Class(node, f"{PACKAGE}.{path.stem}", namespace))
    return found


def _registration(node: ast.ClassDef) -> tuple[str, str] | None:
    """(name, section) of ``@register_term("NAME", section="...")``, or None."""
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "register_term":
            name = _literal(decorator.args[0]) if decorator.args else None
            section = next((_literal(k.value) for k in decorator.keywords if k.arg == "section"), "regularizer")
            if isinstance(name, str):
                return name, str(section)
    return None


def _init(node: ast.ClassDef) -> ast.FunctionDef | None:
    return next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)


def _options(klass: _Class, seen: frozenset[str] = frozenset()) -> tuple[list[OptionDeclaration], bool]:
    """(the keyword options, whether any option goes), its bases' merged in where it passes **options on or has no
    constructor of its own."""
    init = _init(klass.node)
    bases = [b.id for b in klass.node.bases if isinstance(b, ast.Name) and b.id in _classes() and b.id not in seen]
    if init is None:
        return _options(_classes()[bases[0]], seen | {bases[0]}) if bases else ([], False)
    arguments = init.args
    positional = arguments.args[1:]  # self left out
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    options = [OptionDeclaration(a.arg, ast.unparse(a.annotation) if a.annotation else None,
                                 ast.unparse(d) if d is not None else None)
               for a, d in [*zip(positional, defaults, strict=True),
                            *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)]]  # fmt: skip
    if arguments.kwarg is None:
        return options, False
    if not bases:
        return options, True
    inherited, any_goes = _options(_classes()[bases[0]], seen | {bases[0]})
    own = {o.name for o in options}
    return options + [o for o in inherited if o.name not in own], any_goes


def _class_value(klass: _Class, attribute: str) -> Any:
    """A class-level literal assignment (``family = "decoder"``), looked up along the bases in the folder."""
    for node in klass.node.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []  # fmt: skip
        if any(getattr(t, "id", None) == attribute for t in targets) and getattr(node, "value", None) is not None:
            return _literal(node.value)
    for base in klass.node.bases:
        if isinstance(base, ast.Name) and base.id in _classes():
            return _class_value(_classes()[base.id], attribute)
    return None


def _sets_mixes_samples(klass: _Class) -> bool:
    """Whether the class (or a base in the folder) declares a mixes_samples value or assigns self.mixes_samples."""
    if _class_value(klass, "mixes_samples") not in (None, ""):
        return True
    for node in ast.walk(klass.node):
        if isinstance(node, ast.Attribute) and node.attr == "mixes_samples" and isinstance(node.ctx, ast.Store):
            return True
    return any(_sets_mixes_samples(_classes()[b.id]) for b in klass.node.bases
               if isinstance(b, ast.Name) and b.id in _classes())  # fmt: skip


def check_terms_fit_family(terms: dict[str, Any], family: str, model_name: str) -> None:
    """Each term (its declaration, spec or built term: ``family`` is its class's) fits the model's family, else one
    line naming the term, the model and the presets of the family it needs."""
    for key, term in terms.items():
        if term.family is not None and term.family != family:
            decoders, encoders = "model=gpt2_tiny, llama_tiny, qwen2_tiny, ...", "model=tiny, roberta_tiny, ..."
            hint = decoders if term.family == "decoder" else encoders
            raise ValueError(
                f"loss term {key!r} needs the {term.family} family but model={model_name} is {family}: use {hint}"
            )


@functools.cache
def declared_terms() -> dict[str, TermDeclaration]:
    """Every registered term of the losses folder, by its name, as its file declares it."""
    terms: dict[str, TermDeclaration] = {}
    for name, klass in _classes().items():
        registered = _registration(klass.node)
        if registered is None:
            continue
        term, section = registered
        if term in terms:
            raise ValueError(f"loss term name {term!r} is registered twice ({terms[term].module}, {klass.module})")
        options, any_goes = _options(klass, frozenset({name}))
        namespace = dict(klass.namespace)
        for base in klass.node.bases:  # a base's annotations use its own file's names
            if isinstance(base, ast.Name) and base.id in _classes():
                namespace = {**_classes()[base.id].namespace, **namespace}
        summary = " ".join((ast.get_docstring(klass.node) or "").split("\n\n")[0].split())  # its first paragraph
        averages = _class_value(klass, "averages_over")
        terms[term] = TermDeclaration(
            term, section, klass.module, name, summary, tuple(options), any_goes,
            family=_class_value(klass, "family"), data_format=_class_value(klass, "data_format"),
            mixes_samples=_sets_mixes_samples(klass), averages_over=tuple(averages or ()), namespace=namespace,
        )  # fmt: skip
    return terms


def import_term_modules() -> None:
    """Import every file that declares a term: each registers its class (losses/contract.register_term)."""
    for module in sorted({term.module for term in declared_terms().values()}):
        importlib.import_module(module)


def unknown_option_message(section: str, key: str, registered: str, option: str, options: list[str]) -> str:
    """What to say of ``section.key.option`` when the term has no such option: the close ones, then all of them."""
    import difflib

    close = difflib.get_close_matches(option, options, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    listed = ", ".join(options)
    return f"{section}.{key}.{option} is not an option of loss term {registered}; {hint}its options: {listed}"


TERM_KEY = r"^(objective|regularizer)\.(\w+)\.(\w+)="


def refuse_unknown_term_options(overrides: list[str]) -> None:
    """An ``objective.TERM.OPTION=VALUE`` / ``regularizer.TERM.OPTION=VALUE`` whose term has no such option is
    refused here, naming the close options and all of them, instead of Hydra's "use +key" (the wrong fix: it only
    moves the error to the build). Keys that are not a declared term's name (``term: NAME`` entries, a plugin's
    terms) are left to the config's check, which says the same."""
    import re

    for match in [m for m in (re.match(TERM_KEY, o) for o in overrides) if m is not None]:
        section, key, option = match.groups()
        declared = declared_terms().get(key)
        options = declared.option_names() if declared is not None else None
        if options is not None and option not in options:
            raise SystemExit("degen-train: error: " + unknown_option_message(section, key, key, option, options))


def check_term_sections(sections: dict[str, dict[str, Any] | None], *, plugins: bool = False) -> None:
    """The objective and regularizer sections as the config gives them, against the declarations: every key a
    declared term (or ``term: NAME`` naming one), every option one it takes, every value what its annotation allows
    (losses/options.py's words), every weight ≥ 0 and some term configured. ``plugins``: terms an installed package
    adds (entry points) are allowed unchecked. Raises ValueError naming the key; imports no framework."""
    from omegaconf import DictConfig, OmegaConf

    from degen_train.losses.options import TermOptionError, check_value

    declared, seen, configured = declared_terms(), set(), 0
    for section, entries in sections.items():
        if isinstance(entries, DictConfig):
            entries = OmegaConf.to_container(entries, resolve=True)
        for key, given in (entries or {}).items():
            plain = OmegaConf.to_container(given, resolve=True) if isinstance(given, DictConfig) else given
            options = dict(plain or {})
            registered = options.pop("term", key)
            if key in seen:
                raise ValueError(f"loss term {key!r} appears in more than one config section")
            seen.add(key)
            configured += 1
            weight = options.pop("weight", 1.0)
            if isinstance(weight, int | float) and not isinstance(weight, bool) and weight < 0:
                raise ValueError(f"{section}.{key}.weight must be >= 0, got {float(weight)}")
            term = declared.get(registered)
            if term is None:
                if plugins:
                    continue
                raise ValueError(f"unknown loss term {registered!r} in {section}; registered terms: "
                                 f"{', '.join(sorted(declared))}")  # fmt: skip
            allowed = term.option_names()
            for option, value in options.items():
                if allowed is not None and option not in allowed:
                    raise ValueError(unknown_option_message(section, key, registered, option, allowed))
                hint = term.hint(option)
                if hint is not None:
                    try:
                        check_value(f"{section}.{key}", option, value, hint)
                    except TermOptionError as error:
                        raise ValueError(str(error)) from None
    if not configured:
        raise ValueError("no loss terms configured: choose an objective, e.g. objective=mlm")
