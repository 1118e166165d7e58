"""Export the trained model as a standard transformers folder (``save_pretrained`` + tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from degen_train.core.io import atomic_directory
from degen_train.losses.spectrum import fold_spectral_state
from degen_train.models.attention_variants import exported_model_type
from degen_train.models.vocabulary import unpadded_for_export

PROVENANCE_FILE = "degen_train.json"  # in the export folder: how the weights were made


def export_pretrained(
    model: Any, tokenizer: Any, target: Path, *, record: dict[str, Any] | None = None, state_dict: dict | None = None
) -> Path:
    """Write ``target`` so that AutoModel / AutoModelFor{MaskedLM,CausalLM} / AutoTokenizer load it offline.

    ``record`` (the run's provenance) is written beside the weights as ``degen_train.json``; ``state_dict``: the
    weights to write when the model's own are sharded (FSDP2, gathered by parallel.full_state_dict).

    Non-finite weights are refused: an export is what others load, and NaN weights load without a word.
    """
    # Spectrum control's factors folded back into the plain embedding matrix (no-op without them)
    weights = fold_spectral_state(state_dict if state_dict is not None else model.state_dict(), model)
    broken = [name for name, t in weights.items() if t.is_floating_point() and not t.isfinite().all()]
    if broken:
        raise ValueError(f"refusing to export non-finite weights to {target}: {', '.join(broken[:5])}")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a one-shard "Writing model shards" bar says nothing
    # A padded vocabulary (model.pad_vocab_to_multiple_of) is cut back to the tokenizer's V rows: the export is the
    # model an unpadded run would have written (the padded rows are zero and never predicted).
    with atomic_directory(target, replace=True) as staging, unpadded_for_export(model, weights) as weights:
        model.save_pretrained(str(staging), state_dict=weights)
        if tokenizer is not None:  # degen-convert of a run that kept no tokenizer: the model only
            tokenizer.save_pretrained(str(staging))
        if record is not None:
            (staging / PROVENANCE_FILE).write_text(json.dumps(record, indent=2, default=str))
        declare_variant(staging / "config.json", model.config)
    return target


def declare_variant(config_file: Path, config: Any) -> None:
    """An attention variant's export declares model_type degen_<arch>: stock transformers refuses to load it rather
    than compute plain softmax (models/attention_variants.py); degen_train's processes load it."""
    model_type = exported_model_type(config)
    if model_type != config.model_type:
        values = json.loads(config_file.read_text())
        values["model_type"] = model_type
        config_file.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")
