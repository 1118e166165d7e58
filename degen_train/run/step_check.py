"""A training step watched op by op: the device bugs and host waits a GPU would show, found on a CPU.

Two watches over the same step (the module's forward, every term's loss, the logged values stacked as ``_log``
stacks them, the backward):

* ``on_fake_device``: the model and the batch become fake tensors on a device that is not the CPU (torch's
  ``FakeTensorMode``: shapes, dtypes and devices, no data). A tensor made on the CPU and mixed into an op with the
  model's tensors fails here as it fails on CUDA (``DeviceMixError``, naming the op and our source line), including
  the cases CUDA rejects but fake tensors let through (a 0-dim CPU tensor in ``cat``/``stack``). Each data-dependent
  call (``.item()``, ``bool(tensor)``, a boolean mask, ``nonzero``, ``bincount``, a copy to the host) is recorded
  with its source line: on a GPU each one makes the host wait for the device. Their results are made up (the shapes
  of a half-full mask, a scalar 1), which is all a fake step needs.
* ``under_autocast``: the real step on the CPU under bf16 autocast, refusing a linear-algebra call (SVD, eigh, QR,
  solve, ...) on bf16/fp16 inputs: cuSOLVER has no such kernels (``svd_cuda_gesvdj not implemented for BFloat16``).

CUDA itself cannot be faked on a CPU-only torch with autograd (its device guard is missing), so the fake device
is ``meta``; what differs between devices is the same there.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten
PACKAGE = Path(__file__).resolve().parents[1]  # degen_train/
FAKE_DEVICE = torch.device("meta")
LOW_PRECISION = (torch.bfloat16, torch.float16)

# Ops whose result the host needs before it can go on (the value, or a data-dependent shape).
HOST_READS = {
    aten._local_scalar_dense.default: "a value read on the host (.item(), float(), bool(), if tensor)",
    aten.nonzero.default: "nonzero (a data-dependent shape)",
    aten.masked_select.default: "masked_select (a data-dependent shape)",
    aten.bincount.default: "bincount (its length is max + 1)",
    aten.unique_dim.default: "unique (a data-dependent shape)",
    aten._unique2.default: "unique (a data-dependent shape)",
    aten.unique_consecutive.default: "unique_consecutive (a data-dependent shape)",
    aten.repeat_interleave.Tensor: "repeat_interleave without output_size",
}
MASK_INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._unsafe_index_put.default}
# The solvers (cuSOLVER, MAGMA on CUDA): float32 and float64 only. Watched where Python calls them, before
# autocast: CPU autocast casts some of them up by itself, CUDA's does not.
SOLVERS = {
    torch.linalg.svd, torch.linalg.svdvals, torch.svd, torch.Tensor.svd, torch.linalg.eigh, torch.linalg.eigvalsh,
    torch.linalg.eig, torch.linalg.eigvals, torch.linalg.qr, torch.qr, torch.Tensor.qr, torch.linalg.cholesky,
    torch.cholesky, torch.linalg.solve, torch.linalg.inv, torch.inverse, torch.Tensor.inverse, torch.linalg.det,
    torch.det, torch.linalg.slogdet, torch.linalg.lstsq, torch.linalg.pinv, torch.pinverse, torch.linalg.matrix_rank,
    torch.linalg.lu, torch.linalg.lu_factor, torch.linalg.solve_triangular, torch.linalg.matrix_exp,
}  # fmt: skip


class DeviceMixError(RuntimeError):
    """A CPU tensor met the model's device tensors in one op (a tensor made without its inputs' device)."""


class LowPrecisionLinalgError(RuntimeError):
    """A linear-algebra op ran on bf16/fp16 inputs, which CUDA's solvers do not implement."""


@dataclass(frozen=True)
class HostRead:
    """One place a step waits for the device: the op and the source line that asked for it."""

    what: str
    where: str  # "degen_train/PATH:LINE in FUNCTION", or the first caller outside torch

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass
class StepWatch(TorchDispatchMode):
    """The dispatch mode of both watches (see the module docstring)."""

    fake: bool = False
    reads: list[HostRead] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in HOST_READS:
            self.reads.append(HostRead(HOST_READS[func], caller()))
            if self.fake:
                return _made_up(func, args, kwargs)
        if func in MASK_INDEXING and any(_is_mask(i) for i in args[1]):
            self.reads.append(HostRead(f"{func.__name__} with a boolean mask (nonzero)", caller()))
            if self.fake:
                args = (args[0], _positions_for_masks(args[1]), *args[2:])
        if func in (aten._to_copy.default, aten.copy_.default):
            self._note_copy_to_host(func, args, kwargs)
        elif self.fake:
            _refuse_mixed_devices(func, args, kwargs)
        return func(*args, **kwargs)

    def _note_copy_to_host(self, func: Any, args: tuple, kwargs: dict) -> None:
        source = args[1] if func is aten.copy_.default else args[0]
        target = args[0].device if func is aten.copy_.default else kwargs.get("device")
        if target is not None and torch.device(target).type == "cpu" and source.device.type != "cpu":
            self.reads.append(HostRead("a copy to the host (.cpu(), .tolist(), .numpy())", caller()))


class SolverPrecisionWatch(TorchFunctionMode):
    """Refuses a solver call on bf16/fp16 tensors (see SOLVERS)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in SOLVERS:
            low = [a.dtype for a in tree_leaves((args, kwargs)) if isinstance(a, Tensor) and a.dtype in LOW_PRECISION]
            if low:
                raise LowPrecisionLinalgError(
                    f"{func.__name__} on {low[0]} inputs at {caller()}: CUDA's solvers run float32/float64 only; "
                    f"compute it in float32 (degen_train.devices.precision.autocast_off and .float())"
                )
        return func(*args, **kwargs)


def caller() -> str:
    """Where a call came from: the innermost frame of degen_train outside this file, and the library frame below it
    that made the call when it is not ours (``transformers/...:LINE in F, from degen_train/...``)."""
    here = Path(__file__).resolve()
    frames = [f for f in traceback.extract_stack()[:-1] if Path(f.filename).resolve() != here]
    ours = [i for i, f in enumerate(frames) if Path(f.filename).resolve().is_relative_to(PACKAGE)]
    libraries = [f for f in frames if "/torch/" not in f.filename and not f.filename.startswith("<")]
    innermost = libraries[-1] if libraries else frames[-1]
    if not ours:
        return _where(innermost)
    own = frames[ours[-1]]
    return _where(own) if innermost is own else f"{_where(innermost)}, from {_where(own)}"


def _where(frame: traceback.FrameSummary) -> str:
    path = Path(frame.filename).resolve()
    shown = f"degen_train/{path.relative_to(PACKAGE)}" if path.is_relative_to(PACKAGE) else "/".join(path.parts[-2:])
    return f"{shown}:{frame.lineno} in {frame.name}"


def _is_mask(index: Any) -> bool:
    return isinstance(index, Tensor) and index.dtype in (torch.bool, torch.uint8)


def _positions_for_masks(indices: list) -> list:
    """Each boolean mask as the long indices of a made-up half of its positions (a fake step's nonzero)."""
    out: list = []
    for index in indices:
        if _is_mask(index):
            out.extend(torch.empty((max(1, index.numel() // 2), index.dim()), dtype=torch.long, device=index.device)
                       .unbind(1))  # fmt: skip
        else:
            out.append(index)
    return out


def _made_up(func: Any, args: tuple, kwargs: dict) -> Any:
    """A plausible result of a data-dependent op on a fake tensor (which holds no values)."""
    tensor = args[0]
    if func is aten._local_scalar_dense.default:
        return True if tensor.dtype == torch.bool else 0.5 if tensor.dtype.is_floating_point else 1
    if func is aten.bincount.default:
        length = max(int(kwargs.get("minlength", args[2] if len(args) > 2 else 0)), 1)
        return torch.empty(length, dtype=torch.long, device=tensor.device)
    if func is aten.nonzero.default:
        return torch.empty((max(1, tensor.numel() // 2), tensor.dim()), dtype=torch.long, device=tensor.device)
    if func is aten.repeat_interleave.Tensor:
        return torch.empty(max(1, tensor.numel()), dtype=torch.long, device=tensor.device)
    half = torch.empty(max(1, tensor.numel() // 2), dtype=tensor.dtype, device=tensor.device)
    if func is aten.masked_select.default:
        return half
    inverse = torch.empty(tensor.shape, dtype=torch.long, device=tensor.device)
    counts = torch.empty(half.shape, dtype=torch.long, device=tensor.device)
    return half, inverse, counts  # the unique family: (values, inverse, counts)


def _refuse_mixed_devices(func: Any, args: tuple, kwargs: dict) -> None:
    """A CPU tensor beside device tensors: allowed only as a 0-dim operand of a pointwise op, as CUDA allows it."""
    tensors = [a for a in tree_leaves((args, kwargs)) if isinstance(a, Tensor)]
    on_cpu = [t for t in tensors if t.device.type == "cpu"]
    if not on_cpu or len(on_cpu) == len(tensors):
        return
    if torch.Tag.pointwise in func.tags and all(t.dim() == 0 for t in on_cpu):
        return
    shapes = ", ".join(f"{tuple(t.shape)} {t.device.type}" for t in tensors[:4])
    raise DeviceMixError(f"{func.__name__} mixes a CPU tensor with device tensors ({shapes}) at {caller()}")


def to_fake_device(module: nn.Module, mode: Any) -> None:
    """Replace every parameter and buffer of ``module`` by a fake tensor on FAKE_DEVICE, keeping shared tensors
    shared (tied embeddings stay tied) and requires_grad as it was."""
    made: dict[int, Tensor] = {}
    for owner in module.modules():
        for name, value in [*owner._parameters.items(), *owner._buffers.items()]:
            if value is None:
                continue
            if id(value) not in made:
                fake = mode.from_tensor(value.detach()).to(FAKE_DEVICE)
                made[id(value)] = nn.Parameter(fake, requires_grad=value.requires_grad) if isinstance(
                    value, nn.Parameter
                ) else fake  # fmt: skip
            store = owner._parameters if name in owner._parameters else owner._buffers
            store[name] = made[id(value)]


def fake_batch(batch: dict[str, Any], mode: Any) -> dict[str, Any]:
    """The batch's tensors as fake tensors on FAKE_DEVICE (other entries as they are)."""
    return {k: mode.from_tensor(v).to(FAKE_DEVICE) if isinstance(v, Tensor) else v for k, v in batch.items()}


def training_step(module: Any, batch: dict[str, Any]) -> None:
    """What PretrainModule does in a training step, without a Trainer: a term's state sampling when it asks for one
    at step 0, the forward with every term, the logged values stacked, the backward."""
    from degen_train.run.step_log import stack_logged

    for term in module.loss.terms.values():
        wanted = term.states_wanted(0, 1)
        if wanted:
            with torch.no_grad():
                term.refresh(iter([module(batch, states_for=term)]), wanted)
    total, logged = module(batch)
    stack_logged(logged)
    total.backward()


def watch_fake_device_step(module: Any, batch: dict[str, Any], *, dtype: torch.dtype | None = None) -> list[HostRead]:
    """One training step of ``module`` and ``batch`` on the fake device, in ``dtype`` when given (bf16-true);
    raises DeviceMixError; returns the host reads. The module stays fake: build a fresh one to train."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)  # real meta tensors made inside (an empty KV cache) turn fake
    if dtype is not None:
        module.to(dtype)
    to_fake_device(module, mode)
    watch = StepWatch(fake=True)
    with mode, watch:
        training_step(module, fake_batch(batch, mode))
    return list(watch.reads)


def watch_autocast_step(module: Any, batch: dict[str, Any], *, dtype: torch.dtype = torch.bfloat16) -> list[HostRead]:
    """One real training step on the CPU under ``dtype`` autocast; raises LowPrecisionLinalgError."""
    watch = StepWatch()
    with torch.autocast("cpu", dtype=dtype), SolverPrecisionWatch(), watch:
        training_step(module, batch)
    return list(watch.reads)
