"""The vocabulary padded to a multiple (``model.pad_vocab_to_multiple_of``): an output-layer width the GPU's tiles
divide, as nanoGPT and llm.c pad GPT-2's 50,257 entries to 50,304.

The tokenizer keeps its V entries; the model's embedding rows, output rows and output bias grow to
V' = ⌈V / m⌉ · m. The added rows start at zero and never appear as an input, and their logits are −∞ (a forward
hook on the output layer, so the HF model's own forward, its loss and generation see it too), so every loss,
gradient and probability is the V-entry model's: the added rows get no gradient and stay zero. Metrics read the V
real rows (``real_rows``), and an export is cut back to V rows (``unpadded_for_export``), so exports load in
``AutoModel`` as an unpadded run's do. A chunked output layer (losses/chunked_ce.py) masks the same columns itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

UNPADDED_KEY = "unpadded_vocab_size"  # in the training model's config while its vocabulary is padded


def vocabulary_size(model: Any) -> int:
    """The tokenizer's V: the entries the model predicts (its config's vocab_size unless padded)."""
    return int(getattr(model.config, UNPADDED_KEY, None) or model.config.vocab_size)


def padded_size(vocabulary: int, multiple: int) -> int:
    """V rounded up to a multiple of ``multiple`` (1: V itself)."""
    return -(-vocabulary // multiple) * multiple


def real_rows(weight: Tensor, model: Any) -> Tensor:
    """The first V rows of a (V', ...) embedding matrix or bias: the tokens the tokenizer has (a view)."""
    return weight[: vocabulary_size(model)]


def pad_vocabulary(model: Any, multiple: int) -> Any:
    """Grow ``model``'s vocabulary rows to a multiple of ``multiple`` (in place; returned), zero rows with −∞ logits.

    transformers' ``resize_token_embeddings`` grows the input, output and bias rows (tied or not); it draws the new
    rows' init from the global generator, which is forked here so that the run's later draws (dropout, data) are
    the unpadded run's, and the rows are zeroed anyway.
    """
    if multiple < 1:
        raise ValueError(f"model.pad_vocab_to_multiple_of={multiple}: must be >= 1 (1 = no padding)")
    vocabulary = vocabulary_size(model)
    padded = padded_size(vocabulary, multiple)
    if padded == model.config.vocab_size:
        return model
    with torch.random.fork_rng(devices=[]):
        model.resize_token_embeddings(vocabulary, pad_to_multiple_of=multiple, mean_resizing=False)
    with torch.no_grad():
        for name in vocabulary_tensor_names(model):
            model.get_parameter(name)[vocabulary:].zero_()
    setattr(model.config, UNPADDED_KEY, vocabulary)
    _mask_padded_logits(model, vocabulary)
    return model


def vocabulary_tensor_names(model: Any) -> set[str]:
    """Every state-dict name (tied names included) of a tensor with one row per vocabulary entry: the input
    embedding matrix, the output layer's weight and its bias (BERT's also named cls.predictions.bias)."""
    layers = {id(model.get_input_embeddings()), id(model.get_output_embeddings())}
    rows = model.config.vocab_size
    names, tensors = set(), set()
    for prefix, module in model.named_modules(remove_duplicate=False):
        if id(module) not in layers:
            continue
        for attr in ("weight", "bias"):
            tensor = getattr(module, attr, None)
            if isinstance(tensor, Tensor) and tensor.shape[0] == rows:
                names.add(f"{prefix}.{attr}" if prefix else attr)
                tensors.add(id(tensor))
    names |= {name for name, p in model.named_parameters(remove_duplicate=False) if id(p) in tensors}
    return names


def _mask_padded_logits(model: Any, vocabulary: int) -> None:
    """A forward hook on the output layer setting the logits of columns ``vocabulary``.. to −∞."""

    def mask(module: nn.Module, inputs: Any, logits: Tensor) -> Tensor:
        # In place: the linear layer's backward needs its inputs, not its output, and a second (N, V') buffer is
        # what whole logits cannot afford. The masked columns' gradient is zero (softmax 0 there).
        logits[..., vocabulary:] = float("-inf")
        return logits

    model.get_output_embeddings().register_forward_hook(mask)


@contextmanager
def unpadded_for_export(model: Any, weights: dict[str, Tensor]) -> Iterator[dict[str, Tensor]]:
    """``weights`` with every vocabulary tensor cut to its V rows, and the model's config saying V, while inside:
    what ``save_pretrained`` writes is the model an unpadded run would have exported."""
    vocabulary = getattr(model.config, UNPADDED_KEY, None)
    if vocabulary is None:
        yield weights
        return
    names = vocabulary_tensor_names(model)
    cut = {name: (t[:vocabulary] if name in names else t) for name, t in weights.items()}
    padded = model.config.vocab_size
    model.config.vocab_size = vocabulary
    delattr(model.config, UNPADDED_KEY)
    try:
        yield cut
    finally:
        model.config.vocab_size = padded
        setattr(model.config, UNPADDED_KEY, vocabulary)
