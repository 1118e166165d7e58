"""``degen-cluster compare A B``: are two runs (or exports) the same training? Their weights' largest difference
overall and per parameter group, the settings their recorded configs differ in, and their final validation losses,
in a few lines (issue 66: a user wrote 8 lines of safetensors to find max |Δw| of a resumed cluster job)."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from degen_train.config.records import Summary, read_record
from degen_train.core.handed_files import HandedOverFileError, printable

GROUPS = (("embeddings", r"embed|wte|wpe|position|token_type"), ("head", r"lm_head|cls\.|head\.|pooler|classifier"),
          ("layers", r"\.(layer|layers|h|blocks)\.\d+\."))  # fmt: skip


@dataclass
class Comparison:
    """What ``compare`` found: the largest |Δw| over the shared tensors and per group, the tensors only one side
    has, the settings that differ, and each side's final validation loss."""

    max_abs: float
    groups: dict[str, float] = field(default_factory=dict)
    only: dict[str, list[str]] = field(default_factory=dict)
    settings: list[str] = field(default_factory=list)
    losses: tuple[float | None, float | None] = (None, None)
    sources: tuple[str, str] = ("", "")

    def lines(self) -> list[str]:
        a, b = self.sources
        lines = [f"weights: max |Δw| {self.max_abs:.3g} over {a} and {b}",
                 "  by group: " + ", ".join(f"{g} {v:.3g}" for g, v in self.groups.items())]  # fmt: skip
        for side, names in self.only.items():
            if names:
                lines.append(f"  only in {side}: {', '.join(names[:5])}" + (" ..." if len(names) > 5 else ""))
        first, second = self.losses
        shown = [f"{x:.6g}" if x is not None else "none" for x in (first, second)]
        difference = f" (Δ {second - first:+.3g})" if first is not None and second is not None else ""
        lines.append(f"final validation loss: {shown[0]} → {shown[1]}{difference}")
        lines.append("settings that differ: " + ("; ".join(self.settings[:12]) if self.settings else "none") +
                     (f" ... ({len(self.settings)} in all)" if len(self.settings) > 12 else ""))  # fmt: skip
        return [printable(line) for line in lines]


def weights_of(path: Path) -> tuple[dict[str, torch.Tensor], str]:
    """(name → tensor, where they were read): a run folder's checkpoints/last.ckpt (the trained state), a .ckpt file,
    an export folder's safetensors (RUN/hf, or a model folder). ValueError naming the path when none is there."""
    from degen_train.storage.checkpoints import load_checkpoint_file

    path = Path(path)
    if path.is_file() and path.suffix == ".ckpt" or (path.is_dir() and path.name.endswith(".ckpt")):
        return _flat(load_checkpoint_file(path)["state_dict"]), str(path)
    if (path / "checkpoints" / "last.ckpt").exists():
        last = path / "checkpoints" / "last.ckpt"
        return _flat(load_checkpoint_file(last)["state_dict"]), str(last)
    folder = path / "hf" if (path / "hf").is_dir() else path
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path}: no checkpoints/last.ckpt, .ckpt file or safetensors export to compare; give a run "
                         f"folder, a checkpoint or an export (RUN/hf)")  # fmt: skip
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights |= load_file(str(file))
    return weights, str(folder)


def _flat(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {key: value for key, value in state.items() if isinstance(value, torch.Tensor)}


def compare(first: Path, second: Path) -> Comparison:
    """Compare two runs, checkpoints or exports (module docstring)."""
    a, source_a = weights_of(first)
    b, source_b = weights_of(second)
    shared = sorted(set(a) & set(b))
    mismatched = [k for k in shared if a[k].shape != b[k].shape]
    if mismatched:
        name = mismatched[0]
        raise ValueError(f"{first} and {second} are different models: {name} is {tuple(a[name].shape)} in one and "
                         f"{tuple(b[name].shape)} in the other")
    differences = {k: float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0 for k in shared}
    groups: dict[str, float] = {}
    for key, value in differences.items():
        group = next((name for name, pattern in GROUPS if re.search(pattern, key)), "other")
        groups[group] = max(groups.get(group, 0.0), value)
    return Comparison(
        max(differences.values(), default=math.nan), groups,
        {str(first): sorted(set(a) - set(b)), str(second): sorted(set(b) - set(a))},
        _setting_differences(Path(first), Path(second)), (_final_loss(Path(first)), _final_loss(Path(second))),
        (source_a, source_b),
    )  # fmt: skip


def _summary(run: Path) -> Summary | None:
    path = run / "summary.json"
    if not os.path.lexists(path):
        return None
    try:
        return read_record(path, Summary, what="run summary", within=run)
    except HandedOverFileError:
        return None


def _final_loss(run: Path) -> float | None:
    summary = _summary(run)
    return summary.val_loss if summary is not None else None


def _setting_differences(first: Path, second: Path) -> list[str]:
    """'KEY: a → b' for every setting two runs' recorded configs (summary.json) differ in, where the run folder is
    every run writes into (run_dir, checkpoint folders) left out."""
    from degen_train.config.roles import Role, role_of
    from degen_train.core.trees import flatten

    configs = []
    for run in (first, second):
        summary = _summary(run)
        configs.append(flatten(summary.config.model_dump() if summary is not None and summary.config else {}))
    lines = []
    for key in sorted(set(configs[0]) | set(configs[1])):
        before, after = configs[0].get(key), configs[1].get(key)
        role = role_of(key)
        if before != after and not (role is not None and role.role == Role.OUTPUT):
            lines.append(f"{key}: {before!r} → {after!r}")
    return lines
