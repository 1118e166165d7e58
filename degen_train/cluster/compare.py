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
    # the objective's own terms' validation losses, unweighted, summed: what two arms with other regularizers share
    # (val_loss adds each arm's weighted regularizers); the objective's terms named
    objective_losses: tuple[float | None, float | None] = (None, None)
    objective: str = ""

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
        lines.append(f"final validation loss (val_loss, each side's weighted regularizers included): {shown[0]} → "
                     f"{shown[1]}{difference}")  # fmt: skip
        first, second = self.objective_losses
        if first is not None or second is not None:
            shown = [f"{x:.6g}" if x is not None else "none" for x in (first, second)]
            difference = f" (Δ {second - first:+.3g})" if first is not None and second is not None else ""
            lines.append(f"the objective's own validation loss ({self.objective}, unweighted): {shown[0]} → "
                         f"{shown[1]}{difference}")  # fmt: skip
        lines.append("settings that differ: " + ("; ".join(self.settings[:12]) if self.settings else "none") +
                     (f" ... ({len(self.settings)} in all)" if len(self.settings) > 12 else ""))  # fmt: skip
        return [printable(line) for line in lines]


def weights_of(path: Path) -> tuple[Any, str]:
    """(name → tensor, where they were read): a run folder's checkpoints/last.ckpt (the trained state), a .ckpt file,
    an export folder's safetensors (RUN/hf, or a model folder; ExportWeights: each file's header checked against its
    size, the tensors read one at a time). ValueError naming the path when none is there or a file does not fit."""
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
    return ExportWeights(files), str(folder)


SAFETENSORS_HEADER_BYTES = 100 * 2**20  # safetensors' own bound on a header


class ExportWeights:
    """An export's safetensors files read lazily: ``keys()``, ``shape(name)`` from the headers, ``[name]`` one tensor
    at a time (two 3 GiB exports compared in the memory of their largest tensor). Each file is checked first: a plain
    file (a FIFO or a device refused before any open), its header's length and every tensor's offsets within the
    file's size (a header claiming 2^40 bytes is named, never handed to the reader)."""

    def __init__(self, files: list[Path]) -> None:
        self.where: dict[str, Path] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        for file in files:
            for name, shape in _checked_header(file).items():
                self.where[name], self.shapes[name] = file, shape

    def keys(self) -> list[str]:
        return list(self.where)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.shapes[name]

    def __getitem__(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(str(self.where[name]), framework="pt") as handle:
            return handle.get_tensor(name)


def _checked_header(file: Path) -> dict[str, tuple[int, ...]]:
    """name → shape of a safetensors file's tensors, once its header fits the file; ValueError naming it."""
    import json
    import struct

    from degen_train.core.handed_files import not_a_plain_file

    kind = not_a_plain_file(file)
    if kind or file.is_symlink():
        raise ValueError(f"{file} is {kind or 'a link'}, not a plain safetensors file: give the export's own files")
    size = file.stat().st_size
    with open(file, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError(f"{file}: {size} bytes, shorter than a safetensors header")
        length = struct.unpack("<Q", head)[0]
        if length > min(SAFETENSORS_HEADER_BYTES, size - 8):
            raise ValueError(f"{file}: its header claims {length:,} bytes in a file of {size:,}: not a safetensors "
                             f"file degen-train wrote (truncated or not one)")  # fmt: skip
        try:
            header = json.loads(handle.read(length))
        except (ValueError, RecursionError):
            raise ValueError(f"{file}: its header is not JSON: not a safetensors file") from None
    if not isinstance(header, dict):
        raise ValueError(f"{file}: its header is not a table of tensors: not a safetensors file")
    data = size - 8 - length
    shapes = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in entry["data_offsets"])
            shape = tuple(int(x) for x in entry["shape"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{file}: tensor {printable(name, 80)} has no shape and offsets") from None
        if not 0 <= begin <= end <= data:
            raise ValueError(f"{file}: tensor {printable(name, 80)} claims bytes {begin:,}–{end:,} of a data "
                             f"section of {data:,}: truncated or not a safetensors file")  # fmt: skip
        shapes[name] = shape
    return shapes


def _shape(weights: Any, name: str) -> tuple[int, ...]:
    return weights.shape(name) if isinstance(weights, ExportWeights) else tuple(weights[name].shape)


def _flat(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {key: value for key, value in state.items() if isinstance(value, torch.Tensor)}


def compare(first: Path, second: Path) -> Comparison:
    """Compare two runs, checkpoints or exports (module docstring)."""
    a, source_a = weights_of(first)
    b, source_b = weights_of(second)
    shared = sorted(set(a.keys()) & set(b.keys()))
    mismatched = [k for k in shared if _shape(a, k) != _shape(b, k)]
    if mismatched:
        name = mismatched[0]
        raise ValueError(f"{first} and {second} are different models: {name} is {_shape(a, name)} in one and "
                         f"{_shape(b, name)} in the other")
    differences = {}
    for k in shared:  # one pair of tensors in memory at a time
        left, right = a[k], b[k]
        differences[k] = float((left.double() - right.double()).abs().max()) if left.numel() else 0.0
    groups: dict[str, float] = {}
    for key, value in differences.items():
        group = next((name for name, pattern in GROUPS if re.search(pattern, key)), "other")
        groups[group] = max(groups.get(group, 0.0), value)
    return Comparison(
        max(differences.values(), default=math.nan), groups,
        {str(first): sorted(set(a.keys()) - set(b.keys())), str(second): sorted(set(b.keys()) - set(a.keys()))},
        _setting_differences(Path(first), Path(second)), (_final_loss(Path(first)), _final_loss(Path(second))),
        (source_a, source_b), *_objective_losses(Path(first), Path(second)),
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


def _objective_losses(first: Path, second: Path) -> tuple[tuple[float | None, float | None], str]:
    """(each run's objective loss: its recorded objective's terms' val_terms summed, the terms joined by +)."""
    found, names = [], set()
    for run in (first, second):
        summary = _summary(run)
        terms = list((summary.config.objective or {}) if summary is not None and summary.config else {})
        own = [(summary.val_terms or {}).get(term) for term in terms] if summary is not None else []
        found.append(sum(own) if terms and None not in own else None)
        names.add("+".join(terms))
    return (found[0], found[1]), " / ".join(sorted(n for n in names if n))


def _setting_differences(first: Path, second: Path) -> list[str]:
    """'KEY: a → b' for every setting two runs' recorded configs (summary.json) differ in, where the run folder is
    every run writes into (run_dir, checkpoint folders) left out."""
    from degen_train.config.role_lookup import role_of
    from degen_train.core.roles import Role
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
