"""model.activation_checkpointing: keep a block's input, not its activations, and recompute them in the backward.

``none``; ``full`` (every block); or an integer k, every k-th block (blocks k, 2k, ...; torchtitan's selective
per-layer form: k = 2 keeps about half the activations of the checkpointed blocks). A block is a module of the
model's ``_no_split_modules`` class (BertLayer, GPT2Block, LlamaDecoderLayer, ...), the unit FSDP2 shards and
model.compile compiles; its ``forward`` is wrapped in PyTorch's own ``torch.utils.checkpoint.checkpoint``
(non-reentrant, the RNG state kept, so dropout draws the same masks in the recomputation), on the instance, so
parameter names, checkpoints and exports stay as they are. Applied before compiling (the compiled graph holds the
checkpoint region) and before FSDP2 (whose hooks gather the block's parameters around the recomputation too), as
torchtitan orders them. A TaCL teacher and the ELECTRA/COCO-LM generators are not wrapped: the teacher keeps no
activations (no gradient) and a generator is a fraction of the model.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

KV_CACHE_ARGUMENTS = ("past_key_values", "past_key_value", "layer_past")
CHOICES = "none, full, or an integer k >= 1 (every k-th block)"


def checkpoint_every(setting: str | int) -> int | None:
    """The setting as a block period: None (none), 1 (full) or k; refuses anything else naming the choices."""
    if setting == "none":
        return None
    if setting == "full":
        return 1
    if isinstance(setting, int) and not isinstance(setting, bool) and setting >= 1:
        return setting
    raise ValueError(f"model.activation_checkpointing={setting!r}: choose {CHOICES}")


def transformer_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's transformer blocks in order: its ``_no_split_modules`` classes, less the model itself and the
    units that hold an embedding table (BertEmbeddings is one of BERT's units: a lookup is not worth recomputing)."""
    units = set(getattr(model, "_no_split_modules", None) or ())
    return [(name, m) for name, m in model.named_modules() if type(m).__name__ in units and m is not model
            and not any(isinstance(c, nn.Embedding) for c in m.children())]  # fmt: skip


def checkpoint_blocks(model: nn.Module, setting: str | int) -> list[str]:
    """Wrap every k-th block's forward in a non-reentrant checkpoint; returns the wrapped blocks' names."""
    every = checkpoint_every(setting)
    if every is None:
        return []
    blocks = transformer_blocks(model)
    if not blocks:
        raise ValueError(
            f"model.activation_checkpointing={setting}: {type(model).__name__} names no blocks (_no_split_modules)"
        )
    wrapped = []
    for position, (name, block) in enumerate(blocks, start=1):
        if position % every or getattr(block, "_checkpointed", False):
            continue
        block.forward = functools.partial(_checkpointed, block.forward)  # the instance's: the class is untouched
        block._checkpointed = True
        wrapped.append(name)
    return wrapped


def _checkpointed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    """The block's forward, its activations recomputed in the backward; a plain call where nothing needs a
    gradient (validation, a probe, generation), which keeps nothing anyway, and where a KV cache is passed (the
    recomputation would append the block's keys to it a second time; the backbone trains decoders without one)."""
    if not torch.is_grad_enabled() or any(kwargs.get(k) is not None for k in KV_CACHE_ARGUMENTS):
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)
