"""degen-convert SRC [--ckpt OUT.ckpt] [--hf OUT_DIR]: a checkpoint, sharded or not, as one file or an HF folder.

SRC is a checkpoint file, a sharded checkpoint folder (FSDP2) or a run directory (its newest verified
checkpoint). ``--ckpt`` writes the one-file layout that every strategy and process count resumes from;
``--hf`` writes the model as ``save_pretrained`` does, loadable by ``AutoModel*`` (with the run's tokenizer
when it kept one). No training starts, no process group is needed, nothing existing is overwritten.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from degen_train.losses.spectrum import fold_spectral_state
from degen_train.storage.checkpoints import (
    CheckpointError,
    load_checkpoint_file,
    newest_checkpoint,
    save_checkpoint_file,
)

log = logging.getLogger("degen_train.convert")
MODEL_PREFIX = "backbone.model."  # where the HF model sits in the LightningModule's state dict


def resolve_source(source: Path) -> Path:
    """A checkpoint file or folder as given, or a run directory's newest verified checkpoint."""
    if (source / "checkpoints").is_dir():
        found, notes = newest_checkpoint(source / "checkpoints")
        if found is None:
            raise CheckpointError(f"{source} holds no checkpoint that loads ({'; '.join(notes) or 'none there'})")
        return found
    if not source.exists():
        raise CheckpointError(f"{source} does not exist: give a checkpoint file, a sharded checkpoint folder or a run")
    return source


def hf_model_of(checkpoint: dict[str, Any]) -> Any:
    """The HF model a degen_train checkpoint holds, built from its recorded config and class, weights loaded."""
    from transformers import AutoConfig

    from degen_train.models.architectures import ARCHITECTURES
    from degen_train.models.attention_variants import SETTINGS_KEY, install_attention_variant

    identity = checkpoint.get("degen_train", {})
    if "hf_config" not in identity:
        raise CheckpointError(
            "this checkpoint records no model config (written before degen-convert existed): export it by resuming "
            "the run for 0 steps with export_hf=true, or use --ckpt"
        )
    classes = {c.__name__: c for a in ARCHITECTURES.values() for c in (a.model_class, a.nsp_class) if c is not None}
    name = identity["hf_class"]
    if name not in classes:  # a fixed table of classes: a file names one, it never imports anything
        raise CheckpointError(f"checkpoint's model class {name!r} is not one of {', '.join(sorted(classes))}")
    config_values = dict(identity["hf_config"])
    config = AutoConfig.for_model(config_values.pop("model_type"), **config_values)
    model = classes[name](config)
    if getattr(config, SETTINGS_KEY, None):  # the attention variant it was trained with: its gates, its softmax
        install_attention_variant(model, getattr(config, SETTINGS_KEY), arch=config.model_type)
    state = checkpoint["state_dict"]
    weights = {k.removeprefix(MODEL_PREFIX): v for k, v in state.items() if k.startswith(MODEL_PREFIX)}
    weights = fold_spectral_state(weights, model)  # spectrum control's U·diag(σ)·Vᵀ as one plain matrix
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {k for k in missing if k.endswith(("decoder.weight", "lm_head.weight", "decoder.bias"))}
    if set(missing) - tied or unexpected:
        raise CheckpointError(
            f"checkpoint weights do not fit {name}: missing {sorted(missing)[:5]}, extra {unexpected[:5]}"
        )
    return model


def convert(source: Path, *, ckpt: Path | None = None, hf: Path | None = None, tokenizer: Path | None = None) -> dict:
    """Write SRC's checkpoint as one file (``ckpt``) and/or an HF folder (``hf``); returns what was written."""
    if ckpt is None and hf is None:
        raise ValueError("nothing to write: give ckpt and/or hf")
    for target in (ckpt, hf):
        if target is not None and target.exists():
            raise FileExistsError(f"{target} exists: degen-convert never overwrites; give another path")
    path = resolve_source(source)
    checkpoint = load_checkpoint_file(path)  # a sharded folder is gathered here, on one process
    written: dict[str, Any] = {"source": str(path), "global_step": checkpoint.get("global_step")}
    if ckpt is not None:
        save_checkpoint_file(checkpoint, ckpt)
        written["ckpt"] = str(ckpt)
    if hf is not None:
        from degen_train.data.tokenizer import load_tokenizer
        from degen_train.run.export import export_pretrained

        run_dir = path.parent.parent
        tokenizer = tokenizer or next((p for p in (run_dir / "tokenizer", run_dir / "hf") if p.is_dir()), None)
        loaded_tokenizer = load_tokenizer(tokenizer) if tokenizer is not None else None
        if loaded_tokenizer is None:
            log.warning("no tokenizer found beside %s (give --tokenizer DIR): the folder holds the model only", path)
        record = checkpoint.get("degen_train", {}).get("provenance") or None
        with torch.no_grad():
            export_pretrained(hf_model_of(checkpoint), loaded_tokenizer, hf, record=record)
        written["hf"] = str(hf)
    return written
