"""debug=plan: does a run fit its card, and how long will it take? Answered before the queue, without a GPU.

One training step of the composed model, batch, precision, terms and activation checkpointing runs on fake tensors
(torch's ``FakeTensorMode``: shapes and dtypes, no data, no memory) under PyTorch's own memory tracker
(``torch.distributed._tools.mem_tracker.MemTracker``, which torchtitan's estimator also uses): forward, every term,
backward and the optimizer's step, the second of two steps, so the optimizer's states are resident as in any step
after a run's first. Its peak is what one
process holds with the whole model; under FSDP2 the parameters, gradients and optimizer states are divided by the
number of devices and the largest block is added twice (gathered, and the next one prefetched); under DDP a second
copy of the gradients is added (its buckets). The step time is the FLOPs per step (metrics.flops.model_flops,
PaLM appendix B) over the card's dense peak at a stated MFU. Attention is planned as a card's SDPA kernels run it
(``as_on_a_card``). What the plan leaves out is said beside it: a TaCL
teacher (read from its folder only in a run), the CUDA context, the allocator's fragmentation and NCCL's buffers
(the headroom ``plan.headroom`` keeps for them).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import hydra
import torch
from torch import nn

from degen_train.config.schema import TrainConfig
from degen_train.losses.catalog import setup_terms
from degen_train.losses.contract import TermContext, WeightedSum
from degen_train.metrics.flops import body_and_head_parameters, model_flops
from degen_train.models.activation_checkpointing import checkpoint_blocks, transformer_blocks
from degen_train.models.backbone import Backbone, build_hf_model
from degen_train.run.step_check import StepWatch

GIB = 2**30


@dataclass(frozen=True)
class Card:
    name: str
    memory: float  # bytes the card has (nvidia-smi's total)
    peak: dict[str, float]  # dense FLOP/s by precision, from the data sheets


# H100 SXM and H200 from metrics.flops.HOPPER_DENSE_PEAKS (dense bf16 989 TFLOP/s, TF32 495); A100 SXM 80 GB: 312 and
# 156 TFLOP/s dense (NVIDIA A100 data sheet). Memory: nvidia-smi's totals (81,559 MiB, 143,771 MiB, 81,920 MiB).
CARDS = {
    "h100": Card("NVIDIA H100 SXM 80GB", 81_559 * 2**20, {"16-bit": 989.4e12, "32": 494.7e12}),
    "h200": Card("NVIDIA H200 141GB", 143_771 * 2**20, {"16-bit": 989.5e12, "32": 494.7e12}),
    "a100": Card("NVIDIA A100 SXM 80GB", 81_920 * 2**20, {"16-bit": 312e12, "32": 156e12}),
}


class PlanStandInTokenizer:
    """What a model's config reads of a tokenizer (its size and special ids): a plan needs no data."""

    pad_token_id, cls_token_id, sep_token_id, mask_token_id, bos_token_id, eos_token_id, unk_token_id = range(7)

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


@dataclass
class StepMemory:
    """One fake step's peak on one process holding the whole model, by kind, in bytes."""

    peak: float
    parameters: float
    gradients: float
    optimizer: float
    activations: float  # activations and temporaries at the peak
    largest_block: float  # the largest transformer block's parameters (FSDP2 gathers one, and prefetches the next)
    parameter_count: int
    body: int  # P_body and P_head of metrics.flops.model_flops
    head: int
    layers: int
    hidden: int


def fake_step_memory(config: TrainConfig, terms: dict, weights: dict, *, data_format: str,
                     activation_checkpointing: str | int, fake: bool = True) -> StepMemory:  # fmt: skip
    """The peak of one training step of ``config``'s model, batch and terms, on fake tensors (see the module doc);
    ``fake=False``: the same step on real CPU tensors under the same tracker (what a test holds the plan against)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    batch_size, length = config.data.batch_size, config.data.block_size
    precision = str(config.trainer.precision)
    vocabulary = config.data.tokenizer.vocab_size
    multiple = config.model.pad_vocab_to_multiple_of
    # Real and small: its labelled positions are a data-dependent shape, which fake tensors cannot make.
    batch = plan_batch(batch_size, length, -(-vocabulary // multiple) * multiple, data_format)
    # A data-dependent op inside the step (a term's boolean mask) gets a made-up half-full result, as in run/step_check
    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else None
    with mode or nullcontext(), StepWatch(fake=True) if fake else nullcontext():
        torch.manual_seed(0)
        model = build_hf_model(config.model, tokenizer=PlanStandInTokenizer(vocabulary),
                               with_nsp_head=data_format == "mlm_nsp", sequence_length=length)  # fmt: skip
        if precision.endswith("-true") and not precision.startswith("32"):
            model.to(torch.bfloat16 if precision.startswith("bf16") else torch.float16)
        backbone = Backbone(model.train())
        setup_terms(terms, TermContext(hidden_size=model.config.hidden_size, vocab_size=backbone.vocabulary,
                                       batch_size=batch_size, backbone=backbone, block_size=length))  # fmt: skip
        loss = WeightedSum(terms, weights)
        checkpoint_blocks(model, activation_checkpointing)
        optimizer = hydra.utils.instantiate(config.plain_settings()["optimizer"])([backbone, loss])
        if mode is not None:
            batch = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        step = WholeStep(backbone, loss)
        frozen_as_buffers(step)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16 if "bf16" in precision else torch.float16,
                                  enabled=precision.endswith("-mixed"))  # fmt: skip

        def one_step() -> None:
            with autocast:
                total, _ = step(batch)
            total.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        one_step()  # the first step allocates the optimizer's states: the second, tracked, is every later step
        tracker = MemTracker()
        tracker.track_external(step, optimizer)
        with tracker:
            one_step()
        stats = next(iter(tracker.get_tracker_snapshot("peak").values()))
    kinds = {str(k).rsplit(".", 1)[-1]: v for k, v in stats.items()}
    body, head = body_and_head_parameters(model, backbone.vocab_head)
    blocks = transformer_blocks(model)
    largest = max((sum(p.numel() * p.element_size() for p in b.parameters()) for _, b in blocks), default=0)
    return StepMemory(
        peak=kinds["Total"], parameters=kinds["PARAM"] + kinds["BUFFER"], gradients=kinds["GRAD"],
        optimizer=kinds["OPT"], activations=kinds["ACT"] + kinds["TEMP"] + kinds["OTH"], largest_block=largest,
        parameter_count=sum(p.numel() for p in model.parameters()), body=body, head=head,
        layers=int(model.config.num_hidden_layers), hidden=int(model.config.hidden_size),
    )  # fmt: skip


class WholeStep(nn.Module):
    """The step's forward as one module, as PretrainModule's is: the tracker then sees a module called twice in a
    step (a generator's second pass) inside it, which it accepts, rather than twice at the top, which it refuses."""

    def __init__(self, backbone: Backbone, loss: WeightedSum) -> None:
        super().__init__()
        self.backbone, self.loss = backbone, loss

    def forward(self, batch: dict[str, Any]) -> Any:
        batch = self.loss.prepare_batch(batch)
        return self.loss(self.backbone(batch, requires=self.loss.requires))


def frozen_as_buffers(root: nn.Module) -> None:
    """Frozen parameters (a weight-0 term's head) as buffers of their modules: the same bytes, and the tracker,
    which hooks every parameter's gradient, refuses a parameter that has none."""
    for module in root.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and not param.requires_grad:
                del module._parameters[name]
                module.register_buffer(name, param.detach())


def plan_batch(batch_size: int, length: int, vocabulary: int, data_format: str) -> dict[str, Any]:
    """A batch as the collators make it: MLM with every 7th position labelled (the 15% of BERT's masking, 14.3%
    here), next-token prediction with every position but the last; full rows (packed blocks)."""
    ids = torch.randint(0, vocabulary, (batch_size, length))  # (B, T)
    labels = torch.full_like(ids, -100)
    if data_format == "causal":
        labels[:, :-1] = ids[:, 1:]
    else:
        labels[:, 3::7] = ids[:, 3::7]
    batch = {"input_ids": ids, "original_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
             "labelled_index": (labels.reshape(-1) != -100).nonzero().squeeze(1), "padded": False,
             "sample_seed": torch.arange(batch_size)}  # fmt: skip
    if data_format == "mlm_nsp":
        batch["token_type_ids"] = torch.zeros_like(ids)
        batch["next_sentence_label"] = torch.zeros(batch_size, dtype=torch.long)
    return batch


def as_on_a_card(config: TrainConfig) -> TrainConfig:
    """The step as a card runs its attention: SDPA's flash and memory-efficient kernels keep no T x T scores, with
    dropout or without (the mask is drawn in the kernel), while the CPU's flash kernel takes no dropout, and the
    math kernel it falls back to keeps the scores and their mask. So the fake step runs SDPA attention without its
    dropout (the same memory as a card's kernel with it); eager attention keeps the scores on a card too, unchanged."""
    if config.model.attention == "eager" or not config.model.attention_dropout:
        return config
    return changed(config, {"model": {"attention_dropout": 0.0}})


def changed(config: TrainConfig, change: dict[str, dict[str, Any]]) -> TrainConfig:
    """``config`` with some sections' fields replaced (``{"data": {"batch_size": 8}}``): a what-if of the plan."""
    sections = {key: getattr(config, key).model_copy(update=values) for key, values in change.items()}
    return config.model_copy(update=sections)


def per_device_peak(step: StepMemory, *, strategy: str, devices: int) -> float:
    """One device's peak under the strategy (see the module doc)."""
    if strategy == "fsdp" and devices > 1:
        state = step.parameters + step.gradients + step.optimizer
        return step.peak - state * (1 - 1 / devices) + 2 * step.largest_block
    if strategy == "ddp" and devices > 1:
        return step.peak + step.parameters  # the gradient buckets: one more copy of the (trainable) gradients
    return step.peak


def strategy_name(config: TrainConfig) -> str:
    """fsdp, deepspeed or ddp, from the strategy section (its ``_target_`` names the class) or its name."""
    text = str(config.strategy and (config.strategy.target or config.strategy.name)).lower()
    return "fsdp" if "fsdp" in text else "deepspeed" if "deepspeed" in text else "ddp"


def device_count(config: TrainConfig) -> int:
    """plan.devices, or trainer.devices × trainer.num_nodes when both are numbers, else 1."""
    if config.plan.devices:
        return int(config.plan.devices)
    trainer = config.trainer
    devices = 1 if trainer.devices is None else trainer.devices
    nodes = 1 if trainer.num_nodes is None else trainer.num_nodes
    return int(devices) * int(nodes) if isinstance(devices, int) and isinstance(nodes, int) else 1


def make_plan(config: TrainConfig, terms: dict, weights: dict, *, data_format: str) -> dict[str, Any]:
    """The plan's numbers (also written by ``debug=plan`` as the last line's JSON)."""
    card = CARDS[str(config.plan.card)]
    if config.plan.memory_gib:
        card = Card(f"{card.name.rsplit(' ', 1)[0]} {config.plan.memory_gib:g}GiB", config.plan.memory_gib * GIB,
                    card.peak)
    strategy, devices = strategy_name(config), device_count(config)
    setting = config.model.activation_checkpointing
    counted = {k: t for k, t in terms.items() if not t.frozen_modules() and k != "tacl"}
    left_out = sorted(set(terms) - set(counted))
    step = fake_step_memory(as_on_a_card(config), counted, {k: weights[k] for k in counted}, data_format=data_format,
                            activation_checkpointing=setting)  # fmt: skip
    peak = per_device_peak(step, strategy=strategy, devices=devices)
    batch, length = config.data.batch_size, config.data.block_size
    accumulate = config.trainer.accumulate_grad_batches
    predicted = batch * (length - 1) if data_format == "causal" else len(range(3, length, 7)) * batch
    flops = model_flops(body=step.body, head=step.head, layers=step.layers, hidden=step.hidden, batch=batch,
                        length=length, predicted=predicted)  # fmt: skip
    precision = str(config.trainer.precision)
    rate = card.peak["16-bit" if precision.startswith(("bf16", "16")) else "32"] * float(config.plan.mfu)
    micro_step = flops / rate
    tokens_per_s = batch * length * devices / micro_step
    budget = config.plan.token_budget
    return {
        "card": card.name, "card_memory_gib": card.memory / GIB, "headroom": float(config.plan.headroom),
        "strategy": strategy, "devices": devices, "precision": precision, "activation_checkpointing": setting,
        "batch": batch, "length": length, "accumulate": accumulate, "parameters": step.parameter_count,
        "peak_gib": peak / GIB, "one_process_peak_gib": step.peak / GIB,
        "parts_gib": {k: getattr(step, k) / GIB for k in ("parameters", "gradients", "optimizer", "activations")},
        "fits": peak <= card.memory * float(config.plan.headroom),
        "flops_per_token": flops / (batch * length), "mfu": float(config.plan.mfu),
        "step_s": micro_step * accumulate, "tokens_per_s": tokens_per_s,
        "hours_to_budget": float(budget) / tokens_per_s / 3600 if budget else None, "token_budget": budget,
        "terms_left_out": left_out,
    }  # fmt: skip


def describe(plan: dict[str, Any]) -> str:
    """The plan as a person reads it."""
    parts = ", ".join(f"{k} {v:.2f}" for k, v in plan["parts_gib"].items())
    accumulated = f" x {plan['accumulate']} accumulated" if plan["accumulate"] > 1 else ""
    lines = [
        f"plan: {plan['parameters'] / 1e6:.1f}M parameters; {plan['batch']} x {plan['length']} tokens per device"
        f"{accumulated}, {plan['precision']}, {plan['strategy']} on {plan['devices']} device(s), "
        f"activation checkpointing {plan['activation_checkpointing']}",
        f"  peak memory per device: {plan['peak_gib']:.2f} GiB of {plan['card']}'s {plan['card_memory_gib']:.1f} "
        f"(one process, whole model: {plan['one_process_peak_gib']:.2f} GiB = at its peak {parts}; fake-tensor step "
        f"under torch's MemTracker)",
        f"  FLOPs per token: {plan['flops_per_token'] / 1e6:.1f}M (PaLM appendix B); at {plan['mfu']:.0%} MFU a step "
        f"takes {plan['step_s'] * 1e3:.0f} ms, {plan['tokens_per_s']:,.0f} tokens/s over all devices",
    ]
    if plan["hours_to_budget"] is not None:
        lines.append(f"  {plan['token_budget']:.3g} tokens in {plan['hours_to_budget']:.2f} h")
    if plan["terms_left_out"]:
        lines.append(f"  not counted: {', '.join(plan['terms_left_out'])} (a frozen model read from its folder in a "
                     f"run: add its parameters and one forward's activations)")  # fmt: skip
    lines.append(f"  fits: {'yes' if plan['fits'] else 'NO'} (within {plan['headroom']:.0%} of the card's memory: "
                 f"the rest for the CUDA context, fragmentation and communication buffers)")  # fmt: skip
    return "\n".join(lines)


def what_would_fit(config: TrainConfig, terms: dict, weights: dict, *, data_format: str) -> str:
    """The first switch, in the order a user would try them, whose plan fits: checkpointing, then halving the
    batch (with accumulation to keep the global batch)."""
    tries = []
    if config.model.activation_checkpointing != "full":
        tries.append(("model.activation_checkpointing=full", {"model": {"activation_checkpointing": "full"}}))
    batch = config.data.batch_size
    accumulate = config.trainer.accumulate_grad_batches
    while batch > 1:
        batch //= 2
        accumulate *= 2
        change = {"data": {"batch_size": batch}, "trainer": {"accumulate_grad_batches": accumulate}}
        tries.append((f"data.batch_size={batch} trainer.accumulate_grad_batches={accumulate}", change))
        tries.append((f"{tries[-1][0]} model.activation_checkpointing=full",
                      {**change, "model": {"activation_checkpointing": "full"}}))  # fmt: skip
    for words, change in tries:
        trial = changed(config, change)
        plan = make_plan(trial, terms, weights, data_format=data_format)
        if plan["fits"]:
            return f"{words} (peak {gib(plan['peak_gib'])})"
    return "no batch size or checkpointing does: strategy=fsdp over more devices, or a smaller model"


def gib(size: float) -> str:
    """A size in GiB as a person reads it: GiB from 1 GiB up, MiB below."""
    return f"{size:.2f} GiB" if size >= 1 else f"{size * 1024:.1f} MiB"


class PlanDoesNotFit(ValueError):
    """debug=plan: the run would not fit its card; the message names a switch that would."""


def check_plan(config: TrainConfig, terms: dict, weights: dict, *, data_format: str) -> dict[str, Any]:
    """Print the plan; raise PlanDoesNotFit naming a switch when it does not fit."""
    plan = make_plan(config, terms, weights, data_format=data_format)
    print(describe(plan))
    if not plan["fits"]:
        would = what_would_fit(config, terms, weights, data_format=data_format)
        raise PlanDoesNotFit(
            f"plan: {gib(plan['peak_gib'])} per device does not fit {plan['card']} "
            f"({gib(plan['card_memory_gib'] * plan['headroom'])} usable); this would: {would}"
        )
    return plan
