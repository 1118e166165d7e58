"""Strategy factories for configs that need more than a constructor call."""

from __future__ import annotations

import importlib.util
from typing import Any

from lightning.pytorch.strategies import FSDPStrategy, Strategy

LAYER_MODULES = {
    "BertLayer": "transformers.models.bert.modeling_bert",
    "GPT2Block": "transformers.models.gpt2.modeling_gpt2",
    "RobertaLayer": "transformers.models.roberta.modeling_roberta",
}


def fsdp_strategy(
    *, wrap_layers: list[str], sharding_strategy: str = "FULL_SHARD", state_dict_type: str = "full", **kwargs: Any
) -> FSDPStrategy:
    """FSDP with one unit per transformer layer class named in ``wrap_layers``."""
    unknown = [name for name in wrap_layers if name not in LAYER_MODULES]
    if unknown:
        raise ValueError(f"strategy.wrap_layers: unknown layer {unknown}; known: {', '.join(LAYER_MODULES)}")
    layers = {getattr(importlib.import_module(LAYER_MODULES[name]), name) for name in wrap_layers}
    return FSDPStrategy(
        auto_wrap_policy=layers, sharding_strategy=sharding_strategy, state_dict_type=state_dict_type, **kwargs
    )


def deepspeed_strategy(*, stage: int = 2, offload_optimizer: bool = False, **kwargs: Any) -> Strategy:
    """DeepSpeed ZeRO stage 1-3; a clear error when the package is missing."""
    if importlib.util.find_spec("deepspeed") is None:
        raise ValueError("strategy=deepspeed needs the deepspeed package: pip install deepspeed")
    from lightning.pytorch.strategies import DeepSpeedStrategy

    return DeepSpeedStrategy(stage=stage, offload_optimizer=offload_optimizer, **kwargs)
