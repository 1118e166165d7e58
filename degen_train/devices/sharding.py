"""Reading parameters FSDP2 shards: whole for a measurement outside the step, or this process's rows of one.

Below the run that applies the sharding (run/parallel.py), so the terms and monitors that read sharded weights do
not import the run.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor, nn

SHARDED_ROOTS: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # every module apply_fsdp2 made a root, for local_shard


@contextmanager
def gathered(module: nn.Module) -> Iterator[None]:
    """Inside: an FSDP2 root's own parameters are whole tensors, as during its forward (for a measurement
    outside the step, e.g. the isotropy monitor); a no-op for a module that is not sharded. Collective: every
    process must enter it."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(module, FSDPModule):
        yield
        return
    module.unshard()
    try:
        yield
    finally:
        module.reshard()


def local_shard(param: Tensor) -> tuple[Tensor, int] | None:
    """For a parameter FSDP2 gathered for the running forward: (this process's rows of it, whose gradient lands
    on this process's shard directly, and the index of the first of them); None when nothing shards it.

    Reads FSDP2's private per-parameter records (``_fsdp_param_groups``, ``_unsharded_param``): torch has no
    public map from a gathered parameter to its shard. tests/test_fsdp.py fails by name if they move.
    """
    from torch.distributed.tensor import Shard

    for root in list(SHARDED_ROOTS):
        for module in root.modules():
            if not hasattr(module, "_get_fsdp_state"):
                continue
            for group in module._get_fsdp_state()._fsdp_param_groups:
                for fsdp_param in group.fsdp_params:
                    if getattr(fsdp_param, "_unsharded_param", None) is not param:
                        continue
                    shard = fsdp_param.sharded_param  # DTensor, rows split over the mesh as torch.chunk does
                    if tuple(shard.placements) != (Shard(0),):
                        return None
                    chunk = math.ceil(shard.shape[0] / shard.device_mesh.size())
                    offset = min(shard.shape[0], shard.device_mesh.get_local_rank() * chunk)
                    return shard.to_local(), offset
    return None
