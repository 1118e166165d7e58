"""``degen-train --list``: the recipes, model presets and loss terms (with their switches), from the files."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from omegaconf import OmegaConf

from degen_train.core.package_dir import config_dir
from degen_train.losses.declarations import NO_DEFAULT, TermDeclaration, declared_terms
from degen_train.losses.options import allowed

# A full stop and a space end a sentence, except after an abbreviation ("et al. 2022", "e.g. x", "vs. y").
SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bcf)[.!?](?=\s)")


def first_sentence(path: Path) -> str:
    """The first sentence of a yaml's opening comment (it may run over several lines), never cut mid-sentence."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            if words:
                break
            continue
        if "@package" in line:
            continue
        text = line.lstrip("#").strip()
        if not text and words:
            break
        if text.endswith(":"):  # a line that introduces an example command: the sentence is what came before
            words.append(text[:-1] + ".")
            break
        words.append(text)
    paragraph = " ".join(w for w in words if w)
    end = SENTENCE_END.search(paragraph)
    return paragraph[: end.end()] if end else paragraph


def yaml_defaults() -> dict[str, dict[str, object]]:
    """{term: {option: value}} as conf/objective and conf/regularizer set them: what a run gets by default, which
    may differ from the constructor's default (mle's chunk_size: 1024 in its yaml, None in the class)."""
    found: dict[str, dict[str, object]] = {}
    for group in ("objective", "regularizer"):
        for path in sorted((config_dir() / group).glob("*.yaml")):
            for term, options in (OmegaConf.to_container(OmegaConf.load(path)) or {}).items():
                if isinstance(options, dict):
                    found.setdefault(term, {}).update({k: v for k, v in options.items() if k not in ("weight", "term")})
    return found


def term_switches(term: TermDeclaration, configured: dict[str, object] | None = None) -> str:
    """key=default for each option the term declares (its constructor's keywords, and its base's where it passes
    **options on: losses/declarations.py), with what its annotation allows (the check losses/options.py applies):
    ``rows='all' (all|seen)``. ``configured``: the defaults conf/ gives the term, shown instead of the class's."""
    configured = configured or {}
    switches = []
    for option in term.options:
        default = option.default_value()
        if option.name not in configured and default is NO_DEFAULT:
            continue
        hint = term.hint(option.name)
        rule = allowed(hint) if hint is not None else None
        shown = configured[option.name] if option.name in configured else default
        switches.append(f"{option.name}={shown!r}" + (f" ({rule})" if rule else ""))
    return " ".join(switches)


def listing() -> str:
    conf = config_dir()
    lines = ["recipes (recipe=NAME):"]
    for path in sorted((conf / "recipe").glob("*.yaml")):
        described = textwrap.wrap(first_sentence(path), width=100) or [""]
        lines.append(f"  {path.stem:<18} {described[0]}")
        lines.extend(f"  {'':<18} {more}" for more in described[1:])
    lines.append("model presets (model=NAME):")
    for path in sorted((conf / "model").glob("*.yaml")):
        sizes = OmegaConf.load(path)
        arch = sizes.get("arch") or ("gpt2" if path.stem.startswith("gpt2") else "bert")
        widths = f"H={sizes.hidden_size} heads={sizes.num_heads} ffn={sizes.intermediate_size}"
        shape = f"{arch:<10} L={sizes.num_layers} {widths}"
        lines.append(f"  {path.stem:<18} {shape}")
    lines.append("loss terms (objective.NAME.KEY=VALUE or regularizer.NAME.KEY=VALUE; every term takes weight=):")
    configured = yaml_defaults()
    for name, term in sorted(declared_terms().items()):  # read from the term files, none imported (no torch)
        family = f" [{term.family} only]" if term.family else ""
        described = textwrap.wrap(term.summary + family, width=100) or [""]
        lines.append(f"  {name:<18} {described[0]}")
        lines.extend(f"  {'':<18} {more}" for more in described[1:])
        switches = term_switches(term, configured.get(name))
        if switches:
            wrapped = textwrap.wrap(f"switches: {switches}", width=98, subsequent_indent=" " * 10)
            lines.extend(f"  {'':<18}   {part}" for part in wrapped)
    for group in ("objective", "regularizer", "data", "optimizer", "scheduler", "strategy", "logger", "cluster"):
        choices = sorted(p.stem for p in (conf / group).glob("*.yaml"))
        lines.append(f"{group}=: {', '.join(choices)}")
    return "\n".join(lines)


def print_listing() -> None:
    print(listing())
