"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from degen_train.checkpoints import load_checkpoint_file
from degen_train.cli.train import train
from degen_train.config import load_config
from tests.conftest import FAST


def run(run_dir: Path, *overrides: str) -> dict[str, Any]:
    """Train in-process with the fast settings plus ``overrides``; returns summary.json's content."""
    return train(load_config([*FAST, *overrides], run_dir=run_dir))


def logged(run_dir: Path, key: str) -> dict[int, float]:
    """{step: value} of one metric in RUN/logs/metrics.csv."""
    with open(run_dir / "logs" / "metrics.csv", newline="") as handle:
        return {int(r["step"]): float(r[key]) for r in csv.DictReader(handle) if r.get(key)}


def checkpoint_weights(path: Path) -> dict[str, torch.Tensor]:
    """The whole weights of a checkpoint file, or of a sharded checkpoint folder (gathered); a module's extra
    state (a dict of tensors, numbers or lists: AGG's window) flattened into ``KEY.NAME`` entries, compared like
    weights."""
    flat: dict[str, torch.Tensor] = {}
    for key, value in load_checkpoint_file(path)["state_dict"].items():
        items = value.items() if isinstance(value, dict) else [("", value)]
        flat.update({f"{key}.{name}" if name else key: _as_tensor(v) for name, v in items})
    return flat


def _as_tensor(value: object) -> torch.Tensor:
    """A tensor, a number or a (ragged) list of lists of numbers as one tensor, lengths first."""
    if isinstance(value, list) and all(isinstance(row, list) for row in value):
        return torch.tensor([len(row) for row in value] + [x for row in value for x in row], dtype=torch.float64)
    return torch.as_tensor(value)


def degen_train(*args: str) -> subprocess.CompletedProcess:
    """The installed ``degen-train`` command in a subprocess (DDP and multirun need a real process)."""
    command = [str(Path(sys.executable).parent / "degen-train"), *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ}, timeout=900)
