"""How a run is spread over devices, in one place: ``parallelize`` (compile, then FSDP2), the FSDP2 strategy
(``torch.distributed.fsdp.fully_shard`` through Lightning's ModelParallelStrategy) and the DeepSpeed factory.

Sharding units are the model's own ``_no_split_modules`` (BertLayer, GPT2Block, LlamaDecoderLayer, ...), found
anywhere in the LightningModule (the backbone, and the generator of ELECTRA / COCO-LM); a unit that holds a
parameter used elsewhere too (BERT's embeddings, tied to the output layer) stays in the root group. The root is
the LightningModule itself, whose ``forward`` runs the whole step (prepare_batch, backbone, loss terms), so every
parameter a term reads is gathered for it. Pure data parallelism: one mesh dimension of all processes.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy, Strategy
from torch import nn

from degen_train.devices.sharding import SHARDED_ROOTS
from degen_train.models.activation_checkpointing import checkpoint_blocks
from degen_train.models.compile import compile_blocks
from degen_train.storage.checkpoints import by_name, by_position

log = logging.getLogger("degen_train")

PRECISIONS = {None: None, "bf16": torch.bfloat16, "fp32": torch.float32}
class FSDP2Strategy(ModelParallelStrategy):
    """Data parallel over every process with FSDP2; the options reach ``apply_fsdp2`` through ``fsdp_options``.

    ``mixed_precision``: bf16 parameters in forward/backward and bf16 gradient reduction (null: fp32);
    ``cpu_offload``: sharded parameters, gradients and optimizer states on the CPU; ``reshard_after_forward``:
    free gathered parameters after each unit's forward (memory) or keep them for the backward (speed).
    ``sharded_checkpoint``: true (default) writes a folder of torch.distributed.checkpoint shards, each process
    its own (no gather onto one process; degen_train.storage.checkpoints stages, renames and verifies it); false
    gathers everything onto rank 0 and writes one file. Either resumes on any process count and strategy.
    """

    def __init__(
        self,
        *,
        mixed_precision: str | None = None,
        cpu_offload: bool = False,
        reshard_after_forward: bool = True,
        sharded_checkpoint: bool = True,
        **kwargs: Any,
    ) -> None:
        if cpu_offload and not torch.cuda.is_available():
            raise ValueError(
                "strategy.cpu_offload=true keeps shards on the CPU between uses on a GPU; this machine has no GPU "
                "and the run is on the CPU already: set strategy.cpu_offload=false"
            )
        super().__init__(save_distributed_checkpoint=bool(sharded_checkpoint), **kwargs)
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
        """Sharded: this process's shard, keyed by parameter name (torch.distributed.checkpoint). One file: the
        whole state on rank 0 in torch's own layout (parameters by position), as a 1-process run writes it."""
        from lightning.pytorch.core.optimizer import LightningOptimizer
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        if isinstance(optimizer, LightningOptimizer):  # the wrapper Lightning hands around; its public .optimizer
            optimizer = optimizer.optimizer
        if self._save_distributed_checkpoint:
            return get_optimizer_state_dict(self.model, optimizer, options=StateDictOptions(cpu_offload=True))
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        by_name = get_optimizer_state_dict(self.model, optimizer, options=options)
        return by_position(by_name) if self.is_global_zero else {}

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Sharded: every process writes its shards into one staging folder, then rank 0 adds the plain values,
        renames the folder into place and writes its sidecar (degen_train.storage.checkpoints). A kill at any moment
        leaves the previous checkpoint of that name, or none, never a torn one under it."""
        if not self._save_distributed_checkpoint:
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        from pathlib import Path

        from torch.distributed.checkpoint import save as dcp_save

        from degen_train.storage.checkpoints import finish_sharded_checkpoint, sharded_staging

        path = Path(self.broadcast(str(filepath)))
        staging = sharded_staging(path)
        if self.is_global_zero:
            import shutil

            shutil.rmtree(staging, ignore_errors=True)  # a kill's leftovers
            staging.mkdir(parents=True)
        self.barrier("sharded-checkpoint-staging")
        tensors = {"state_dict": checkpoint.pop("state_dict")}
        tensors.update({f"optimizer_{i}": state for i, state in enumerate(checkpoint.pop("optimizer_states", []))})
        dcp_save(tensors, checkpoint_id=staging)
        self.barrier("sharded-checkpoint-written")
        if self.is_global_zero:
            finish_sharded_checkpoint(staging, path, checkpoint)
        self.barrier("sharded-checkpoint-renamed")

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """A sharded folder: each process reads the parts of the shards it holds now (any process count).
        One file: every process reads it (weights-only) and keeps its shard of weights and moments."""
        from pathlib import Path

        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        path = Path(self.broadcast(str(checkpoint_path)))
        if path.is_dir():
            return self._load_sharded(path)
        checkpoint = self.checkpoint_io.load_checkpoint(path)
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, checkpoint.pop("state_dict"), options=options)
        names = {id(p): n for n, p in self.model.named_parameters()}
        for optimizer, state in zip(self.optimizers, checkpoint.pop("optimizer_states", []), strict=False):
            order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
            set_optimizer_state_dict(self.model, optimizer, by_name(state, order), options=options)
        return checkpoint

    def _load_sharded(self, path: Any) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        from degen_train.storage.checkpoints import checkpoint_header
        from degen_train.storage.sharded_io import load_sharded

        tensors = {"state_dict": get_model_state_dict(self.model)}
        optimizers = [getattr(o, "_optimizer", o) for o in self.optimizers]
        for i, optimizer in enumerate(optimizers):
            tensors[f"optimizer_{i}"] = get_optimizer_state_dict(self.model, optimizer)
        header = checkpoint_header(path)  # its index read with the allow-list, meta.pt weights-only, shards present
        load_sharded(tensors, Path(path))  # fills each process's current shards from whatever wrote them
        set_model_state_dict(self.model, tensors.pop("state_dict"))
        for i, optimizer in enumerate(optimizers):
            set_optimizer_state_dict(self.model, optimizer, tensors[f"optimizer_{i}"])
        return header


def deepspeed_strategy(*, stage: int = 2, offload_optimizer: bool = False, **kwargs: Any) -> Strategy:
    """DeepSpeed ZeRO stage 1-3 (strategy=deepspeed); a clear error when the package is missing."""
    if importlib.util.find_spec("deepspeed") is None:
        raise ValueError("strategy=deepspeed needs the deepspeed package: pip install deepspeed")
    from lightning.pytorch.strategies import DeepSpeedStrategy

    return DeepSpeedStrategy(stage=stage, offload_optimizer=offload_optimizer, **kwargs)


def parallelize(
    root: nn.Module, model: nn.Module, frozen: list[tuple[str, nn.Module]], *, compile_model: bool,
    fsdp_options: dict[str, Any] | None, mesh: Any, device: torch.device, activation_checkpointing: str | int = "none",
    auxiliary: list[nn.Module] = (),
) -> None:  # fmt: skip
    """Everything that changes how ``root`` (the LightningModule) runs, in this order (torchtitan's):

    0. model.activation_checkpointing: every (k-th) block's forward recomputed in the backward
       (models/activation_checkpointing.py), inside what compile and FSDP2 then wrap.
    1. model.compile: each block of ``model`` compiled in place, so FSDP2 then shards the compiled modules and
       its hooks run around the compiled graphs (compiling after sharding would trace through them); the terms'
       ``auxiliary`` models (a TaCL teacher, an ELECTRA/COCO-LM generator's encoder) the same way.
    2. FSDP2 on the ``frozen`` models outside the tree (a TaCL teacher, as (term name, module)) first: they
       must not join the root's parameter group.
    3. FSDP2 on ``model``'s blocks (and a generator's), then the root.
    DDP needs nothing here: Lightning wraps the module after this returns. Runs once per module (Lightning calls
    configure_model again for the final validation: nothing is applied twice).
    """
    from torch.distributed.fsdp import FSDPModule

    if getattr(root, "_parallelized", False):
        return
    root._parallelized = True
    checkpointed = checkpoint_blocks(model, activation_checkpointing)
    if checkpointed:
        log.info("model.activation_checkpointing=%s: %d blocks recompute their activations in the backward (%s, ...)",
                 activation_checkpointing, len(checkpointed), checkpointed[0])  # fmt: skip
    if compile_model:
        blocks = compile_blocks(model)
        log.info("model.compile: %d blocks compiled in place (%s, ...)", len(blocks), blocks[0])
        for extra in auxiliary:  # a teacher or a generator runs every step too: eager, it cost TaCL 2.15x a step
            blocks = compile_blocks(extra)
            log.info("model.compile: %s's %d blocks compiled in place too", type(extra).__name__, len(blocks))
    if fsdp_options is None or isinstance(root, FSDPModule):
        return
    for term_name, module in frozen:
        module.to(device)
        kind = type(module).__name__  # before fully_shard renames the class (FSDPBertModel)
        done = apply_fsdp2(module, set(getattr(module, "_no_split_modules", None) or ()), mesh, fsdp_options,
                           frozen=True)  # fmt: skip
        log.info("FSDP2: %s's frozen %s sharded (%d units and its root)", term_name, kind, len(done))
    sharded = apply_fsdp2(root, set(getattr(model, "_no_split_modules", None) or ()), mesh, fsdp_options)
    log.info("FSDP2: %d units sharded (%s ...) and the root", len(sharded), ", ".join(sharded[:3]))


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """The model's whole weights when FSDP2 sharded them (a collective: every process calls it), else None."""
    from torch.distributed.tensor import DTensor

    state = model.state_dict()
    if not any(isinstance(v, DTensor) for v in state.values()):
        return None
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu() for k, v in state.items()}


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
    SHARDED_ROOTS.add(root)
    return sharded


