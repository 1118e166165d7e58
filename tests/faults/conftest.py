"""Shared set-up of the fault drills: a small corpus, short runs, one uninterrupted reference run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from degen_train.data.builtin_corpus import builtin_documents
from tests.conftest import FAST, REPO
from tests.helpers import run

STEPS = 8


@pytest.fixture(scope="session")
def drill_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("drill_corpus") / "topics.txt"
    path.write_text("\n\n".join(builtin_documents()[:4]))
    return path


@pytest.fixture(scope="session")
def drill(drill_corpus: Path) -> list[str]:
    """Overrides of every drill run: 8 steps, a checkpoint every 2 steps (2 kept), validation every 4."""
    return [
        "data=text",
        f"data.path={drill_corpus}",
        "data.tokenizer.vocab_size=1000",
        f"trainer.max_steps={STEPS}",
        "trainer.val_check_interval=4",
        "callbacks.checkpoint.every_n_train_steps=2",
        "callbacks.isotropy.every_n_steps=4",
    ]


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory, drill: list[str]) -> Path:
    """The uninterrupted run every drill must end equal to."""
    run_dir = tmp_path_factory.mktemp("reference")
    run(run_dir, *drill)
    return run_dir


def killed_run(fault: str, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    """degen-train with ``fault`` injected (tests/faults/driver.py); asserts it died by SIGKILL."""
    command = [sys.executable, "-m", "tests.faults.driver", fault, *FAST, *overrides, f"hydra.run.dir={run_dir}"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env={**os.environ}, timeout=600)
    assert result.returncode == -9, f"expected a SIGKILL, got {result.returncode}:\n{result.stderr[-3000:]}"
    return result


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A sweep folder of two finished runs' records ("good" and "bad"), for the report's drills."""
    from tests.helpers import finished_run

    folder = tmp_path / "sweep"
    finished_run(folder, "good", "model.dim=32", 4.0)
    finished_run(folder, "bad", "model.dim=64", 3.0)
    return folder
