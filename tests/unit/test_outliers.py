"""Outlier measures against transcriptions of the released code on identical tensors:
Bondarenko et al. 2023 (Qualcomm-AI-research/outlier-free-transformers: utils.kurtosis, validate_mlm.py's ∞-norm),
Gu et al. 2024 (sail-sg/Attention-Sink: eval_sink_open_source.compute_attention_sink), Sun et al. 2024 (§2's rule)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from degen_train.metrics.outliers import (
    attention_entropy,
    attention_sink_rate,
    massive_activations,
    sequence_inf_norm,
    sequence_kurtosis,
)


def released_kurtosis(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """outlier-free-transformers, transformers_language/utils.py, on x viewed as (B, T·d) as validate_mlm.py does."""
    x = x.view(x.size(0), -1)
    mu = x.mean(dim=1, keepdims=True)
    s = x.std(dim=1)
    mu4 = ((x - mu) ** 4.0).mean(dim=1)
    return mu4 / (s**4.0 + eps)


def released_sink_metric(attention_scores: torch.Tensor, epsilon: float) -> torch.Tensor:
    """sail-sg/Attention-Sink compute_attention_sink on (samples, layers, heads, T, T): the rate per key position."""
    n, layers, heads, t1, t2 = attention_scores.shape
    ratios = torch.arange(t1, 0, -1)[None, None, None, :].expand(n, layers, heads, t1, t2).to(attention_scores)
    importance = (attention_scores / ratios).sum(dim=-2)
    return (importance > epsilon).to(torch.float).mean(dim=(0, 1, 2)) * 100


def test_kurtosis_and_inf_norm_equal_the_released_code() -> None:
    hidden = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    hidden[1, 2, 5] = 40.0  # one outlier: a heavy tail in sequence 1 only
    torch.testing.assert_close(sequence_kurtosis(hidden), released_kurtosis(hidden))
    expected = hidden.view(3, -1).norm(dim=1, p=np.inf)
    torch.testing.assert_close(sequence_inf_norm(hidden), expected)
    assert sequence_kurtosis(hidden)[1] > 50 > sequence_kurtosis(hidden)[0]  # a Gaussian's kurtosis is 3


def test_the_sink_rate_equals_the_released_metric_at_the_first_token() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 4, 32, 32, generator=generator, dtype=torch.float64)
    logits[:, :, :2, :, 0] += 5.0  # heads 0 and 1 of every layer dump their attention on the first token
    causal = torch.full((32, 32), float("-inf"), dtype=torch.float64).triu(1)
    scores = (logits + causal).softmax(dim=-1)
    released = released_sink_metric(scores, epsilon=0.3)[0]
    ours = attention_sink_rate([scores[:, layer] for layer in range(3)], epsilon=0.3)
    assert ours == pytest.approx(float(released))
    assert ours == 50.0  # the two sinking heads of four (at 32 tokens a causal head's own share is ~0.13)


def test_massive_activations_follow_sun_et_al_rule() -> None:
    hidden = torch.full((1, 5, 8), 0.05)
    hidden[0, 0, 3] = 120.0  # > 100 and > 1000 × median 0.05: massive
    hidden[0, 1, 2] = 99.0  # under 100: not massive
    result = massive_activations(hidden)
    assert result == {"count": 1, "dims": [3], "token_positions": [0]}
    assert massive_activations(torch.full((1, 4, 4), 150.0))["count"] == 0  # large but not 1000 × the median


def test_attention_entropy_is_zero_for_a_one_key_head_and_log_t_for_a_uniform_one() -> None:
    one_key = torch.zeros(1, 1, 4, 4)
    one_key[..., 0] = 1.0
    uniform = torch.full((1, 1, 4, 4), 0.25)
    assert float(attention_entropy(one_key)[0]) == pytest.approx(0.0, abs=1e-12)
    assert float(attention_entropy(uniform)[0]) == pytest.approx(np.log(4))


def released_bert_site_numbers(model, ids: torch.Tensor) -> dict:  # noqa: ANN001
    """validate_mlm.py's loop, transcribed: forward hooks on every module keep (input, output); per layer j the
    ∞-norm of output.dense's and output.LayerNorm's outputs and of the LayerNorm's input, and the kurtosis of the
    two outputs, each averaged over the sequences (AverageMeter)."""
    act_dict = {}

    def make_hook(name):  # noqa: ANN001, ANN202
        def hook(mod, inp, out):  # noqa: ANN001, ANN202
            inp = inp[0] if isinstance(inp, tuple) and len(inp) > 0 else inp
            act_dict[name] = (inp, out[0] if isinstance(out, tuple) and len(out) > 0 else out)

        return hook

    handles = [m.register_forward_hook(make_hook(n)) for n, m in model.named_modules()]
    with torch.no_grad():
        model(input_ids=ids)
    for handle in handles:
        handle.remove()
    inf_norms, kurtoses = {}, {}
    for j in range(len(model.encoder.layer)):
        for name in (f"encoder.layer.{j}.output.dense", f"encoder.layer.{j}.output.LayerNorm"):
            x_inp, x_out = act_dict[name]
            x = x_out.reshape(x_out.size(0), -1)
            inf_norms[name] = float(x.norm(dim=1, p=np.inf).mean())
            kurtoses[name] = float(released_kurtosis(x).mean())
            if "LayerNorm" in name:
                inf_norms[name + ".input"] = float(x_inp.reshape(x_inp.size(0), -1).norm(dim=1, p=np.inf).mean())
    return {"inf_norms": inf_norms, "kurtoses": kurtoses}


class FixedTokenizer:
    """Enough of a BERT tokenizer for released_blocks: each word one id, [CLS]=1, [SEP]=2, [MASK]=3."""

    cls_token_id, sep_token_id, mask_token_id, eos_token_id = 1, 2, 3, None
    all_special_ids = [0, 1, 2, 3]

    def __call__(self, text: str, **_: object) -> dict:
        return {"input_ids": [5 + (hash(w) % 50) for w in text.split()]}


def test_the_bert_sites_and_numbers_equal_the_released_validation_loop() -> None:
    """metrics/outlier_sites.py on a tiny BERT with an outlier dimension in its residual stream, against the
    transcription above on the same blocks: each site's ∞-norm and kurtosis, the maxima, the named tensor."""
    from transformers import BertConfig, BertModel

    from degen_train.metrics.outlier_sites import released_blocks, released_outliers

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=160, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0), add_pooling_layer=False).eval()  # fmt: skip
    with torch.no_grad():
        model.encoder.layer[1].output.dense.bias[7] = 40.0  # an outlier dimension in the FFN output and residual sum
    documents = [" ".join(f"w{i * 7 + k}" for k in range(40)) for i in range(30)]
    ids, what = released_blocks(FixedTokenizer(), documents, "bert", longest=160)
    assert ids.shape[1] == 128 and "15% of the tokens [MASK]ed" in what
    ours = released_outliers(model, FixedTokenizer(), documents, batch_size=3)
    reference = released_bert_site_numbers(model, ids)
    for key, entry in ours["sites"].items():
        name = entry["module"] + (".input" if entry["tensor"] == "input" else "")
        assert entry["inf_norm"] == pytest.approx(reference["inf_norms"][name], rel=1e-5), key
        if entry["tensor"] == "output":
            assert entry["kurtosis"] == pytest.approx(reference["kurtoses"][entry["module"]], rel=1e-4), key
    assert ours["max_LN_inp_inf_norm"] == pytest.approx(max(v for k, v in reference["inf_norms"].items()
                                                            if k.endswith(".input")), rel=1e-5)  # fmt: skip
    assert ours["max_kurtosis"] == pytest.approx(max(reference["kurtoses"].values()), rel=1e-4)
    assert ours["max_inf_norm_at"].startswith("encoder.layer.1.output.")  # where the outlier dimension was put
    assert ours["max_kurtosis"] > 20  # the outlier dimension: heavy-tailed
    from degen_train.cli.analyze import outlier_lines

    printed = "\n".join(outlier_lines(ours | {"attention_sink_windows": 0}))
    assert f"max ∞-norm {ours['max_inf_norm']:.1f} at encoder.layer.1.output." in printed
    assert "of the residual sums (LayerNorm inputs)" in printed


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_decoders_last_layer_is_read_before_the_final_norm(family: str) -> None:
    """HF's last hidden_states entry is final_norm(last block): the released OPT numbers read the block's own output
    (model.decoder.layers.{L-1}) and the final norm's output apart."""
    from transformers import GPT2Config, GPT2Model, LlamaConfig, LlamaModel

    from degen_train.metrics.outlier_sites import released_outliers

    torch.manual_seed(0)
    if family == "gpt2":
        model = GPT2Model(GPT2Config(vocab_size=60, n_embd=32, n_layer=2, n_head=2, n_positions=64)).eval()
        last, final = "h.1", "ln_f"
    else:
        model = LlamaModel(LlamaConfig(vocab_size=60, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=2, max_position_embeddings=64)).eval()  # fmt: skip
        last, final = "layers.1", "norm"
    documents = [" ".join(f"w{i * 7 + k}" for k in range(40)) for i in range(10)]
    ours = released_outliers(model, FixedTokenizer(), documents, batch_size=4)
    ids = torch.tensor(__import__("degen_train.metrics.w8a8_probe", fromlist=["x"]).token_blocks(
        FixedTokenizer(), documents, 64))  # fmt: skip
    with torch.no_grad():
        states = model(input_ids=ids, output_hidden_states=True).hidden_states
    block_output = ours["sites"][f"{last}:output"]["inf_norm"]
    assert ours["sites"][f"{final}:output"]["inf_norm"] == pytest.approx(float(sequence_inf_norm(states[-1]).mean()),
                                                                          rel=1e-5)  # fmt: skip
    assert block_output != pytest.approx(float(sequence_inf_norm(states[-1]).mean()), rel=1e-3)
    assert ours["layers"][-1]["inf_norm"] == pytest.approx(block_output)
    assert {e["role"] for e in ours["sites"].values()} == {"block_output", "ffn_output", "ffn_norm_output",
                                                            "attention_output", "attention_norm_output",
                                                            "final_norm_output"}  # fmt: skip


def test_a_decoders_ffn_sites_are_read_per_token_as_opts_layer_holds_them() -> None:
    """Issue 44.3: OPT's decoder layer reshapes its hidden states to (B·T, d) before final_layer_norm, fc1 and fc2
    (transformers' modeling_opt.py, OPTDecoderLayer.forward), so validate_clm.py's hooks on fc2 and the FFN norm see
    token rows and utils.kurtosis, viewing x as (x.size(0), -1), scores each token. Our GPT-2's mlp.c_proj and ln_2
    are read the same way; the block's own output stays per sequence."""
    from transformers import GPT2Config, GPT2Model

    from degen_train.metrics.outlier_sites import released_outliers
    from degen_train.metrics.w8a8_probe import token_blocks

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(vocab_size=60, n_embd=32, n_layer=2, n_head=2, n_positions=64)).eval()
    documents = [" ".join(f"w{i * 7 + k}" for k in range(40)) for i in range(10)]
    ours = released_outliers(model, FixedTokenizer(), documents, batch_size=4)
    ids = torch.tensor(token_blocks(FixedTokenizer(), documents, 64))
    seen: dict[str, torch.Tensor] = {}
    hooks = [model.get_submodule(name).register_forward_hook(
        lambda _m, _i, out, name=name: seen.__setitem__(name, out[0] if isinstance(out, tuple) else out))
        for name in ("h.0.mlp.c_proj", "h.0.ln_2", "h.0")]  # fmt: skip
    with torch.no_grad():
        model(input_ids=ids)
    for hook in hooks:
        hook.remove()
    for name in ("h.0.mlp.c_proj", "h.0.ln_2"):
        rows = seen[name].reshape(-1, seen[name].size(-1)).double()  # (B·T, d), as OPT's layer holds it
        assert ours["sites"][f"{name}:output"]["kurtosis"] == pytest.approx(float(released_kurtosis(rows).mean()),
                                                                            rel=1e-6)  # fmt: skip
        assert ours["sites"][f"{name}:output"]["inf_norm"] == pytest.approx(
            float(rows.abs().amax(dim=1).mean()), rel=1e-6)  # fmt: skip
        per_sequence = float(released_kurtosis(seen[name].double()).mean())
        assert ours["sites"][f"{name}:output"]["kurtosis"] != pytest.approx(per_sequence, rel=1e-3)
    assert ours["sites"]["h.0:output"]["kurtosis"] == pytest.approx(float(released_kurtosis(seen["h.0"].double())
                                                                          .mean()), rel=1e-6)  # fmt: skip


def test_a_decoders_sink_windows_open_with_its_bos_token() -> None:
    """Gu et al.'s prompts start a sequence: with a BOS token the window is BOS + 63 tokens of the text."""
    from transformers import GPT2Config, GPT2Model

    from degen_train.metrics.outlier_sites import sinks_on_windows

    class WithBos(FixedTokenizer):
        bos_token_id = 4

    model = GPT2Model(GPT2Config(vocab_size=60, n_embd=32, n_layer=2, n_head=2, n_positions=128)).eval()
    given: list[torch.Tensor] = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kwargs: given.append(kwargs["input_ids"]), with_kwargs=True)
    lines = [f"a{i} b{i} c{i}" for i in range(100)]
    assert sinks_on_windows(model, WithBos(), lines)["attention_sink_windows"] == 6  # 400 tokens: 6 windows of 63
    hook.remove()
    ids = torch.cat(given)
    assert ids.shape == (6, 64) and bool((ids[:, 0] == 4).all()) and not bool((ids[:, 1:] == 4).any())


def test_sinks_are_counted_on_64_token_windows() -> None:
    """Gu et al.'s windows: a text of 3-token lines makes no 3-token prompts (where a uniform head reads as a sink,
    1/3 > 0.3): the windows run across lines, 64 tokens each."""
    from transformers import GPT2Config, GPT2Model

    from degen_train.metrics.outlier_sites import sinks_on_windows

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(vocab_size=60, n_embd=32, n_layer=2, n_head=2, n_positions=128)).eval()
    lines = [f"a{i} b{i} c{i}" for i in range(100)]  # 3 tokens and a separator each: 6 windows of 64
    result = sinks_on_windows(model, FixedTokenizer(), lines)
    assert result["attention_sink_windows"] == 6 and len(result["attention_entropy_per_head"]) == 2
    assert result["attention_sink_rate"] < 50  # an untrained model's near-uniform heads are no sinks at T = 64
    assert sinks_on_windows(model, FixedTokenizer(), ["too short"])["attention_sink_windows"] == 0


def test_a_model_with_an_attention_variant_is_read_at_its_architectures_sites() -> None:
    """An export with gated attention declares model_type degen_bert (its blocks are named as BERT's): the reproduce
    page's part (n) reads its outliers like any BERT's (CI failure of 2026-11-25: 'no outlier sites known')."""
    from transformers import BertConfig, BertModel

    from degen_train.metrics.outlier_sites import SITES, sites_of

    model = BertModel(BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64), add_pooling_layer=False)  # fmt: skip
    model.config.model_type = "degen_bert"
    assert sites_of(model) is SITES["bert"]
    model.config.model_type = "degen_t5"
    with pytest.raises(ValueError, match=r"no outlier sites known for model_type='t5'; known: bert, gpt2"):
        sites_of(model)
