"""The manual's tables that list what the code holds, generated from it when the manual is built (mkdocs.yml's
``hooks``): docs/*.md write ``<!-- generated: NAME ARGUMENT -->`` where a list would otherwise be typed by hand and
forget the next loss, group file or setting.

- ``count ROLE``: how many settings declare ROLE (config/role_lookup.role_counts), docs/runs.md's table;
- ``choices GROUP``: every file of conf/GROUP, docs/running.md's table;
- ``terms``: every loss term as its file declares it (losses/declarations.py): its name, section, formula (its
  docstring's first paragraph), what it averages over and its options with their defaults, docs/losses.md.
"""

from __future__ import annotations

import re
from typing import Any

MARKER = re.compile(r"<!-- generated: (\w+)(?: ([\w/]+))? -->")


def count(role: str) -> str:
    from degen_train.config.role_lookup import role_counts
    from degen_train.core.roles import Role

    return str(role_counts()[Role(role)])


def choices(group: str) -> str:
    from degen_train.core.package_dir import config_dir

    names = sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))
    return ", ".join(f"`{name}`" for name in names)


def terms(_: str | None = None) -> str:
    from degen_train.cli.listing import term_switches, yaml_defaults
    from degen_train.losses.declarations import declared_terms

    configured = yaml_defaults()
    rows = ["| term | section | what it optimises (its docstring) | averages over | switches (yaml keys, defaults) |",
            "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, term in sorted(declared_terms().items()):
        family = f" ({term.family} only)" if term.family else ""
        over = ", ".join(term.averages_over) or ("its batch" if term.mixes_samples else "")
        switches = term_switches(term, configured.get(name)).replace("|", "\\|")
        summary = term.summary.replace("|", "\\|")
        rows.append(f"| `{name}` | {term.section}{family} | {summary} | {over} | {switches} |")
    return "\n".join(rows)


GENERATORS = {"count": count, "choices": choices, "terms": terms}


def render(markdown: str) -> str:
    """``markdown`` with every marker replaced by what it names; an unknown one is an error naming it."""

    def replace(match: re.Match) -> str:
        name, argument = match.group(1), match.group(2)
        if name not in GENERATORS:
            raise ValueError(f"{match.group(0)}: no generated table {name!r}; there are {', '.join(GENERATORS)}")
        return GENERATORS[name](argument)

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs' hook: each page's markdown with its generated tables filled in."""
    return render(markdown)
