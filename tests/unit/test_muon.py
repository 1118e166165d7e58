"""optimizer=muon: the grouping rule of the KellerJordan/Muon README, torch's Muon and AdamW stepped as one
optimizer, GPT-2's transposed Conv1D weights, and a state that resumes exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import BertConfig, BertForPreTraining, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.pytorch_utils import Conv1D

from degen_train.optim.muon import Float32Muon, build_muon, hidden_matrices
from degen_train.optim.optimizer import parameter_groups

SMALL = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32}
ADAMW = {"lr": 1e-3, "weight_decay": 0.01, "betas": (0.9, 0.999), "eps": 1e-8}


def names_of(model: nn.Module, params: list[nn.Parameter]) -> set[str]:
    by_id = {id(p): name for name, p in model.named_parameters(remove_duplicate=False)}
    return {by_id[id(p)] for p in params}


def test_muon_takes_the_blocks_matrices_and_adamw_the_embeddings_heads_norms_and_biases() -> None:
    """The README's rule ("hidden weights" to Muon; embeddings, heads, gains and biases to AdamW) on BERT with its
    pooler and NSP head, tied GPT-2 and untied Llama."""
    bert = BertForPreTraining(BertConfig(vocab_size=50, max_position_embeddings=16, **SMALL))
    muon = names_of(bert, [p for _, p in hidden_matrices([bert])])
    assert muon == {
        f"bert.encoder.layer.{i}.{part}.weight"
        for i in range(2)
        for part in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "intermediate.dense",
            "output.dense",
        )  # fmt: skip
    }
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2))
    assert names_of(gpt2, [p for _, p in hidden_matrices([gpt2])]) == {
        f"transformer.h.{i}.{part}.weight"
        for i in range(2)
        for part in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    }
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=50, tie_word_embeddings=False, **SMALL))
    muon = names_of(llama, [p for _, p in hidden_matrices([llama])])
    assert "lm_head.weight" not in muon and "model.embed_tokens.weight" not in muon
    assert len(muon) == 2 * 7  # q, k, v, o, gate, up, down in each of the 2 layers


def test_the_composite_steps_as_torch_muon_and_adamw_stepped_apart() -> None:
    """Three updates of the one optimizer equal, bit for bit, torch.optim.Muon on the hidden matrices and
    torch.optim.AdamW on the rest stepped side by side (the README's two-optimizer usage)."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, **SMALL))
    twin = copy.deepcopy(model)
    ours = build_muon([model], **ADAMW)
    hidden = [p for _, p in hidden_matrices([twin])]
    muon = torch.optim.Muon(hidden, lr=0.02, weight_decay=0.01, momentum=0.95, nesterov=True, ns_steps=5)
    rest = [{**g, "params": [p for p in g["params"] if all(p is not h for h in hidden)]}
            for g in parameter_groups([twin], 0.01)]  # fmt: skip
    adamw = torch.optim.AdamW(rest, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    ids = torch.randint(0, 50, (2, 8))
    for _ in range(3):
        for net, step in ((model, [ours]), (twin, [muon, adamw])):
            net(input_ids=ids, labels=ids).loss.backward()
            for optimizer in step:
                optimizer.step()
                optimizer.zero_grad()
    for (name, a), b in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b), name
    assert {g["algorithm"] for g in ours.param_groups} == {"muon", "adamw"}


def test_a_gpt2_conv1d_weight_steps_as_the_same_layer_written_as_linear() -> None:
    """Conv1D keeps (in, out), nn.Linear (out, in): the same update, transposed, under torch's 'original' rate
    adjustment √max(1, rows/cols), which reads the stored shape (degen_train.optim.muon._lr_scale)."""
    torch.manual_seed(0)
    conv = Conv1D(nf=32, nx=8)  # weight (8, 32): a widening layer, as GPT-2's c_fc
    linear = nn.Linear(8, 32)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.T)
        linear.bias.copy_(conv.bias)
    optimizers = [build_muon([nn.ModuleList([layer])], **ADAMW) for layer in (conv, linear)]
    x = torch.randn(5, 8)
    for _ in range(2):
        for layer, optimizer in zip((conv, linear), optimizers, strict=True):
            layer(x).pow(2).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    assert torch.allclose(conv.weight.T, linear.weight, atol=1e-7)
    assert optimizers[0].param_groups[0]["lr"] == pytest.approx(0.04)  # √(32/8) / √1: Linear's (32, 8) rows
    assert optimizers[0].param_groups[0]["lr"] * optimizers[0].param_groups[0]["weight_decay"] == pytest.approx(
        0.02 * 0.01
    )  # the decoupled decay η·λ unchanged


def test_the_state_round_trips_so_a_resumed_update_is_the_same() -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2)).eval()
    optimizer = build_muon([model], **ADAMW)
    ids = torch.randint(0, 50, (2, 8))

    def update(net: nn.Module, opt: torch.optim.Optimizer) -> None:
        net(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()

    update(model, optimizer)
    saved = copy.deepcopy(optimizer.state_dict())
    resumed_model = copy.deepcopy(model)
    resumed = build_muon([resumed_model], **{**ADAMW, "lr": 5.0})  # settings come from the state, as torch's do
    resumed.load_state_dict(saved)
    assert resumed.muon.state is resumed.state and resumed.adamw.param_groups[0] is resumed.param_groups[-2]
    for _ in range(2):
        update(model, optimizer)
        update(resumed_model, resumed)
    for a, b in zip(model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(a, b)
    momentum = [resumed.state[p]["momentum_buffer"] for p in resumed.muon.param_groups[0]["params"]]
    assert momentum and all(m.abs().sum() > 0 for m in momentum)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("optimizer.muon_adjust_lr=spectral", r"optimizer.muon_adjust_lr='spectral': Input should be 'original' or "
                                              r"'match_rms_adamw'"),
        ("optimizer.muon_momentum=1.0", r"optimizer.muon_momentum=1.0: Input should be less than 1"),
        ("optimizer.muon_lr=0.0", r"optimizer.muon_lr=0.0: Input should be greater than 0"),
        ("optimizer.muon_ns_dtype=float16", r"optimizer.muon_ns_dtype='float16': Input should be 'bfloat16' or "
                                            r"'float32'"),
        ("optimizer.muon_ns_steps=100", r"optimizer.muon_ns_steps=100: Input should be less than 100"),
    ],
)  # fmt: skip
def test_bad_muon_settings_are_named_by_the_optimizers_section(setting: str, message: str) -> None:
    """Muon's settings are checked by the optimizer's section (optim/section.py), before anything is built."""
    from degen_train.config import load_config
    from degen_train.config.schema import validate_config

    with pytest.raises(ValueError, match=message):
        validate_config(load_config(["optimizer=muon", setting]))


def test_a_model_without_repeated_blocks_is_refused_naming_the_rule() -> None:
    with pytest.raises(ValueError, match=r"optimizer=muon found no hidden matrices .* use optimizer=adamw"):
        build_muon([nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))], **ADAMW)


def test_the_float32_newton_schulz_is_torchs_iteration_without_its_bfloat16_rounding() -> None:
    """degen_train.optim.muon.newton_schulz against torch.optim._muon._zeropower_via_newtonschulz (bfloat16): equal
    within bfloat16's resolution; in float32 equal to float64 within float32's; tall inputs come back transposed."""
    from torch.optim._muon import _zeropower_via_newtonschulz

    from degen_train.optim.muon import newton_schulz

    torch.manual_seed(0)
    grad = torch.randn(24, 40)
    coefficients = (3.4445, -4.7750, 2.0315)
    ours = newton_schulz(grad, coefficients, 5, 1e-7)
    torchs = _zeropower_via_newtonschulz(grad, coefficients, 5, 1e-7).float()
    assert (ours - torchs).abs().max() <= 2**-5 * ours.abs().max()  # 8-bit mantissas through 5 iterations
    assert torch.allclose(ours, newton_schulz(grad.double(), coefficients, 5, 1e-7).float(), atol=1e-6)
    assert torch.equal(newton_schulz(grad.T.contiguous(), coefficients, 5, 1e-7), ours.T)
    singular = torch.linalg.svdvals(ours)
    assert singular.min() > 0.5 and singular.max() < 1.5  # Jordan et al.: S' ~ Uniform(0.5, 1.5), not exactly 1


def test_muon_ns_dtype_float32_updates_as_torchs_muon_up_to_bfloat16() -> None:
    """One update with Newton–Schulz in float32 against torch's bfloat16 one: within 2⁻⁴ of the update's size
    (measured 1.2–4.4% on these matrices: bfloat16 keeps 8 bits through 5 iterations)."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, **SMALL))
    twin, start = copy.deepcopy(model), copy.deepcopy(model)
    ids = torch.randint(0, 50, (4, 16))
    for net, dtype in ((model, "float32"), (twin, "bfloat16")):
        optimizer = build_muon([net], **ADAMW, muon_ns_dtype=dtype)
        assert type(optimizer.muon) is (Float32Muon if dtype == "float32" else torch.optim.Muon)
        net(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
    with torch.no_grad():
        for (_, a), (_, b), (_, before) in zip(*(hidden_matrices([m]) for m in (model, twin, start)), strict=True):
            assert (a - b).norm() <= 2**-4 * (a - before).norm()


def test_a_muon_run_logs_which_parameters_each_optimizer_takes() -> None:
    """Issue 38.5: a Muon run said nothing of its split; now one line, by name pattern (blocks folded to N)."""
    from degen_train.optim.muon import muon_split

    bert = BertForPreTraining(BertConfig(vocab_size=50, max_position_embeddings=16, **SMALL))
    said = muon_split([bert], {id(p) for _, p in hidden_matrices([bert])})
    muon, adamw = said.split("; ")
    per_block = 3 * 16 * 16 + 16 * 16 + 2 * 16 * 32  # q, k, v, attention output; intermediate and output
    assert muon.startswith(f"Muon {2 * per_block / 1e6:.2f}M parameters (bert.encoder.layer.N.attention.output.dense")
    assert "bert.encoder.layer.N.output.dense.weight" in muon and "embeddings" not in muon
    assert adamw.startswith("AdamW ") and "bert.embeddings.word_embeddings.weight" in adamw
