"""The house's levels (degen_train/__init__.py, docs/house.md): packages side by side on eleven levels, and the
arrows between them listed one by one. An import (a lazy one inside a function, or a module loaded by its name through
importlib, included) that no arrow allows fails; so does an allowed arrow that no import uses, so the list stays the
real graph, not a wish.

A component's typed section (``<package>/section.py`` or ``sections.py``) is a leaf beside its code: it imports only
core/ and other leaves, and so any package above core may import it whatever the levels (config/ composes the
sections of run/ and evaluation/, which stand above it). An import of a leaf is no arrow. The loss terms'
declarations (read from their files' text) and the checks of their options are the losses section's own leaves.
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
    # the composition of the components' own typed sections: it reaches them through their sections alone (leaves)
    "config": {"core"},
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


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every ``degen_train.<package>...`` this module imports: at the top, inside a function, or by
    name through importlib (``from degen_train.run import sections`` names ``degen_train.run.sections``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("degen_train."):
            inside = node.module.count(".") == 1  # from degen_train.PACKAGE import MODULE
            found += [(f"{node.module}.{a.name}" if inside else node.module, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "degen_train":
            found += [(f"degen_train.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("degen_train.")]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in LOADERS:
            named = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            found += [(name, node.lineno) for name in named if name.startswith("degen_train.")]
    return list(dict.fromkeys(found))


def imported_packages(path: Path) -> list[tuple[str, int]]:
    """(package, line) of every ``degen_train.<package>`` this module imports, a section (a leaf) left out."""
    packages = [(module.split(".")[1], line) for module, line in imported_modules(path) if not is_leaf(module)]
    return list(dict.fromkeys(packages))


SECTION_HELPERS = ("degen_train.losses.declarations", "degen_train.losses.options")


def is_leaf(module: str) -> bool:
    """``degen_train.<package>.section`` or ``.sections`` (a component's typed section; core's own is core), or one of
    the losses section's helpers."""
    parts = module.split(".")
    return (len(parts) >= 3 and parts[2] in ("section", "sections") and parts[1] != "core") or \
        ".".join(parts[:3]) in SECTION_HELPERS  # fmt: skip


LEAF_FILES = sorted([path for name in ("section.py", "sections.py") for path in PACKAGE.glob(f"*/{name}")
                     if path.parent.name != "core"] +
                    [PACKAGE.parent / (module.replace(".", "/") + ".py") for module in SECTION_HELPERS])  # fmt: skip


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


@pytest.mark.parametrize("path", LEAF_FILES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_section_imports_only_core_and_other_leaves(path: Path) -> None:
    """A section is a leaf (module docstring): anything else it imports would be an arrow no level allows."""
    stray = [f"{path.relative_to(PACKAGE)}:{line} imports {module}" for module, line in imported_modules(path)
             if not is_leaf(module) and module.split(".")[1] != "core"]  # fmt: skip
    assert not stray, "a section imports only degen_train.core and other leaves:\n" + "\n".join(stray)
    init = ast.parse((path.parent / "__init__.py").read_text())
    imports = [node for node in ast.walk(init) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert all(isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in imports), \
        "its package's __init__ imports nothing: importing the section would run it"  # fmt: skip


def test_an_import_of_a_section_is_told_apart(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from degen_train.run.sections import PlanConfig\nfrom degen_train.run import sections, build\n")
    assert imported_packages(module) == [("run", 2)]
    assert [m for m, _ in imported_modules(module)] == ["degen_train.run.sections"] * 2 + ["degen_train.run.build"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def circles_in(graph: dict[str, list[str]]) -> list[list[str]]:
    """Import circles of ``graph`` ({module: the modules it imports}), one per depth-first walk that meets one."""
    state: dict[str, str] = {}  # name: "open" while its imports are walked, "done" after

    def circle_from(name: str, trail: list[str]) -> list[str] | None:
        state[name] = "open"
        for target in graph.get(name, []):
            if state.get(target) == "open":
                return [*trail[trail.index(target) :], target]
            if target not in state and (found := circle_from(target, [*trail, target])):
                return found
        state[name] = "done"
        return None

    return [found for name in sorted(graph) if name not in state and (found := circle_from(name, [name]))]


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Issue 70.3: modules form no import circle, lazy imports inside functions included (config's roles, keys and
    schema imported each other once): each module can be read, and moved, after the ones it imports."""
    names = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {name: sorted({target for module, _ in imported_modules(path)
                           for target in (module, module.rsplit(".", 1)[0]) if target in names and target != name
                           and not name.startswith(target + ".")}) for name, path in names.items()}  # fmt: skip
    circles = circles_in(graph)
    assert not circles, "modules that import each other: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_circle_check_finds_one_through_a_lazy_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from degen_train.callbacks.throughput import sweep_left\n")
    assert [m for m, _ in imported_modules(module)] == ["degen_train.callbacks.throughput"]
    graph = {"a": ["b"], "b": ["c"], "c": ["b", "d"], "d": []}
    assert circles_in(graph) == [["b", "c", "b"]]
    assert circles_in({"a": ["b"], "b": []}) == []
