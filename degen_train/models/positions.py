"""The labelled positions of a batch as flat indices: gathered with index_select, never with a boolean mask (which
makes the host wait for the device to count the mask's entries, in the forward and again in the backward)."""

from __future__ import annotations

from typing import Any

from torch import Tensor


def labelled_positions(batch: dict[str, Any]) -> Tensor:
    """(N,) flat positions of ``batch["labels"] != -100``: the collator's ``labelled_index`` (found on the host), or
    found here when a batch has none (a hand-made batch), which makes the host wait for the device once."""
    index = batch.get("labelled_index")
    if index is None:
        return (batch["labels"].reshape(-1) != -100).nonzero().squeeze(1)
    return index


def at_positions(values: Tensor, index: Tensor) -> Tensor:
    """values (B, T, ...) at the flat positions ``index`` (N,): (N, ...), as values[labels != -100] without a wait."""
    return values.reshape(-1, *values.shape[2:]).index_select(0, index)


def model_inputs(batch: dict[str, Any], *, token_types: bool = True) -> dict[str, Any]:
    """The HF model's keyword inputs from a batch: the attention mask left out when the collator found every row full
    (``padded`` False: the mask is all ones, and transformers would read it on the host to find that out)."""
    padded = batch.get("padded", True)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"] if padded else None}
    if token_types and "token_type_ids" in batch:
        inputs["token_type_ids"] = batch["token_type_ids"]
    return inputs


def skip_padding_warning(model: Any) -> None:
    """Turn off transformers' per-forward padding check on every pretrained (sub)model of ``model``: given no mask it
    looks for the pad id in the first and last columns on the device (a host wait per forward) to warn once. Our
    batches leave the mask out only when the collator saw that no row is padded (model_inputs)."""
    from transformers import PreTrainedModel

    for module in model.modules():
        if isinstance(module, PreTrainedModel):
            module.warn_if_padding_and_no_attention_mask = _padding_is_known


def _padding_is_known(input_ids: Any, attention_mask: Any) -> None:
    """A module-level function (not a lambda), so a model carrying it still pickles."""
