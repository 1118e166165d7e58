"""The loops a careful user writes by hand, on the model degen-train trains: the same HF model built from the same
config (vocabulary, dropout, attention), the same batch, bf16 autocast, fused AdamW, clipping, random tokens.

BERT has two: ``hf_default`` (``model(input_ids, labels=...)``: the vocabulary head at every position, what an HF
user runs) and ``careful`` (the encoder, then the head at the labelled rows only, as MosaicBERT and degen-train do).
GPT-2's head is at every position in both (a decoder predicts every next token); its forward builds no KV cache.
Their FLOPs are counted by the one function the runs use (degen_train.metrics.flops.model_flops), at the positions
each loop runs its head on, and their rate is the median step after the warm-up (degen_train.metrics.steady), on
the clock degen-train's runs are timed by (degen_train.metrics.step_clock: CUDA events at each step's end, one
synchronise at the window's end; the loop never waits for the device inside a step). The careful loop draws its
masks on the host, as a loader does, so picking the labelled rows needs no wait for the device either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from degen_train.metrics.flops import body_and_head_parameters, model_flops
from degen_train.metrics.steady import WARMUP_STEPS, steady_window
from degen_train.metrics.step_clock import StepClock
from degen_train.models.vocabulary import vocabulary_size

MODES = {"bert": ("hf_default", "careful"), "gpt2": ("hf_default",)}


def hand_loop(model: Any, *, kind: str, mode: str, batch: int, length: int, steps: int, device: torch.device,
              compiled: bool = False, peak: float = 0.0) -> dict[str, Any]:  # fmt: skip
    """One loop's steady tokens/s, its model FLOPs per token, MFU against ``peak``, and its warm-up seconds.
    ``compiled``: the whole step's model through torch.compile."""
    torch.manual_seed(0)
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=device.type == "cuda")
    forward = torch.compile(model) if compiled else model
    encoder = (torch.compile(model.bert) if compiled else model.bert) if mode == "careful" else None
    vocabulary = vocabulary_size(model)  # the tokenizer's entries: a padded model's extra rows are never a token
    head = model.cls if kind == "bert" else model.lm_head
    body_weights, head_weights = body_and_head_parameters(model, head)
    counted: list[int] = []

    def step() -> None:
        # A batch as a loader hands it over: made on the host, then copied without waiting (pinned on a GPU)
        ids = torch.randint(5, vocabulary, (batch, length))
        labels = ids.clone()
        rows = None
        if kind == "bert":
            chosen = torch.rand(batch, length) < 0.15
            labels, ids = torch.where(chosen, ids, -100), ids.masked_fill(chosen, 4)
            rows = chosen.reshape(-1).nonzero().squeeze(1)  # the labelled rows, known on the host
            counted.append(len(rows) if mode == "careful" else batch * length)
            rows = _to(rows, device)
        else:
            counted.append(batch * (length - 1))
        ids, labels = _to(ids, device), _to(labels, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            if mode == "careful":  # the head at the labelled rows only
                hidden = encoder(input_ids=ids)[0]
                picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows)
                logits = head(picked)
                loss = F.cross_entropy(logits.float(), labels.reshape(-1).index_select(0, rows))
            else:
                loss = forward(input_ids=ids, labels=labels, use_cache=False).loss if kind == "gpt2" else (
                    forward(input_ids=ids, labels=labels).loss)  # fmt: skip
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    seconds = timed_steps(step, steps=WARMUP_STEPS + steps, device=device)
    window = steady_window(seconds)
    assert window is not None
    config = model.config
    predicted = sum(counted[WARMUP_STEPS:]) / max(len(counted[WARMUP_STEPS:]), 1)
    flops = model_flops(body=body_weights, head=head_weights, layers=config.num_hidden_layers,
                        hidden=config.hidden_size, batch=batch, length=length, predicted=int(predicted))  # fmt: skip
    rate = batch * length / window.median_seconds
    return {"tokens_per_s": rate, "model_flops_per_token": flops / (batch * length),
            "vocabulary": model.get_input_embeddings().num_embeddings, "tokenizer_vocabulary": vocabulary,
            "mfu": rate * flops / (batch * length) / peak if peak else None, "warmup_seconds": window.warmup_seconds,
            "timed_steps": window.timed_steps,
            "step_seconds": {"median": window.median_seconds, "interquartile": window.interquartile_seconds,
                             "steps": window.timed_steps, "clock": StepClock(device).kind}}  # fmt: skip


def timed_steps(step: Callable[[], None], *, steps: int, device: torch.device) -> list[float]:
    """Each step's seconds on the device's clock (metrics.step_clock): a mark before the first step and after each,
    no wait inside the loop."""
    clock = StepClock(device)
    clock.mark()
    for _ in range(steps):
        step()
        clock.mark()
    return clock.seconds()


def _to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device`` without a wait: pinned and copied asynchronously on a GPU."""
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)
