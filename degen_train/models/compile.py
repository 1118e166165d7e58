"""model.compile: torch.compile each transformer block in place (its class's ``_no_split_modules``).

Blocks only, the way torchtitan compiles: the blocks take (B, T, H) and return (B, T, H), so the number of
labelled positions N, which changes every batch, never reaches a compiled graph (the labelled-positions
head, the loss terms and the embeddings run eagerly). A new sequence length T recompiles once; after that
torch marks T dynamic (automatic dynamic shapes), so a batch of any length reuses the graph. Blocks are
compiled in place (``nn.Module.compile``): parameter names, checkpoints and exports stay as in eager mode,
and FSDP2 shards the same modules afterwards.
"""

from __future__ import annotations

import shutil

import torch
from torch import nn


def check_compile_available(device_type: str = "cpu") -> None:
    """Refuse model.compile=true where torch.compile cannot work, naming what is missing."""
    if not hasattr(torch, "compile"):
        raise ValueError(f"model.compile=true needs torch.compile (torch >= 2.0); this is torch {torch.__version__}")
    if device_type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        raise ValueError(
            "model.compile=true on the CPU needs a C++ compiler for torch.compile's inductor backend (g++ or "
            "clang++ on PATH): install one (apt-get install g++) or set model.compile=false"
        )


def compile_blocks(model: nn.Module) -> list[str]:
    """Compile every module of a ``_no_split_modules`` class in place; returns their names. A module compiled already
    (the main model's embeddings a generator shares) is left as it is."""
    units = set(getattr(model, "_no_split_modules", None) or ())
    compiled = []
    for name, module in model.named_modules():
        if getattr(module, "_compiled_call_impl", None) is not None:
            continue
        if type(module).__name__ in units and module is not model:
            module.compile()
            compiled.append(name)
    if not compiled:
        raise ValueError(f"model.compile=true: {type(model).__name__} names no blocks (_no_split_modules) to compile")
    return compiled
