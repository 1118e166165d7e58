"""The manual and the front page: every shell command they show is one the house accepts as written.

Each ```bash block of README.md and docs/*.md is read command by command (continuation lines joined, comments
dropped). degen-train commands are composed and checked as a run checks them before it touches anything (Hydra's
composition, the schema, the command-line refusals; a sweep's first value of each swept key); the other degen-*
commands are parsed by their own argument parsers; ``make`` targets must exist in the Makefile and bench parts in
bench/run.py. Programs that are not ours (pip, torchrun, git, ...) are named in OTHER_PROGRAMS. docs/reproduce/ is
written by degen-reproduce, its commands the record of what ran. The manual itself is built in strict mode by
``make docs`` (a broken link or a page missing from the nav fails), which ``make test`` runs first.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MODULES = {"degen-finetune": "finetune", "degen-eval": "evaluate", "degen-analyze": "analyze",
           "degen-report": "report", "degen-convert": "convert", "degen-cluster": "cluster"}  # fmt: skip
OTHER_PROGRAMS = {"source", "export", "pip", "torchrun", "git", "cd", "srun", "sbatch", "scontrol", "kill", "ls",
                  "cat", "CI=true", "bash", "python", "mkdocs", ".venv/bin/mkdocs", "du", "nvidia-smi"}  # fmt: skip
SHELL_BLOCK = re.compile(r"^```(bash|sh|shell)\s*$")
# Shell variables a command takes from its environment, at a value they could have, to check the rest with.
EXAMPLE_VALUES = {"SLURM_NNODES": "2", "SLURM_NODEID": "0"}


def shell_commands(page: Path) -> list[tuple[int, list[str]]]:
    """(line number, words) of each command in the page's shell blocks."""
    commands, inside, pending, start = [], False, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            inside = bool(SHELL_BLOCK.match(line)) and not inside
            continue
        if not inside:
            continue
        if not pending:
            start = number
        pending += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if line.rstrip().endswith("\\"):
            continue
        for name, value in EXAMPLE_VALUES.items():
            pending = pending.replace(f"${name}", value)
        words = shlex.split(pending, comments=True)
        pending = ""
        if words:
            commands.append((start, words))
    return commands


ALL = [(page, number, words) for page in PAGES for number, words in shell_commands(page)]


class Parsed(Exception):
    """Raised by the patched parse_args once a command line has parsed: nothing runs."""


def parses(main, argv: list[str]) -> None:  # noqa: ANN001
    original = argparse.ArgumentParser.parse_args

    def stop(self: argparse.ArgumentParser, args: list[str] | None = None, namespace: object = None) -> None:
        original(self, args, namespace)
        raise Parsed

    with mock.patch.object(argparse.ArgumentParser, "parse_args", stop), pytest.raises(Parsed):
        main(argv)


def first_of_each_sweep(arguments: list[str]) -> list[str]:
    """A multirun's overrides with each swept key at its first value (Hydra's own override parser)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    chosen = []
    for override in OverridesParser.create().parse_overrides(arguments):
        key = override.get_key_element()
        if override.is_sweep_override():
            chosen.append(f"{key}={next(iter(override.sweep_string_iterator()))}")
        else:
            chosen.append(f"{key}={override.get_value_element_as_str()}")
    return chosen


def check_degen_train(arguments: list[str], earlier: dict[str, list[str]]) -> None:
    """``earlier``: the overrides of the page's earlier runs by their hydra.run.dir, so that a branch is composed
    with its parent's overrides first, as config.inherited.inherited_overrides does with the parent's folder."""
    from degen_train.config import load_config
    from degen_train.config.overrides import refuse_unquoted_equals
    from degen_train.config.schema import validate_config
    from degen_train.losses.catalog import refuse_unknown_term_options

    if arguments[:1] in (["--list"], ["--reproduce"]):  # the listing and a rerun of a folder (tests/test_records.py)
        return
    arguments = [a for a in arguments if a != "-m"]
    arguments = first_of_each_sweep(arguments)
    run_dir = next((a.split("=", 1)[1] for a in arguments if a.startswith("hydra.run.dir=")), None)
    arguments = [a for a in arguments if not a.startswith("hydra")]
    if run_dir:
        earlier[run_dir] = arguments
    parent = next((a.split("=", 1)[1].rpartition("@")[0] for a in arguments if a.startswith("branch_from=")), None)
    if parent in earlier:
        arguments = [*earlier[parent], *arguments]
    refuse_unknown_term_options(arguments)
    refuse_unquoted_equals(arguments)
    validate_config(load_config(arguments))


def hydra_reads(arguments: list[str], earlier: dict[str, list[str]], folder: Path) -> None:
    """The command as printed, through degen-train's own assembly (a branch's parent's overrides read from its
    folder, Hydra's flags kept before the overrides) and Hydra's own argument parser: issue 47.2's documented
    cooldown sweep (`-m branch_from=…`) failed there with "unrecognized arguments"."""
    import json
    import os

    from hydra._internal.utils import get_args_parser

    from degen_train.cli.train import command_line

    if arguments[:1] in (["--list"], ["--reproduce"]):
        return
    from degen_train.core.own_runs import new_run_id, remember

    for run_dir, recorded in earlier.items():  # the page's earlier runs, as folders of the reader's own runs
        (folder / run_dir).mkdir(parents=True, exist_ok=True)
        (folder / run_dir / "overrides.json").write_text(json.dumps(recorded))
        (folder / run_dir / "config.yaml").write_text("{}\n")
        remember(folder / run_dir, new_run_id())
    cwd = os.getcwd()
    os.chdir(folder)  # the command's relative folders are made here, not in the checkout
    try:
        get_args_parser().parse_args(command_line(arguments))
    finally:
        os.chdir(cwd)


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, flags=re.MULTILINE))


def bench_parts() -> set[str]:
    from bench.run import PARTS

    return {*PARTS, "gpu"}


RUNS_BY_PAGE: dict[Path, dict[str, list[str]]] = {}


@pytest.mark.parametrize(("page", "number", "words"), ALL, ids=[f"{p.name}:{n}" for p, n, _ in ALL])
def test_each_command_shown_is_accepted_as_written(page: Path, number: int, words: list[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(REPO)
    program, arguments = words[0], words[1:]
    if program == "degen-train":
        earlier = RUNS_BY_PAGE.setdefault(page, {})
        if not earlier:  # the page's earlier commands, in order (a test may run alone)
            for _, before in shell_commands(page):
                if before == words:
                    break
                if before[0] == "degen-train" and before[1:2] not in (["--list"], ["--reproduce"]):
                    check_degen_train(before[1:], earlier)
        check_degen_train(arguments, earlier)
        hydra_reads(arguments, earlier, tmp_path)
    elif program in MODULES:
        module = MODULES[program]
        main = __import__(f"degen_train.cli.{module}", fromlist=["main"]).main
        parses(main, arguments)
    elif program == "degen-reproduce":
        from degen_train.cli.reproduce import load_settings

        load_settings(arguments)
    elif program == "make":
        targets = [a for a in arguments if "=" not in a]
        assert set(targets) <= makefile_targets(), f"{page.name}:{number}: no make target {targets}"
    elif program == "python" and arguments[:1] == ["bench/run.py"]:
        assert set(arguments[1:]) <= bench_parts(), f"{page.name}:{number}: no bench part {arguments[1:]}"
    else:
        assert program in OTHER_PROGRAMS, f"{page.name}:{number}: {program!r} is neither ours nor a known program"


INLINE_COMMAND = re.compile(r"`(degen-(?:eval|analyze|finetune|report|convert) [^-`.][^`]*)`")
# A command written in running text (not a flag mentioned by name): its optional parts in [brackets] dropped, the
# rest parsed as printed, placeholders (MODEL, DIR) standing for values.
INLINE = [(page, match.group(1)) for page in PAGES
          for match in INLINE_COMMAND.finditer(re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S))
          if "..." not in match.group(1) and "…" not in match.group(1)]  # fmt: skip


@pytest.mark.parametrize(("page", "command"), INLINE, ids=[f"{p.name}:{c.split()[0]}" for p, c in INLINE])
def test_each_command_in_the_text_parses_as_written(page: Path, command: str) -> None:
    """A command in a sentence is one a user copies too: docs/measuring.md showed `degen-eval MODEL --w8a8 TEXT`
    without the --out degen-eval requires."""
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", command))
    module = {"degen-finetune": "finetune", "degen-eval": "evaluate", "degen-analyze": "analyze",
              "degen-report": "report", "degen-convert": "convert"}[words[0]]  # fmt: skip
    parses(__import__(f"degen_train.cli.{module}", fromlist=["main"]).main, words[1:])


def test_the_pages_show_commands() -> None:
    """The parser above finds the commands (a change of fence style would silently check nothing)."""
    programs = {words[0] for _, _, words in ALL}
    assert {"degen-train", "degen-finetune", "degen-report", "make"} <= programs and len(ALL) > 40


def test_every_page_is_in_the_manuals_nav() -> None:
    import yaml

    nav = str(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    pages = [p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")]
    assert [p for p in pages if p not in nav] == []
    assert len((REPO / "README.md").read_text().splitlines()) <= 200  # a front page, the rest in the manual


@pytest.mark.parametrize("group", ["objective", "regularizer", "data", "trainer", "strategy"])
def test_the_group_table_lists_every_file_of_the_group(group: str) -> None:
    """Issue 56.6: docs/running.md's regularizer row left out SimCTG and unlikelihood; each group's row names every
    file of its conf/ folder, so a new loss cannot be missing from it."""
    from degen_train.cli.manual_tables import render

    row = next(line for line in render((REPO / "docs" / "running.md").read_text()).splitlines()
               if line.startswith(f"| `{group}`"))  # fmt: skip
    named = set(re.findall(r"`([\w]+)`", row.split("|")[2]))
    files = {path.stem for path in (REPO / "conf" / group).glob("*.yaml")}
    assert files <= named, sorted(files - named)


def test_the_losses_page_lists_every_term_from_its_file() -> None:
    """Issue 70.4: docs/losses.md is held to the registry. Its table of terms is generated from the term files when
    the manual is built (mkdocs.yml's hooks), so every declared term, with its formula and switches, is on it."""
    from degen_train.cli.manual_tables import render
    from degen_train.losses.declarations import declared_terms

    source = (REPO / "docs" / "losses.md").read_text()
    assert "<!-- generated: terms -->" in source
    page = render(source)
    for name, term in declared_terms().items():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert term.section in row and term.summary.split()[0] in row
    assert "degen_train/cli/manual_tables.py" in (REPO / "mkdocs.yml").read_text()
