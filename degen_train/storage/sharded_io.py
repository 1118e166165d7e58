"""Read torch.distributed.checkpoint folders without running code from them.

torch's FileSystemReader unpickles a folder's ``.metadata`` without restriction, and its load planners read
every non-tensor entry with ``torch.load(weights_only=False)``: a crafted folder runs code when it is loaded.
Here the index is unpickled with an allow-list of the checkpoint format's own classes (and the torch values they
hold), and non-tensor entries are loaded weights-only; anything else is refused, naming the global.
"""

from __future__ import annotations

import contextlib
import io
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

METADATA_CLASSES = (
    "Metadata",
    "MetadataIndex",
    "StorageMeta",
    "TensorStorageMetadata",
    "BytesStorageMetadata",
    "ChunkStorageMetadata",
    "TensorProperties",
    "_MEM_FORMAT_ENCODING",
)
ALLOWED_GLOBALS = frozenset(
    {("torch.distributed.checkpoint.metadata", name) for name in METADATA_CLASSES}
    | {
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),  # a layout by its name (torch.strided), as weights-only loads allow
        ("pathlib", "PosixPath"),
        ("pathlib", "WindowsPath"),
        ("collections", "OrderedDict"),
    }
)


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint file names a Python global outside the checkpoint format's own."""


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles a ``.metadata`` index: the checkpoint format's classes, torch dtypes and sizes, plain containers."""

    def find_class(self, module: str, name: str) -> Any:
        is_dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        if (module, name) in ALLOWED_GLOBALS or is_dtype:
            return super().find_class(module, name)
        raise UnsafeCheckpointError(f"Unsupported global {module}.{name}")


class SafeReader(FileSystemReader):
    """FileSystemReader whose index is read with MetadataUnpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        with self.fs.create_stream(self._get_metadata_path(kwargs.get("rank")), "rb") as stream:
            metadata = MetadataUnpickler(stream).load()
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _weights_only(value: io.BytesIO) -> Any:
    try:
        return torch.load(value, weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsafeCheckpointError(str(error)) from None  # the whole message: it names the global


class _WeightsOnlyBytes:
    """load_bytes reads the entry weights-only first; the planner's own load_bytes (which unpickles without
    restriction) then only ever sees bytes this process wrote from that result, so its placement logic is kept."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        checked = io.BytesIO()
        torch.save(_weights_only(value), checked)
        checked.seek(0)
        super().load_bytes(read_item, checked)  # type: ignore[misc]


class SafeLoadPlanner(_WeightsOnlyBytes, DefaultLoadPlanner):
    """DefaultLoadPlanner whose non-tensor entries are loaded weights-only."""


class SafeGatherPlanner(_WeightsOnlyBytes, _EmptyStateDictLoadPlanner):
    """The planner that reads every entry of a folder (dcp_to_torch_save's), non-tensors weights-only."""


@contextlib.contextmanager
def _unwrapped() -> Iterator[None]:
    """torch.distributed.checkpoint wraps every process's error in a CheckpointException (a BaseException): a
    refusal of ours comes out as itself, anything else as a RuntimeError naming the first cause."""
    try:
        yield
    except CheckpointException as wrapped:
        causes = [exc for exc, _ in wrapped.failures.values()]
        refused = next((c for c in causes if isinstance(c, UnsafeCheckpointError)), None)
        if refused is not None:
            raise refused from None
        raise RuntimeError(f"{type(causes[0]).__name__}: {causes[0]}" if causes else str(wrapped)) from None


def read_index(path: Path) -> Any:
    """A sharded checkpoint folder's ``.metadata``, unpickled with the allow-list."""
    return SafeReader(str(path)).read_metadata()


def load_sharded(state: dict[str, Any], path: Path) -> None:
    """torch.distributed.checkpoint.load into ``state`` (each process's current shards), without running code."""
    from torch.distributed.checkpoint import load

    with _unwrapped():
        load(state, storage_reader=SafeReader(str(path)), planner=SafeLoadPlanner())


def gather_sharded(path: Path) -> dict[str, Any]:
    """Every entry of a sharded checkpoint folder as whole tensors and plain values, on one process."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    with _unwrapped():
        _load_state_dict(state, storage_reader=SafeReader(str(path)), planner=SafeGatherPlanner(), no_dist=True)
    return state
