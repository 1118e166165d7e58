"""Strategy factories for configs that need more than a constructor call."""

from __future__ import annotations

import importlib.util
from typing import Any

from lightning.pytorch.strategies import Strategy


def deepspeed_strategy(*, stage: int = 2, offload_optimizer: bool = False, **kwargs: Any) -> Strategy:
    """DeepSpeed ZeRO stage 1-3; a clear error when the package is missing."""
    if importlib.util.find_spec("deepspeed") is None:
        raise ValueError("strategy=deepspeed needs the deepspeed package: pip install deepspeed")
    from lightning.pytorch.strategies import DeepSpeedStrategy

    return DeepSpeedStrategy(stage=stage, offload_optimizer=offload_optimizer, **kwargs)
