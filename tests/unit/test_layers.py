"""The house's floors (degen_train/__init__.py, docs/house.md): a package imports only from packages below it.

Lazy imports inside functions count too: an upward import there is the same tangle, only hidden until it runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import degen_train

PACKAGE = Path(degen_train.__file__).parent
FLOORS = ["cli", "reproduce", "report", "run", "evaluation", "finetune", "callbacks", "objectives", "regularizers",
          "metrics", "data", "models", "config", "terms", "optim", "storage", "devices", "core"]  # fmt: skip


def imported_packages(path: Path) -> list[tuple[str, int]]:
    """(package, line) of every ``degen_train.<package>`` this module imports, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("degen_train."):
            found.append((node.module.split(".")[1], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name.split(".")[1], node.lineno) for a in node.names if a.name.startswith("degen_train.")]
    return found


def test_every_package_has_a_floor_and_the_docstring_lists_them_in_order() -> None:
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert packages == sorted(FLOORS)
    listed = [line.split("/")[0].strip() for line in degen_train.__doc__.splitlines() if line.startswith("    ")
              and "/" in line.split()[0]]  # fmt: skip
    assert listed == FLOORS


@pytest.mark.parametrize("floor", FLOORS)
def test_a_package_imports_only_from_the_floors_below_it(floor: str) -> None:
    upward = []
    for path in sorted((PACKAGE / floor).rglob("*.py")):
        for target, line in imported_packages(path):
            if target != floor and target in FLOORS and FLOORS.index(target) < FLOORS.index(floor):
                upward.append(f"{path.relative_to(PACKAGE)}:{line} imports degen_train.{target}")
    assert not upward, "imports from a floor above:\n" + "\n".join(upward)


def test_the_check_finds_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from degen_train.run.pretrain import train\n")
    assert imported_packages(module) == [("run", 2)]
