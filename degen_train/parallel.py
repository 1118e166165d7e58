"""FSDP2 (``torch.distributed.fsdp.fully_shard``), applied in one place, through Lightning's ModelParallelStrategy.

Sharding units are the model's own ``_no_split_modules`` (BertLayer, GPT2Block, LlamaDecoderLayer, ...), found
anywhere in the LightningModule (the backbone, and the generator of ELECTRA / COCO-LM); a unit that holds a
parameter used elsewhere too (BERT's embeddings, tied to the output layer) stays in the root group. The root is
the LightningModule itself, whose ``forward`` runs the whole step (prepare_batch, backbone, loss terms), so every
parameter a term reads is gathered for it. Pure data parallelism: one mesh dimension of all processes.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import Tensor, nn

PRECISIONS = {None: None, "bf16": torch.bfloat16, "fp32": torch.float32}
_ROOTS: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # every module apply_fsdp2 made a root, for local_shard


class FSDP2Strategy(ModelParallelStrategy):
    """Data parallel over every process with FSDP2; the options reach ``apply_fsdp2`` through ``fsdp_options``.

    ``mixed_precision``: bf16 parameters in forward/backward and bf16 gradient reduction (null: fp32);
    ``cpu_offload``: sharded parameters, gradients and optimizer states on the CPU; ``reshard_after_forward``:
    free gathered parameters after each unit's forward (memory) or keep them for the backward (speed).
    ``sharded_checkpoint``: false writes one full checkpoint file from rank 0 (what resume, export and every
    tool here read); true writes torch.distributed.checkpoint shards.
    """

    def __init__(
        self,
        *,
        mixed_precision: str | None = None,
        cpu_offload: bool = False,
        reshard_after_forward: bool = True,
        sharded_checkpoint: bool = False,
        **kwargs: Any,
    ) -> None:
        if mixed_precision not in PRECISIONS:
            raise ValueError(f"strategy.mixed_precision={mixed_precision!r} is not one of null, bf16, fp32")
        if cpu_offload and not torch.cuda.is_available():
            raise ValueError(
                "strategy.cpu_offload=true keeps shards on the CPU between uses on a GPU; this machine has no GPU "
                "and the run is on the CPU already: set strategy.cpu_offload=false"
            )
        if sharded_checkpoint:
            raise ValueError(
                "strategy.sharded_checkpoint=true is not built yet: resume, export and the checkpoint checks read "
                "one file; use sharded_checkpoint=false (one full checkpoint written by rank 0)"
            )
        super().__init__(save_distributed_checkpoint=False, **kwargs)
        self.fsdp_options = {
            "mixed_precision": mixed_precision,
            "cpu_offload": cpu_offload,
            "reshard_after_forward": reshard_after_forward,
        }

    def setup_environment(self) -> None:
        # Pure data parallelism: every process is one data-parallel rank (no tensor parallelism).
        self._data_parallel_size = self.num_nodes * self.num_processes
        self._tensor_parallel_size = 1
        super().setup_environment()

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The whole optimizer state on rank 0, in torch's own layout (parameters by position), so that a run
        on any number of processes, sharded or not, resumes from it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        optimizer = getattr(optimizer, "_optimizer", optimizer)  # a LightningOptimizer wraps the real one
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        by_name = get_optimizer_state_dict(self.model, optimizer, options=options)
        return by_position(by_name) if self.is_global_zero else {}

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Every process reads the one checkpoint file (weights-only) and keeps its shard of weights and moments."""
        from pathlib import Path

        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        path = Path(self.broadcast(checkpoint_path))
        checkpoint = self.checkpoint_io.load_checkpoint(path)
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, checkpoint.pop("state_dict"), options=options)
        names = {id(p): n for n, p in self.model.named_parameters()}
        for optimizer, state in zip(self.optimizers, checkpoint.pop("optimizer_states", []), strict=False):
            order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
            set_optimizer_state_dict(self.model, optimizer, by_name(state, order), options=options)
        return checkpoint


@contextmanager
def gathered(module: nn.Module) -> Iterator[None]:
    """Inside: an FSDP2 root's own parameters are whole tensors, as during its forward (for a measurement
    outside the step, e.g. the isotropy monitor); a no-op for a module that is not sharded. Collective: every
    process must enter it."""
    if not (hasattr(module, "unshard") and hasattr(module, "reshard")):
        yield
        return
    module.unshard()
    try:
        yield
    finally:
        module.reshard()


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """The model's whole weights when FSDP2 sharded them (a collective: every process calls it), else None."""
    from torch.distributed.tensor import DTensor

    state = model.state_dict()
    if not any(isinstance(v, DTensor) for v in state.values()):
        return None
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu() for k, v in state.items()}


def by_position(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter names (torch.distributed.checkpoint) -> keyed by position (torch)."""
    order = [name for group in state["param_groups"] for name in group["params"]]
    index = {name: position for position, name in enumerate(order)}
    return {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": [{**g, "params": [index[name] for name in g["params"]]} for g in state["param_groups"]],
    }


def by_name(state: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """The reverse of by_position, for the optimizer whose parameters, in order, are named ``order``."""
    return {
        "state": {order[position]: value for position, value in state["state"].items()},
        "param_groups": [{**g, "params": [order[position] for position in g["params"]]} for g in state["param_groups"]],
    }


def shared_parameters(root: nn.Module) -> set[int]:
    """Ids of parameters that more than one module holds (tied weights)."""
    seen: dict[int, int] = {}
    for module in root.modules():
        for param in module.parameters(recurse=False):
            seen[id(param)] = seen.get(id(param), 0) + 1
    return {key for key, count in seen.items() if count > 1}


def apply_fsdp2(
    root: nn.Module, unit_names: set[str], mesh: Any, options: dict[str, Any], *, frozen: bool = False
) -> list[str]:
    """Shard every unit (a module whose class is in ``unit_names``), then the root; returns the units' names.

    ``frozen``: the root is a frozen model run under no_grad (a teacher): shard its frozen units too.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    dtype = PRECISIONS[options.get("mixed_precision")]
    kwargs = {
        "mesh": mesh,
        "reshard_after_forward": bool(options.get("reshard_after_forward", True)),
        "mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype),
        "offload_policy": CPUOffloadPolicy() if options.get("cpu_offload") else OffloadPolicy(),
    }
    tied = shared_parameters(root)
    sharded = []
    for name, module in root.named_modules():
        if type(module).__name__ not in unit_names or module is root:
            continue
        if any(id(p) in tied for p in module.parameters()):
            continue  # its tied parameter also lives outside it: leave both in the root's group
        if not frozen and not any(p.requires_grad for p in module.parameters()):
            continue  # frozen (a weight-0 term's): replicated, never in a gradient reduction
        fully_shard(module, **kwargs)
        sharded.append(name)
    fully_shard(root, **kwargs)
    _ROOTS.add(root)
    return sharded


def local_shard(param: Tensor) -> tuple[Tensor, int] | None:
    """For a parameter FSDP2 gathered for the running forward: (this process's rows of it, whose gradient lands
    on this process's shard directly, and the index of the first of them); None when nothing shards it.

    Reads FSDP2's private per-parameter records (``_fsdp_param_groups``, ``_unsharded_param``): torch has no
    public map from a gathered parameter to its shard. tests/test_fsdp.py fails by name if they move.
    """
    from torch.distributed.tensor import Shard

    for root in list(_ROOTS):
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
