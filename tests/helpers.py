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


def on_two_processes(runs: list[tuple[Path, list[str]]], *, timeout: float = 1800) -> None:
    """Train every run (its folder and overrides; a folder twice: a resume) on one two-process job, in order, as
    ``torchrun --nproc-per-node 2 degen-train`` would, but paying the interpreter's start and the imports (~7 s a
    process here, more than a tiny run's training) once for them all. Raises with both ranks' output tails."""
    import json
    import socket
    import tempfile
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scratch = Path(tempfile.mkdtemp(prefix="two_processes_"))
    spec = scratch / "runs.json"
    spec.write_text(json.dumps([{"run_dir": str(d), "overrides": list(o)} for d, o in runs]))
    launcher = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2", "NODE_RANK": "0"}
    ranks = []
    for rank in range(2):
        log = open(scratch / f"rank{rank}.log", "w")  # noqa: SIM115 - closed below
        env = {**os.environ, **launcher, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        command = [sys.executable, "-m", "tests.two_process_driver", str(spec)]
        ranks.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p, _ in ranks) and time.monotonic() < deadline:
        if any(p.poll() not in (None, 0) for p, _ in ranks):  # one rank failed: its partner would wait forever
            break
        time.sleep(0.2)
    for process, log in ranks:
        if process.poll() is None:
            process.kill()
        process.wait()
        log.close()
    if any(p.returncode for p, _ in ranks):
        tails = "\n".join(f"--- rank {r} ---\n" + (scratch / f"rank{r}.log").read_text()[-4000:] for r in range(2))
        raise AssertionError(f"two-process job failed (exit codes {[p.returncode for p, _ in ranks]}):\n{tails}")


def forward_output(
    *,
    logits: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
    hidden_states: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    input_ids: torch.Tensor | None = None,
    **extra: Any,
) -> Any:
    """A hand-made ForwardOutput for a term's unit test: a vocabulary of 3 with 2-dim identity embeddings.
    Give ``logits`` and ``targets`` (a head's test: one sequence of len(targets) predicted tokens) or
    ``hidden_states``, ``attention_mask`` and ``input_ids`` (a states test: nothing predicted)."""
    from degen_train.types import ForwardOutput

    if targets is not None:  # one sequence whose every position is predicted
        input_ids = torch.zeros(1, len(targets), dtype=torch.long)
        attention_mask = torch.ones(1, len(targets), dtype=torch.long)
        hidden_states = torch.zeros(1, len(targets), 2) if hidden_states is None else hidden_states
        labels = targets[None]
    else:
        labels = torch.full_like(input_ids, -100)
        targets = labels[labels != -100]
    return ForwardOutput(
        input_ids=input_ids,
        attention_mask=attention_mask,
        hidden_states=hidden_states,
        labels=labels,
        logits=logits,
        target_ids=targets,
        embedding_weight=torch.eye(3, 2),
        output_embedding_weight=torch.eye(3, 2),
        **extra,
    )
