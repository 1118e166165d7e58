"""Clipped softmax, gated attention, the output gate and the key/value bias (models/attention_variants.py).

Expected values are transcriptions of the released code, run on identical tensors: Bondarenko et al. 2023's
``BertSelfAttentionWithExtras.forward`` and ``clipped_softmax`` (Qualcomm-AI-research/outlier-free-transformers,
transformers_language/models/{bert_attention,softmax}.py), Qiu et al. 2025's gated ``Qwen3Attention`` (its q_proj
extended by the gate scores, split per key/value head; qiuzh20/gated_attention, modeling_qwen3.py), and Sun et al.
2024's explicit attention bias (locuslab/massive-activations, gpt-2/model_attn_bias.py).
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertConfig, BertModel, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

from degen_train.cli.conversion import hf_model_of
from degen_train.config import load_config
from degen_train.config.schema import validate_config
from degen_train.models.attention_variants import HeadGate, install_attention_variant, variant_settings
from degen_train.models.backbone import build_hf_model
from degen_train.storage.checkpoints import load_checkpoint_file
from tests.helpers import checkpoint_weights, run
from tests.unit.test_architecture_builds import TINY, tiny


# ---- transcriptions of the released code ---------------------------------------------------------------------------
def released_clipped_softmax(data: torch.Tensor, dim: int, eta: float, gamma: float) -> torch.Tensor:
    probabilities = torch.nn.functional.softmax(data, dim=dim)
    return torch.clip(probabilities * (eta - gamma) + gamma, 0, 1)


def released_bert_self_attention(attention, x, additive_mask, softmax_fn, gates: nn.ModuleList | None):
    """BertSelfAttentionWithExtras.forward (no cache, no relative positions, no dropout), gate conditional_per_token."""
    batch, length, width = x.shape
    heads = attention.config.num_attention_heads
    head = width // heads

    def split(tensor):
        return tensor.view(batch, length, heads, head).permute(0, 2, 1, 3)

    scores = torch.matmul(split(attention.query(x)), split(attention.key(x)).transpose(-1, -2)) / math.sqrt(head)
    probabilities = softmax_fn(scores + additive_mask, dim=-1)
    context = torch.matmul(probabilities, split(attention.value(x)))
    if gates is not None:
        per_head = split(x)
        alpha = torch.stack([gates[h](per_head[:, h, ...]) for h in range(heads)], dim=1)  # (B, H, T, 1)
        context = context * torch.sigmoid(alpha)
    return context.permute(0, 2, 1, 3).contiguous().view(batch, length, width)


def released_gate_heads(gate: HeadGate) -> nn.ModuleList:
    """The released ModuleList of per-head nn.Linear (or MLP) holding ``gate``'s weights."""
    heads = []
    for h in range(gate.heads):
        if gate.form == "mlp":
            first, second = nn.Linear(gate.head_dim, gate.head_dim // 4), nn.Linear(gate.head_dim // 4, 1)
            first.weight.data, first.bias.data = gate.weight[h].T.clone(), gate.bias[h].clone()
            second.weight.data, second.bias.data = gate.weight_out[h].T.clone(), gate.bias_out[h].clone()
            heads.append(nn.Sequential(first, nn.ReLU(), second))
        else:
            linear = nn.Linear(gate.head_dim, 1)
            linear.weight.data, linear.bias.data = gate.weight[h].T.clone(), gate.bias[h].clone()
            heads.append(linear)
    return nn.ModuleList(heads)


def _bert_attention(variant: dict) -> tuple[nn.Module, dict]:
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64,
                        attn_implementation="eager", attention_probs_dropout_prob=0.0)  # fmt: skip
    model = BertModel(config)
    settings = variant_settings(variant, family="encoder", arch="bert", length=16)
    install_attention_variant(model, settings, arch="bert")
    return model.encoder.layer[0].attention.self, settings


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(2, 16, 32, requires_grad=True)
    additive = torch.zeros(2, 1, 16, 16)
    additive[1, :, :, 11:] = torch.finfo(torch.float32).min  # the second sequence is padded after 11 tokens
    return x, additive


@pytest.mark.parametrize(
    "variant",
    [
        {"name": "clipped_softmax"},  # the encoder's released α = 3.2: γ = −0.025 at T = 128, here −3.2/16
        {"name": "clipped_softmax", "alpha": 12.0, "eta": 1.03},
        {"name": "gated"},  # the BERT script: conditional_per_token with the MLP gate
        {"name": "gated", "gate": "linear", "gate_init": 0.25},  # the OPT scripts' linear gate at π_init = 0.25
    ],
    ids=lambda v: "-".join(f"{k}={v[k]}" for k in v),
)
def test_bert_attention_equals_the_released_attention_in_output_and_gradient(variant: dict) -> None:
    attention, settings = _bert_attention(variant)
    x, additive = _inputs()
    ours = attention(x, attention_mask=additive)[0]
    gates = released_gate_heads(attention.attention_gate) if settings["variant"] == "gated" else None
    if settings["variant"] == "clipped_softmax":
        assert settings["gamma"] == pytest.approx(-settings["alpha"] / 16)

        def softmax_fn(scores, dim):
            return released_clipped_softmax(scores, dim, settings["eta"], settings["gamma"])
    else:
        softmax_fn = torch.softmax
    x_released = x.detach().clone().requires_grad_(True)
    expected = released_bert_self_attention(attention, x_released, additive, softmax_fn, gates)
    assert torch.allclose(ours, expected, atol=1e-6)
    upstream = torch.randn_like(ours)
    (ours * upstream).sum().backward()
    (expected * upstream).sum().backward()
    assert torch.allclose(x.grad, x_released.grad, atol=1e-6)
    if gates is not None:  # the gate's own gradient: the batched weight's slices are the per-head Linear's
        first = gates[0][0] if settings["gate"] == "mlp" else gates[0]
        assert torch.allclose(attention.attention_gate.weight.grad[0].T, first.weight.grad, atol=1e-6)


def test_the_released_gate_initialisation() -> None:
    gate = HeadGate(4, 8, form="linear", init=0.25)
    assert torch.allclose(gate.bias, torch.full_like(gate.bias, math.log(0.25 / 0.75)))  # logit(π_init)
    assert gate.weight.abs().max() <= 1 / math.sqrt(8)  # nn.Linear's U(−1/√d, 1/√d): built after the model's init


@pytest.mark.parametrize("granularity", ["headwise", "elementwise"])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_llama_output_gate_equals_the_released_extended_query_projection(granularity: str, kv_heads: int) -> None:
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=kv_heads, num_hidden_layers=1,
                         intermediate_size=64, attn_implementation="eager", attention_dropout=0.0)  # fmt: skip
    stock = LlamaAttention(config, layer_idx=0)
    gated = copy.deepcopy(stock)
    holder = nn.Module()
    holder.config, holder.attention = copy.deepcopy(config), gated
    holder.set_attn_implementation = lambda name: setattr(holder.config, "_attn_implementation", name)
    gated.config = holder.config
    settings = variant_settings({"name": "output_gate", "granularity": granularity}, family="decoder", arch="llama",
                                length=16)  # fmt: skip
    install_attention_variant(holder, settings, arch="llama")
    nn.init.normal_(gated.attention_gate.proj.weight)  # not the near-identity init: a gate that matters
    x = torch.randn(2, 16, 32)
    positions = LlamaRotaryEmbedding(config)(x, torch.arange(16)[None].expand(2, -1))
    causal = torch.full((16, 16), torch.finfo(torch.float32).min).triu(1)[None, None]
    ours = gated(x, position_embeddings=positions, attention_mask=causal)[0]

    # Released: q_proj extended by the gate rows, viewed per key/value head and split [queries, gates].
    heads, head, groups = 4, 8, 4 // kv_heads
    width = head if granularity == "elementwise" else 1
    q_rows, g_rows = stock.q_proj.weight.view(kv_heads, groups * head, 32), gated.attention_gate.proj.weight
    extended = torch.cat([q_rows, g_rows.view(kv_heads, groups * width, 32)], dim=1).reshape(-1, 32)
    scores = (x @ extended.T).view(2, 16, kv_heads, -1)
    query_part, gate_score = torch.split(scores, [head * groups, width * groups], dim=-1)
    assert torch.allclose(query_part.reshape(2, 16, -1), stock.q_proj(x), atol=1e-6)  # the same queries
    gate = torch.sigmoid(gate_score.reshape(2, 16, heads, width)).expand(2, 16, heads, head).reshape(2, 16, -1)
    stock.o_proj.register_forward_pre_hook(lambda module, args: (args[0] * gate,))
    expected = stock(x, position_embeddings=positions, attention_mask=causal)[0]
    assert torch.allclose(ours, expected, atol=1e-5)


def released_attention_with_bias(attention, x, k_bias, v_bias):
    """gpt-2/model_attn_bias.py CausalSelfAttention.forward (Sun et al. 2024; no dropout): k', v' prepended, the
    causal mask with an always-open first column, then the output projection."""
    batch, length, width = x.shape
    heads = k_bias.shape[1]
    q, k, v = attention.c_attn(x).split(width, dim=2)
    k, q, v = (t.view(batch, length, heads, width // heads).transpose(1, 2) for t in (k, q, v))
    mask = torch.ones(length, length, dtype=torch.bool).tril(diagonal=0)
    mask = torch.cat((torch.ones(length, 1, dtype=torch.bool), mask), dim=1)
    k = torch.cat((k_bias.repeat(batch, 1, 1, 1), k), dim=2)
    v = torch.cat((v_bias.repeat(batch, 1, 1, 1), v), dim=2)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False)
    return attention.c_proj(y.transpose(1, 2).contiguous().view(batch, length, width))


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_gpt2_kv_bias_equals_the_released_attention_bias_in_output_and_gradient(attention: str) -> None:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_head=4, n_layer=1, attn_implementation=attention, attn_pdrop=0.0,
                        resid_pdrop=0.0, embd_pdrop=0.0)  # fmt: skip
    model = GPT2Model(config).eval()
    settings = variant_settings({"name": "kv_bias"}, family="decoder", arch="gpt2", length=16)
    install_attention_variant(model, settings, arch="gpt2")
    module = model.h[0].attn
    x = torch.randn(2, 16, 32, requires_grad=True)
    causal = torch.full((16, 16), torch.finfo(torch.float32).min).triu(1)[None, None]
    ours = module(x, attention_mask=causal if attention == "eager" else None)[0]  # SDPA: its causal flag, no mask
    k_bias = module.attention_kv_bias.key.detach().clone()[None].requires_grad_(True)  # (1, H, 1, d), as released
    v_bias = module.attention_kv_bias.value.detach().clone()[None].requires_grad_(True)
    x_released = x.detach().clone().requires_grad_(True)
    expected = released_attention_with_bias(module, x_released, k_bias, v_bias)
    assert torch.allclose(ours, expected, atol=1e-6)
    upstream = torch.randn_like(ours)
    (ours * upstream).sum().backward()
    (expected * upstream).sum().backward()
    assert torch.allclose(x.grad, x_released.grad, atol=1e-6)
    assert torch.allclose(module.attention_kv_bias.key.grad, k_bias.grad[0], atol=1e-6)
    assert torch.allclose(module.attention_kv_bias.value.grad, v_bias.grad[0], atol=1e-6)


def test_clipped_softmax_at_alpha_0_is_the_stock_eager_attention_on_every_architecture() -> None:
    for arch in TINY:
        cfg, tokenizer = tiny(arch, "model.attention=eager")
        model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False, sequence_length=16).eval()
        clipped = copy.deepcopy(model)
        settings = variant_settings({"name": "clipped_softmax", "alpha": 0.0}, family=cfg.model.family, arch=arch,
                                    length=16)  # fmt: skip
        install_attention_variant(clipped, settings, arch=arch)
        ids = torch.randint(5, len(tokenizer), (2, 16))
        assert torch.equal(model(input_ids=ids).logits, clipped(input_ids=ids).logits), arch


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.attention_variant.name=clipped_softmax"],
         r"attention_variant.name=clipped_softmax needs the score matrix, which attention=sdpa never forms: set "
         r"model.attention=eager"),
        (["model.attention_variant.name=sigmoid"],
         r"model.attention_variant.name='sigmoid': Input should be 'softmax', 'clipped_softmax', 'gated', "
         r"'output_gate' or 'kv_bias'"),
        (["model.attention_variant.gate_init=1.5"],
         r"model.attention_variant.gate_init=1.5: Input should be less than 1"),
    ],
)
def test_bad_variant_settings_are_refused_by_name_before_any_work(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        validate_config(load_config(overrides, run_dir=tmp_path))


def test_an_export_computes_what_was_trained_and_stock_transformers_refuses_it(tmp_path: Path) -> None:
    run(tmp_path, "trainer.max_steps=2", "model.attention_variant.name=gated")
    trained = hf_model_of(load_checkpoint_file(tmp_path / "checkpoints" / "last.ckpt")).eval()
    exported = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()  # degen_train's process: degen_bert known
    assert type(exported).__name__ == "DegenBertForMaskedLM"
    ids = torch.randint(5, 200, (2, 16))
    assert torch.equal(trained(input_ids=ids).logits, exported(input_ids=ids).logits)
    plain = "from transformers import AutoModelForMaskedLM as A; import sys; A.from_pretrained(sys.argv[1])"
    stock = subprocess.run([sys.executable, "-c", plain, str(tmp_path / "hf")], capture_output=True, text=True)
    assert stock.returncode != 0 and "degen_bert" in stock.stderr  # never plain softmax in silence
    # model.init_from: the export starts a run with its own variant, and a run asking for another is refused
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    same = load_config([f"model.init_from={tmp_path / 'hf'}", "model.attention_variant.name=gated"]).model
    continued = build_hf_model(same, tokenizer=tokenizer, with_nsp_head=False, sequence_length=64).eval()
    assert torch.equal(continued(input_ids=ids).logits, exported(input_ids=ids).logits)
    with pytest.raises(ValueError, match=r"was trained with attention variant \{'gate': 'mlp', 'gate_init': None, "):
        build_hf_model(load_config([f"model.init_from={tmp_path / 'hf'}"]).model, tokenizer=tokenizer,
                       with_nsp_head=False)  # fmt: skip


@pytest.mark.parametrize(
    "variant",
    [
        ["model.attention_variant.name=gated"],
        ["model.attention_variant.name=clipped_softmax", "model.attention=eager"],
        ["model=llama_tiny", "objective=mle", "model.attention_variant.name=output_gate"],
        ["model=llama_tiny", "objective=mle", "model.attention_variant.name=kv_bias"],
    ],
    ids=["gated", "clipped_softmax", "output_gate", "kv_bias"],
)
def test_resume_with_each_variant_is_exact(tmp_path: Path, variant: list[str]) -> None:
    common = [*variant, "model.dropout=0", "model.attention_dropout=0", "export_hf=false"]
    run(tmp_path / "straight", *common, "trainer.max_steps=4")
    run(tmp_path / "split", *common, "trainer.max_steps=2", "scheduler.total_steps=4")
    run(tmp_path / "split", *common, "trainer.max_steps=4", "ckpt_path=last")
    a = checkpoint_weights(tmp_path / "straight" / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(tmp_path / "split" / "checkpoints" / "last.ckpt")
    assert "clipped_softmax" in variant[0] or any("attention_gate" in k or "attention_kv_bias" in k for k in a)
    assert all(torch.equal(a[key], b[key]) for key in a)
