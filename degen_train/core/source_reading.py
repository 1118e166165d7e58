"""A module's docstring and plain constants read from its source, without running it: a command's ``--help`` and
its argument checks come before torch and the frameworks load (issue 73.1), and the values stay declared where
they are defined (not copied into the command-line module)."""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from typing import Any


@cache
def _tree(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module)
    with open(spec.origin, encoding="utf-8") as handle:
        return ast.parse(handle.read())


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
