"""``degen-train --list``: the recipes, model presets and loss terms (with their switches), from the files."""

from __future__ import annotations

import inspect
from pathlib import Path

from omegaconf import OmegaConf

from degen_train.catalog import discover_terms
from degen_train.cli.paths import config_dir


def first_comment(path: Path) -> str:
    """The first comment line of a yaml that is not a Hydra package directive."""
    for line in path.read_text().splitlines():
        if line.startswith("#") and "@package" not in line:
            return line.lstrip("# ").strip()
    return ""


def term_switches(cls: type) -> str:
    """key=default for each keyword of the term's constructor, and of its bases' when it passes **options on."""
    switches: dict[str, object] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass.__module__.startswith("torch"):
            continue
        parameters = inspect.signature(klass.__init__).parameters.values()
        for p in parameters:
            if p.default is not inspect.Parameter.empty:
                switches.setdefault(p.name, p.default)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    return " ".join(f"{name}={default!r}" for name, default in switches.items())


def listing() -> str:
    conf = config_dir()
    lines = ["recipes (recipe=NAME):"]
    for path in sorted((conf / "recipe").glob("*.yaml")):
        lines.append(f"  {path.stem:<18} {first_comment(path)}")
    lines.append("model presets (model=NAME):")
    for path in sorted((conf / "model").glob("*.yaml")):
        sizes = OmegaConf.load(path)
        arch = sizes.get("arch") or ("gpt2" if path.stem.startswith("gpt2") else "bert")
        widths = f"H={sizes.hidden_size} heads={sizes.num_heads} ffn={sizes.intermediate_size}"
        shape = f"{arch:<10} L={sizes.num_layers} {widths}"
        lines.append(f"  {path.stem:<18} {shape}")
    lines.append("loss terms (objective.NAME.KEY=VALUE or regularizer.NAME.KEY=VALUE; every term takes weight=):")
    for name, cls in sorted(discover_terms().items()):
        summary = (inspect.getdoc(cls) or "").splitlines()[0]
        family = f" [{cls.family} only]" if cls.family else ""
        lines.append(f"  {name:<18} {summary}{family}")
        switches = term_switches(cls)
        if switches:
            lines.append(f"  {'':<18}   switches: {switches}")
    for group in ("objective", "regularizer", "data", "optimizer", "scheduler", "strategy", "logger", "cluster"):
        choices = sorted(p.stem for p in (conf / group).glob("*.yaml"))
        lines.append(f"{group}=: {', '.join(choices)}")
    return "\n".join(lines)


def print_listing() -> None:
    print(listing())
