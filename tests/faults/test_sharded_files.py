"""A sharded checkpoint folder handed over by someone else runs no code: its index and its non-tensor entries.

Both drills ran their payload on the code before degen_train/storage/sharded_io.py (torch's reader unpickles
``.metadata`` freely, and its planners load non-tensor entries with weights_only=False).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import FileSystemWriter, save

from degen_train.cli.convert import main as convert
from degen_train.storage.checkpoints import CheckpointError, load_checkpoint_file
from degen_train.storage.sharded_io import gather_sharded
from tests.helpers import run


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.marker),))


def sharded_folder(folder: Path, extra: dict) -> Path:
    """A folder in the sharded layout (torch.distributed.checkpoint shards + meta.pt) holding ``extra``."""
    state = {"state_dict": {"w": torch.ones(3)}, **extra}
    save(state, storage_writer=FileSystemWriter(str(folder)), no_dist=True)  # one process, no group
    torch.save({"degen_train": {"model": {}, "terms": []}, "global_step": 2}, folder / "meta.pt")
    return folder


def crafted_index(folder: Path, marker: Path) -> Path:
    """``folder``'s ``.metadata`` with a payload beside the real index: unpickling it runs os.mkdir."""
    real = pickle.loads((folder / ".metadata").read_bytes())  # our own file, written just above
    (folder / ".metadata").write_bytes(pickle.dumps((real, _RunsCode(marker))))
    return folder


def test_a_crafted_shard_index_is_refused_by_every_reader(tmp_path: Path, drill: list[str]) -> None:
    marker = tmp_path / "code-ran"
    folder = crafted_index(sharded_folder(tmp_path / "given.ckpt", {}), marker)
    with pytest.raises(CheckpointError, match=r"refused to load .*\.metadata: .*not a tensor.*\(posix\.mkdir\)"):
        load_checkpoint_file(folder)  # degen-convert, a run without FSDP2
    with pytest.raises(CheckpointError, match=r"\(posix\.mkdir\)"):
        run(tmp_path / "run", *drill, f"ckpt_path={folder}")  # degen-train ckpt_path=DIR
    with pytest.raises(SystemExit):
        convert([str(folder), "--ckpt", str(tmp_path / "one.ckpt")])
    # ckpt_path=last with a crafted checkpoints/last.ckpt/ and no sidecar: the fallback reads it the same way.
    last = tmp_path / "victim" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    crafted_index(sharded_folder(last, {}), marker)
    with pytest.raises((CheckpointError, FileNotFoundError)):
        run(tmp_path / "victim", *drill, "ckpt_path=last")
    assert not marker.exists()
    assert not (tmp_path / "one.ckpt").exists()


def test_a_crafted_non_tensor_entry_is_loaded_weights_only(tmp_path: Path) -> None:
    """A valid index whose non-tensor entry holds a payload: torch's planner would load it with weights_only=False."""
    marker = tmp_path / "code-ran"
    folder = sharded_folder(tmp_path / "given.ckpt", {"extra": _RunsCode(marker)})
    with pytest.raises(CheckpointError, match=r"refused to load .*given\.ckpt: .*\(posix\.mkdir\)"):
        load_checkpoint_file(folder)
    assert not marker.exists()


def test_our_own_plain_values_still_load(tmp_path: Path) -> None:
    folder = sharded_folder(tmp_path / "ours.ckpt", {"loops": {"step": 2, "lr": [0.1, 0.2]}, "name": "x"})
    loaded = load_checkpoint_file(folder)
    assert loaded["state_dict"]["w"].tolist() == [1.0, 1.0, 1.0] and loaded["global_step"] == 2
    everything = gather_sharded(folder)  # the non-tensor entries too, read weights-only
    assert everything["loops"] == {"step": 2, "lr": [0.1, 0.2]} and everything["name"] == "x"
