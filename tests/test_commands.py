"""One smoke test for the console scripts as a shell starts them: each installed command runs in a fresh process
(its entry point, its imports, its arguments), the other tests call their main() in-process (tests.helpers.command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import COMMANDS


def test_every_console_script_starts_and_answers_help() -> None:
    """pyproject.toml's [project.scripts] installed: each command's --help exits 0 and names the command."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's TOML reader")
    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert {name: target.split(":")[0] for name, target in scripts.items()} == COMMANDS
    for name in COMMANDS:
        result = subprocess.run([str(Path(sys.executable).parent / name), "--help"], capture_output=True, text=True,
                                timeout=300)  # fmt: skip
        assert result.returncode == 0, (name, result.stderr[-2000:])
        assert name in result.stdout, (name, result.stdout[:500])
