"""A module's docstring and plain constants read from its source, without running it: a command's ``--help`` and
its argument checks come before torch and the frameworks load (issue 73.1), and the values stay declared where
they are defined (not copied into the command-line module)."""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path
from typing import Any


@cache
def _tree(module: str) -> ast.Module:
    """The module's syntax tree, its file found below its top-level package's folder (``find_spec`` of a submodule
    would import the packages above it: lightning's imports torch)."""
    top, *inner = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module)
    path = Path(spec.origin)
    if inner:
        below = path.parent.joinpath(*inner)
        path = below / "__init__.py" if below.is_dir() else below.with_suffix(".py")
    if not path.is_file():
        raise ModuleNotFoundError(module)
    return ast.parse(path.read_text(encoding="utf-8"))


def module_doc(module: str) -> str:
    """The module's docstring ('' where it has none)."""
    return ast.get_docstring(_tree(module), clean=False) or ""


def module_constant(module: str, name: str) -> Any:
    """The literal value a module assigns to ``name`` at its top level (a string, number, tuple ...); KeyError where
    it assigns none or not a literal."""
    for node in _tree(module).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets = [node.target] if isinstance(node, ast.AnnAssign) else targets
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                break
    raise KeyError(f"{module} assigns no literal {name}")


def class_mapping_keys(module: str, class_name: str, name: str) -> tuple[Any, ...]:
    """The literal keys of the mapping a module's class assigns to ``name`` in its body (a library's registry of
    names, its values functions); KeyError where it assigns none."""
    for node in _tree(module).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if (isinstance(item, ast.Assign) and isinstance(item.value, ast.Dict)
                        and any(isinstance(t, ast.Name) and t.id == name for t in item.targets)):
                    return tuple(ast.literal_eval(key) for key in item.value.keys if key is not None)
    raise KeyError(f"{module}.{class_name} assigns no mapping {name}")


def module_literal_choices(module: str, name: str) -> tuple[Any, ...]:
    """The values of the ``Literal[...]`` a module assigns to ``name`` at its top level (a library's own list of
    the choices it takes); KeyError where it assigns none."""
    for node in _tree(module).body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.Subscript) and ast.unparse(node.value.value).endswith("Literal")):
            items = node.value.slice
            return tuple(ast.literal_eval(item) for item in (items.elts if isinstance(items, ast.Tuple) else [items]))
    raise KeyError(f"{module} assigns no Literal {name}")


@cache
def callable_keywords(dotted: str) -> tuple[str, ...] | None:
    """The keyword arguments the function or class ``dotted`` takes, read from its module's source: a function's
    parameters, a class's own ``__init__``'s; None where its source alone cannot say (a ``**kwargs``, an inherited
    ``__init__``, a name the module imports from elsewhere, a module not found)."""
    module, _, name = dotted.rpartition(".")
    try:
        body = _tree(module).body
    except (ModuleNotFoundError, SyntaxError, OSError, ValueError):
        return None
    node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name), None)
    if isinstance(node, ast.ClassDef):
        node = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if not isinstance(node, ast.FunctionDef) or node.args.kwarg is not None:
        return None
    return tuple(a.arg for a in (*node.args.args, *node.args.kwonlyargs) if a.arg != "self")
