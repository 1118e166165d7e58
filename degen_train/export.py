"""Export the trained model as a standard transformers folder (``save_pretrained`` + tokenizer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from degen_train.io import atomic_directory


def export_pretrained(model: Any, tokenizer: Any, target: Path) -> Path:
    """Write ``target`` so that AutoModel / AutoModelFor{MaskedLM,CausalLM} / AutoTokenizer load it offline."""
    with atomic_directory(target, replace=True) as staging:
        model.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
    return target
