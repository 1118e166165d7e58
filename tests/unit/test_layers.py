"""The house's levels (degen_train/__init__.py, docs/house.md): packages side by side on nine levels, and the arrows
between them listed one by one. An import (a lazy one inside a function, or a module loaded by its name through
importlib, included) that no arrow allows fails; so does an allowed arrow that no import uses, so the list stays the
real graph, not a wish.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import degen_train

PACKAGE = Path(degen_train.__file__).parent
LEVELS = [  # top to bottom; packages on one level never import each other
    ["cli"],
    ["report", "reproduce", "cluster"],
    ["run"],
    ["evaluation"],
    ["config"],
    ["callbacks"],
    ["metrics", "finetune"],
    ["losses", "data"],
    ["models"],
    ["storage", "devices", "optim"],
    ["core"],
]
ALLOWED = {  # package: the packages it imports
    "cli": {"callbacks", "cluster", "config", "core", "data", "evaluation", "finetune", "losses", "metrics", "models",
            "report", "reproduce", "run", "storage"},
    "report": {"config", "core", "metrics", "run"},
    "cluster": {"core", "run", "storage", "config"},
    "reproduce": {"config", "core", "evaluation", "finetune", "metrics", "run"},
    "run": {"callbacks", "config", "core", "data", "devices", "evaluation", "finetune", "losses", "metrics", "models",
            "optim", "storage"},
    "evaluation": {"config", "core", "data", "metrics", "models"},
    # the composition of the components' own typed sections (data/, models/, optim/, callbacks/, finetune/ section.py;
    # a loss term's options by its declaration in losses/)
    "config": {"callbacks", "core", "data", "finetune", "losses", "models", "optim"},
    "callbacks": {"core", "devices", "metrics", "storage"},
    "metrics": {"core", "data", "devices", "models"},
    "finetune": {"core", "data", "models"},
    "losses": {"core", "devices", "models"},
    "data": {"core", "devices"},
    "models": {"core"},
    "storage": {"core"},
    "devices": set(),
    "optim": {"core"},
    "core": set(),
}  # fmt: skip
LOADERS = ("import_module", "__import__", "find_spec")  # a module named by a string is an import too


def imported_packages(path: Path) -> list[tuple[str, int]]:
    """(package, line) of every ``degen_train.<package>`` this module imports: at the top, inside a function, or by
    name through importlib."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("degen_train."):
            found.append((node.module.split(".")[1], node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module == "degen_train":
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name.split(".")[1], node.lineno) for a in node.names if a.name.startswith("degen_train.")]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in LOADERS:
            named = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            found += [(name.split(".")[1], node.lineno) for name in named if name.startswith("degen_train.")]
    return found


def level_of(package: str) -> int:
    return next(i for i, level in enumerate(LEVELS) if package in level)


def test_every_package_is_on_one_level_and_the_docstring_draws_them() -> None:
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    placed = [package for level in LEVELS for package in level]
    assert sorted(placed) == packages and sorted(ALLOWED) == packages
    drawn = [line.split(":")[0].strip() for line in degen_train.__doc__.splitlines() if line.startswith("    ")]
    drawn = [" ".join(names.split()) for names in drawn]
    assert drawn == [" ".join(level) for level in LEVELS]


def test_every_allowed_arrow_points_down_and_is_used() -> None:
    for package, targets in ALLOWED.items():
        for target in targets:
            assert level_of(target) > level_of(package), f"{package} -> {target} does not point to a lower level"
    used = {package: set() for package in ALLOWED}
    for package in ALLOWED:
        for path in (PACKAGE / package).rglob("*.py"):
            used[package] |= {target for target, _ in imported_packages(path) if target != package}
    unused = {package: sorted(ALLOWED[package] - used[package]) for package in ALLOWED}
    unused = {package: targets for package, targets in unused.items() if targets}
    assert not unused, f"arrows no import uses (remove them): {unused}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_along_its_arrows(package: str) -> None:
    stray = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for target, line in imported_packages(path):
            if target != package and target not in ALLOWED[package]:
                stray.append(f"{path.relative_to(PACKAGE)}:{line} imports degen_train.{target}")
    assert not stray, "imports no arrow allows (degen_train/__init__.py draws the levels):\n" + "\n".join(stray)


def test_the_check_finds_a_lazy_and_a_named_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import importlib\ndef f():\n    from degen_train.run.pretrain import train\n"
                      "    importlib.import_module('degen_train.cli.train')\n")  # fmt: skip
    assert imported_packages(module) == [("run", 3), ("cli", 4)]
