"""model.activation_checkpointing: the same gradients as without it, for every architecture family, with and without
dropout (the checkpoint keeps the RNG state: the recomputation draws the masks the forward drew), full and every
k-th block; names unchanged; bad settings refused naming the choices."""

from __future__ import annotations

import pytest
import torch

from degen_train.config import load_config
from degen_train.models.activation_checkpointing import checkpoint_blocks, transformer_blocks
from degen_train.models.architectures import ARCHITECTURES
from degen_train.models.backbone import build_hf_model
from tests.unit.test_architecture_builds import tiny
from tests.unit.test_compile import traced_without_kernels  # noqa: F401 - a fixture


def gradients(arch: str, setting: str | int, *, dropout: float) -> tuple[dict[str, torch.Tensor], list[str]]:
    hidden = 0.0 if arch in ("llama", "qwen2") else dropout  # they have attention dropout only
    cfg, tokenizer = tiny(arch, f"model.dropout={hidden}", f"model.attention_dropout={dropout}")
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False).train()
    names = [n for n, _ in model.named_parameters()]
    wrapped = checkpoint_blocks(model, setting)
    assert [n for n, _ in model.named_parameters()] == names  # checkpoints and exports read the same names
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, len(tokenizer), (2, 16), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    torch.manual_seed(2)  # dropout's draws
    cache = {"use_cache": False} if ARCHITECTURES[arch].family == "decoder" else {}  # as the backbone trains them
    logits = model(input_ids=ids, attention_mask=mask, **cache).logits  # (B, T, V)
    (logits.float().square().mean()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, wrapped


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_gradients_equal_the_run_without_it(arch: str, dropout: float) -> None:
    plain, none = gradients(arch, "none", dropout=dropout)
    assert none == []
    for setting in ("full", 2):
        checkpointed, wrapped = gradients(arch, setting, dropout=dropout)
        assert wrapped, setting
        assert checkpointed.keys() == plain.keys()
        for name, grad in plain.items():  # exact: the recomputation is the same ops on the same inputs and masks
            torch.testing.assert_close(checkpointed[name], grad, rtol=0, atol=0, msg=f"{arch} {setting} {name}")


def test_every_kth_block_is_wrapped_counting_from_one() -> None:
    """torchtitan's selective form: blocks k, 2k, ... (1-based)."""
    cfg, tokenizer = tiny("llama", "model.num_layers=5")
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    names = [n for n, _ in transformer_blocks(model)]
    assert checkpoint_blocks(model, 2) == [names[1], names[3]]
    assert checkpoint_blocks(model, "full") == [names[0], names[2], names[4]]  # the wrapped ones are not wrapped twice


@pytest.mark.parametrize("bad", ["half", 0, True, 1.5])
def test_a_bad_setting_is_refused_naming_the_choices(bad: object) -> None:
    cfg, tokenizer = tiny("bert")
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    with pytest.raises(ValueError, match=r"model.activation_checkpointing=.*none, full, or an integer k >= 1"):
        checkpoint_blocks(model, bad)  # type: ignore[arg-type]


def test_the_schema_refuses_a_bad_setting_before_anything_is_built() -> None:
    from degen_train.models.section import ModelConfig

    fields = dict(load_config(["model=tiny"]).model)
    assert ModelConfig(**{**fields, "activation_checkpointing": 3}).activation_checkpointing == 3
    with pytest.raises(ValueError, match="activation_checkpointing"):
        ModelConfig(**{**fields, "activation_checkpointing": "half"})


@pytest.mark.usefixtures("traced_without_kernels")
def test_compiled_checkpointed_blocks_equal_eager_blocks() -> None:
    """Checkpointing first, then compiling (the order run.parallel.parallelize applies them): the compiled graph
    holds the checkpoint region, and its gradients are the eager model's."""
    from degen_train.models.compile import compile_blocks

    plain, _ = gradients("gpt2", "none", dropout=0.0)
    cfg, tokenizer = tiny("gpt2", "model.dropout=0", "model.attention_dropout=0")
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False).train()
    checkpoint_blocks(model, "full")
    compile_blocks(model)
    ids = torch.randint(0, len(tokenizer), (2, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float().square().mean().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, plain[name], rtol=1e-4, atol=1e-6, msg=name)
