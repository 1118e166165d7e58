"""Load an encoder (a degen_train run or any HF directory) and turn text into contextual vectors."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import AutoModel
from transformers.utils import logging as transformers_logging

import degen_train.models  # noqa: F401 - registers the degen_<arch> types of exports with an attention variant
from degen_train.core.handed_files import no_remote_code
from degen_train.core.paths import links_in, shown_links
from degen_train.data.tokenizer import load_tokenizer
from degen_train.evaluation.section import Pooling, PoolingLayer
from degen_train.models.loading import check_weights_fit_config

log = logging.getLogger(__name__)
POOLING_LAYERS, POOLINGS = get_args(PoolingLayer), get_args(Pooling)  # declared with the eval section's fields
# A folder holds a tokenizer when it has one of these (fast, WordPiece, BPE, SentencePiece).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")  # fmt: skip
MIN_VOCABULARY = 100  # fewer tokens: not a trained tokenizer (transformers builds a 5-token one from a config alone)


@dataclass
class Encoder:
    model: Any
    tokenizer: Any
    source: Path
    max_length: int
    batch_size: int = 32
    truncated: int = 0

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)


PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "tf_model.h5")


def refuse_pickled_weights(model_dir: Path) -> None:
    """A model folder's weights must be safetensors: a pickle (pytorch_model.bin) from someone else's folder is never
    loaded (loading one can run code), and a folder with neither would silently start from random weights."""
    if any(model_dir.glob("*.safetensors")) or (model_dir / "model.safetensors.index.json").is_file():
        return
    pickled = [name for name in PICKLED_WEIGHTS if (model_dir / name).is_file()]
    if pickled:
        raise ValueError(
            f"{model_dir / pickled[0]} is a pickle, and degen-train loads model weights from safetensors only (a "
            f"handed-over file never runs code here). Where you trust the file, convert the folder once: "
            f"AutoModel.from_pretrained(FOLDER).save_pretrained(FOLDER) writes model.safetensors"
        )
    raise ValueError(f"{model_dir} holds no weights (no *.safetensors): the model would start from random weights")


def model_folder(path: str | Path) -> Path:
    """The HF folder of ``path`` (a degen_train run's hf/ export, or the folder itself), refused without a config or
    a tokenizer, naming what is missing."""
    path = Path(path).expanduser()
    model_dir = path / "hf" if (path / "hf" / "config.json").exists() else path
    if not (model_dir / "config.json").exists():
        raise FileNotFoundError(
            f"{path} is neither a degen_train run directory (with hf/) nor an HF model directory (with config.json)"
        )
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{model_dir} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): every word would be [UNK] and every "
            f"number meaningless. Copy the tokenizer's files into it (a degen-train run keeps them in RUN/tokenizer/)"
        )
    refuse_links_out_of(model_dir)
    refuse_pickled_weights(model_dir)
    check_weights_fit_config(model_dir)  # another model's weights, an edited config, a file cut short: named
    return model_dir


def refuse_links_out_of(model_dir: Path) -> None:
    """A model folder is read from its own files (issue 72.7, LK9: its tokenizer files were read through links),
    except the Hugging Face cache's own layout: a snapshot's files are links into the cache's blobs/, and a hub
    model fetched by transformers is one of those."""
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE).expanduser().resolve()
    outside = [link for link in links_in(model_dir) if not link.resolve().is_relative_to(cache)]
    if outside:
        raise ValueError(
            f"{model_dir} holds links ({shown_links(outside, 3)}): a model folder is read from its own files only, "
            f"never through a link (the Hugging Face cache's own snapshots aside); replace each link by a copy of "
            f"its file"
        )


def load_encoder(path: str | Path, *, batch_size: int = 32, max_length: int | None = None) -> Encoder:
    """``path``: a degen_train run directory (its hf/ export) or an HF model directory; offline."""
    model_dir = model_folder(path)
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # the export's MLM/NSP heads are expected to go unused here
    transformers_logging.disable_progress_bar()  # a "Loading weights" bar for a small local model
    try:  # an MLM export has no pooler: do not let AutoModel add a random one (and warn about it)
        model = AutoModel.from_pretrained(model_dir, add_pooling_layer=False, **no_remote_code(model_dir)).eval()
    except TypeError:
        model = AutoModel.from_pretrained(model_dir, **no_remote_code(model_dir)).eval()
    finally:
        transformers_logging.set_verbosity(verbosity)
    tokenizer = load_tokenizer(model_dir)
    if len(tokenizer) < MIN_VOCABULARY:
        raise ValueError(
            f"{model_dir}'s tokenizer has {len(tokenizer)} tokens: not a trained tokenizer (its files are empty or "
            f"wrong); copy the run's tokenizer files into it"
        )
    limit = max_length or min(int(getattr(model.config, "max_position_embeddings", 512)), 512)
    return Encoder(model, tokenizer, model_dir, limit, batch_size)


def _batches(items: Sequence[Any], size: int, description: str) -> Iterator[Sequence[Any]]:
    quiet = True if len(items) <= size else None  # None: tqdm stays off when the output is not a terminal
    for start in tqdm(range(0, len(items), size), desc=description, leave=False, disable=quiet):
        yield items[start : start + size]


def _forward(encoder: Encoder, encoded: dict) -> tuple[Tensor, ...]:
    device = next(encoder.model.parameters()).device  # the live model of a run may sit on a GPU
    with torch.no_grad():
        out = encoder.model(
            **{k: v.to(device) for k, v in encoded.items() if k in ("input_ids", "attention_mask", "token_type_ids")},
            output_hidden_states=True,
        )
    return out.hidden_states  # embeddings + every layer, each (B, T, H)


def _tokenize(encoder: Encoder, texts: Sequence[Any], **kwargs: Any) -> dict:
    encoded = encoder.tokenizer(
        list(texts), padding=True, truncation=True, max_length=encoder.max_length, return_tensors="pt", **kwargs
    )
    # Untruncated lengths, only to count what was cut (verbose=False: no "longer than the maximum" warning).
    full = encoder.tokenizer(list(texts), truncation=False, verbose=False, **kwargs)["input_ids"]
    encoder.truncated += sum(len(ids) > encoder.max_length for ids in full)
    return encoded


def sentence_vectors(
    encoder: Encoder, sentences: Sequence[str], *, layer: str | int = "last", pooling: str = "mean"
) -> Tensor:
    """(S, H) sentence vectors: the mean of token vectors over the attention mask (``mean``) or the first token's
    vector (``cls``: what SimCSE trains and its authors evaluate); layer: "last", "first_last" (average of the
    first and last layer's) or a layer index (0 = embeddings)."""
    if isinstance(layer, str) and layer not in POOLING_LAYERS:
        raise ValueError(f"layer={layer!r} is not one of {', '.join(POOLING_LAYERS)} or a layer index")
    if not isinstance(layer, str) and not 0 <= int(layer) <= encoder.num_layers:
        raise ValueError(f"layer {layer}: this model has {encoder.num_layers} layers (0 = the embeddings, "
                         f"{encoder.num_layers} = the last); give one of 0..{encoder.num_layers}, last or first_last")
    if pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r} is not one of {', '.join(POOLINGS)}")
    out = []
    for chunk in _batches(sentences, encoder.batch_size, "encoding"):
        encoded = _tokenize(encoder, chunk)
        layers = _forward(encoder, encoded)
        mask = encoded["attention_mask"].unsqueeze(-1).float()  # (B, T, 1)

        def pooled(hidden: Tensor, mask: Tensor = mask) -> Tensor:
            return hidden[:, 0] if pooling == "cls" else (hidden * mask).sum(1) / mask.sum(1)

        if layer == "last":
            out.append(pooled(layers[-1]))
        elif layer == "first_last":
            out.append((pooled(layers[1]) + pooled(layers[-1])) / 2)
        else:
            out.append(pooled(layers[int(layer)]))
    return torch.cat(out)


def token_vectors_by_layer(encoder: Encoder, sentences: Sequence[str]) -> tuple[list[list[Tensor]], list[Tensor]]:
    """Per layer (embeddings first), per sentence: (n_tokens, H) vectors of the real tokens; and the ids."""
    per_layer: list[list[Tensor]] = [[] for _ in range(encoder.num_layers + 1)]
    ids: list[Tensor] = []
    for chunk in _batches(sentences, encoder.batch_size, "encoding"):
        encoded = _tokenize(encoder, chunk)
        layers = _forward(encoder, encoded)
        for b, mask in enumerate(encoded["attention_mask"].bool()):
            ids.append(encoded["input_ids"][b][mask])
            for index, hidden in enumerate(layers):
                per_layer[index].append(hidden[b][mask])
    return per_layer, ids


def word_vectors(encoder: Encoder, words: Sequence[list[str]], positions: Sequence[int]) -> Tensor:
    """(S, H) last-layer vector of word ``positions[s]`` of pre-split ``words[s]``, mean over its sub-tokens."""
    out = []
    for start in range(0, len(words), encoder.batch_size):
        chunk = list(words[start : start + encoder.batch_size])
        encoded = _tokenize(encoder, chunk, is_split_into_words=True)
        hidden = _forward(encoder, encoded)[-1]
        for b in range(len(chunk)):
            word_ids = encoded.word_ids(b)
            target = positions[start + b]
            where = [t for t, w in enumerate(word_ids) if w == target]
            if not where:  # the target word was cut off by truncation
                out.append(torch.full((hidden.shape[-1],), float("nan")))
                continue
            out.append(hidden[b, where].mean(0))
    return torch.stack(out)
