"""Load HF weights quietly and say in one plain line what did not come from the checkpoint.

transformers 5 prints a coloured "LOAD REPORT" table and a progress bar on every load; in a batch log the colour
codes are raw bytes and the table buries the one fact that matters (which weights start untrained).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from transformers.utils import logging as transformers_logging

from degen_train.core.handed_files import no_remote_code
from degen_train.models import attention_variants  # noqa: F401 - registers the exports' degen_<arch> types

log = logging.getLogger("degen_train")


def grouped(keys: Iterable[str], depth: int = 2) -> str:
    """Weight names grouped by their first ``depth`` parts: 'cls.predictions (6), pooler.dense (2)'."""
    counts: dict[str, int] = {}
    for key in sorted(keys):
        prefix = ".".join(key.split(".")[:depth])
        counts[prefix] = counts.get(prefix, 0) + 1
    return ", ".join(f"{prefix} ({count})" for prefix, count in counts.items())


def load_pretrained(loader: Any, source: str, what: str, *, missing: list[str] | None = None, **kwargs: Any) -> Any:
    """``loader.from_pretrained(source, **kwargs)`` without transformers' report and bars; logs
    '<what>: weights from SOURCE; newly initialised: ...; not used: ...' when something did not load. The names of
    the newly initialised weights are appended to ``missing`` when a list is given."""
    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        model, info = loader.from_pretrained(source, output_loading_info=True, **kwargs, **no_remote_code(source))
    except Exception as error:
        if not _refused_pickle(error):
            raise
        files = ", ".join(p.name for p in sorted(Path(source).glob("*.bin"))) or "its weights file"
        raise ValueError(
            f"{what}={source}: {files} is a pickle that torch's weights-only load refused (it holds more than tensors, "
            f"so loading it would run code); degen-train loads such a file no other way: use the model's safetensors "
            f"export (model.safetensors)"
        ) from None
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    if missing is not None:
        missing.extend(info.get("missing_keys") or [])
    parts = [f"{what}: weights from {source}"]
    if info.get("missing_keys"):
        parts.append(f"newly initialised: {grouped(info['missing_keys'])}")
    if info.get("unexpected_keys"):
        parts.append(f"in the checkpoint but not used: {grouped(info['unexpected_keys'])}")
    if info.get("mismatched_keys"):
        mismatched = (k[0] if isinstance(k, tuple) else k for k in info["mismatched_keys"])
        parts.append(f"shape differs, re-initialised: {grouped(mismatched)}")
    log.info("; ".join(parts))
    return model


def _refused_pickle(error: BaseException | None) -> bool:
    """torch's weights-only unpickler refused a file (anywhere in the chain)."""
    import pickle

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, pickle.UnpicklingError) or "Weights only load failed" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def refuse_foreign_sub_configs(model_dir: Path, config: Any) -> None:
    """A config.json that nests a sub-model's section its model type does not have (``text_config`` in a GPT-2's):
    transformers reads it as a plain dict and fails deep inside building the model. Refused in one line naming it."""
    own = set(getattr(type(config), "sub_configs", {}) or {})
    nested = [name for name, value in vars(config).items()
              if name.endswith("_config") and isinstance(value, dict) and name not in own]  # fmt: skip
    if nested:
        raise ValueError(
            f"{model_dir}/config.json: {nested[0]} is a sub-model's section, which a {config.model_type} config does "
            f"not have (its sections: {', '.join(sorted(own)) or 'none'}); remove it, or use the export as it was "
            f"written"
        )


def check_weights_fit_config(model_dir: Path) -> None:
    """A model folder's safetensors hold exactly the tensors its config.json describes, in their shapes: weights of
    another model (tensors the config has no place for), a config edited afterwards (a width that differs) or a file
    cut short are refused here, naming the file and the tensors, before any model is built."""
    import torch
    import transformers
    from safetensors import SafetensorError, safe_open
    from transformers import AutoConfig

    files = sorted(model_dir.glob("*.safetensors"))
    held: dict[str, tuple[int, ...]] = {}
    for file in files:
        try:
            with safe_open(str(file), "pt") as handle:
                held |= {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}  # noqa: SIM118
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{file} is not a readable safetensors file ({error}): it was cut short or is not "
                             f"weights; copy it again from its source") from None  # fmt: skip

    config = AutoConfig.from_pretrained(str(model_dir), **no_remote_code(model_dir))
    refuse_foreign_sub_configs(model_dir, config)
    architecture = (config.architectures or [""])[0]
    variant = config.model_type.startswith(attention_variants.EXPORTED_TYPE_PREFIX)  # built as degen_train builds it
    model_class = getattr(attention_variants if variant else transformers, f"Degen{architecture}" if variant else
                          architecture, None)  # fmt: skip
    if model_class is None or not files:  # an architecture this transformers does not name: its own loader decides
        return
    with torch.device("meta"):
        skeleton = model_class._from_config(config)
    tied = getattr(skeleton, "all_tied_weights_keys", None) or getattr(skeleton, "_tied_weights_keys", None) or ()
    expected = {key: tuple(t.shape) for key, t in skeleton.state_dict().items()}
    buffers = {name for name, _ in skeleton.named_buffers()}  # a buffer an older version saved (position_ids)

    def ignored(key: str, patterns: Any) -> bool:  # what transformers itself ignores on a load
        return any(re.search(pattern, key) for pattern in patterns or ())

    missing = sorted(k for k in set(expected) - set(held) - set(tied)
                     if not ignored(k, skeleton._keys_to_ignore_on_load_missing))  # fmt: skip
    unused = sorted(k for k in set(held) - set(expected) - buffers
                    if not ignored(k, skeleton._keys_to_ignore_on_load_unexpected))  # fmt: skip
    differ = sorted(k for k in set(held) & set(expected) if held[k] != expected[k])
    shapes = [f"{k} {held[k]} (config: {expected[k]})" for k in differ]
    problems = [f"{len(unused)} tensors the config has no place for ({grouped(unused)})"] if unused else []
    problems += [f"{len(missing)} tensors the config needs are missing ({grouped(missing)})"] if missing else []
    problems += [f"shapes differ: {', '.join(shapes[:4])}{', ...' if len(shapes) > 4 else ''}"] if shapes else []
    if problems:
        raise ValueError(
            f"{model_dir}: the weights in {', '.join(f.name for f in files)} are not the model its config.json "
            f"describes ({config.architectures[0]}): {'; '.join(problems)}. The weights are another model's or the "
            f"config was edited: use the folder as it was exported"
        )
