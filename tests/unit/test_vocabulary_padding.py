"""model.pad_vocab_to_multiple_of (issue 45.2): the padded model is the tokenizer-sized model, at a tile-sized width.

The reference each test compares with is the same model built unpadded (same seed): its logits, its losses and
gradients, its export. The padding idea is nanoGPT's and llm.c's (GPT-2's 50,257 entries to 50,304).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

from degen_train.losses.catalog import build_terms
from degen_train.losses.chunked_ce import chunked_linear_cross_entropy
from degen_train.losses.contract import TermContext
from degen_train.models.architectures import ARCHITECTURES
from degen_train.models.backbone import Backbone, build_hf_model
from degen_train.models.generator import AuxiliaryGenerator, sample_replacements
from degen_train.models.vocabulary import padded_size, vocabulary_size, vocabulary_tensor_names
from degen_train.run.export import export_pretrained
from tests.unit.test_architecture_builds import tiny


def built(arch: str, multiple: int, *extra: str):  # noqa: ANN201
    cfg, tokenizer = tiny(arch, f"model.pad_vocab_to_multiple_of={multiple}", "model.dropout=0",
                          "model.attention_dropout=0", *extra)  # fmt: skip
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    return model, tokenizer, torch.random.get_rng_state()


def test_sizes_round_up_to_the_multiple() -> None:
    assert [padded_size(v, 64) for v in (50257, 30522, 64, 1)] == [50304, 30528, 64, 64]
    assert padded_size(30522, 1) == 30522


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_the_padded_model_is_the_unpadded_one_with_impossible_entries(arch: str) -> None:
    """Rows to a multiple of 64, zero past V; the real rows, the generator's state after the build and the HF
    model's own logits on the V columns equal the unpadded model's; the padded columns are −∞."""
    plain, tokenizer, plain_rng = built(arch, 1)
    padded, _, padded_rng = built(arch, 64)
    vocabulary = len(tokenizer)
    assert padded.config.vocab_size % 64 == 0 and padded.config.vocab_size > vocabulary
    assert vocabulary_size(padded) == vocabulary == vocabulary_size(plain) == plain.config.vocab_size
    assert torch.equal(plain_rng, padded_rng)  # the run's later draws (dropout, data) are the unpadded run's
    for name in vocabulary_tensor_names(padded):
        weights = padded.get_parameter(name)
        assert torch.equal(weights[:vocabulary], plain.get_parameter(name)), name
        assert not weights[vocabulary:].any(), name
    ids = torch.randint(0, vocabulary, (2, 10))
    with torch.no_grad():
        expected, got = plain.eval()(input_ids=ids).logits, padded.eval()(input_ids=ids).logits
    torch.testing.assert_close(got[..., :vocabulary], expected, rtol=0, atol=1e-5)
    assert torch.isneginf(got[..., vocabulary:]).all()


@pytest.mark.parametrize(("arch", "chunk"), [("bert", None), ("gpt2", 16), ("llama", 16)])
def test_a_padded_run_trains_the_unpadded_weights(arch: str, chunk: int | None) -> None:
    """Three SGD steps through the backbone and the token-prediction term (whole logits for MLM, the chunked output
    layer for MLE), with CosReg: the real rows and every other weight equal the unpadded run's; the padded rows stay
    zero (they get no gradient). SGD: Adam's first steps turn a gradient's last-bit rounding (the matmuls' shapes
    differ) into ±lr wherever a gradient is near zero."""
    family = ARCHITECTURES[arch].family
    term = "mlm" if family == "encoder" else "mle"
    runs = []
    for multiple in (1, 64):
        model, tokenizer, _ = built(arch, multiple)
        backbone = Backbone(model.train())
        terms, weights = build_terms({"objective": {term: {"weight": 1.0, "chunk_size": chunk}},
                                      "regularizer": {"cosreg": {"weight": 0.5}}})  # fmt: skip
        for t in terms.values():
            t.setup(TermContext(hidden_size=model.config.hidden_size, vocab_size=vocabulary_size(model),
                                batch_size=2, backbone=backbone, block_size=12))  # fmt: skip
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        generator = torch.Generator().manual_seed(1)
        for _ in range(3):
            ids = torch.randint(0, len(tokenizer), (2, 12), generator=generator)
            labels = ids.clone() if family == "decoder" else torch.where(torch.rand(2, 12, generator=generator) < 0.3,
                                                                          ids, -100)  # fmt: skip
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
            output = backbone(batch, requires=frozenset().union(*(t.requires for t in terms.values())))
            loss = sum(t(output).loss * weights[name] for name, t in terms.items())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        runs.append((model, len(tokenizer)))
    (plain, vocabulary), (padded, _) = runs
    rows = vocabulary_tensor_names(padded)
    for name, trained in padded.named_parameters():
        if name in rows:
            assert not trained[vocabulary:].any(), name
            trained = trained[:vocabulary]
        difference = (trained - plain.get_parameter(name)).abs().max().item()
        assert difference < 1e-5, f"{name}: {difference}"


def test_the_chunked_output_layer_masks_the_padding_itself() -> None:
    """Loss, count and gradients over a (V', H) weight with ``vocabulary=V`` are the plain form's over its V rows; the
    padded rows' gradient is zero."""
    torch.manual_seed(0)
    hidden = torch.randn(9, 8, requires_grad=True)
    weight = torch.randn(70, 8)
    weight[50:] = 0
    weight.requires_grad_(True)
    bias = torch.randn(70, requires_grad=True)
    targets = torch.randint(0, 50, (9,))
    total, correct = chunked_linear_cross_entropy(hidden, weight, bias, targets, chunk_size=4, vocabulary=50)
    total.backward()
    grads = hidden.grad.clone(), weight.grad.clone(), bias.grad.clone()
    for t in (hidden, weight, bias):
        t.grad = None
    logits = F.linear(hidden, weight[:50], bias[:50])
    expected = F.cross_entropy(logits, targets, reduction="sum")
    expected.backward()
    torch.testing.assert_close(total, expected)
    assert correct == (logits.argmax(-1) == targets).sum()
    torch.testing.assert_close(grads[0], hidden.grad)
    torch.testing.assert_close(grads[1][:50], weight.grad[:50])
    torch.testing.assert_close(grads[2][:50], bias.grad[:50])
    assert not grads[1][50:].any() and not grads[2][50:].any()


def test_the_generator_never_samples_a_padded_entry() -> None:
    """ELECTRA's and COCO-LM's generator decodes with the padded word matrix: its padded columns are −∞, so the
    inverse-CDF draw lands on the tokenizer's entries only, even where the padding would hold most of the mass."""
    model, tokenizer, _ = built("bert", 64)
    vocabulary = len(tokenizer)
    generator = AuxiliaryGenerator(model, layers=1)
    with torch.no_grad():
        generator.decoder_bias[vocabulary:] = 50.0  # were the padding not masked, every draw would land there
    ids = torch.randint(5, vocabulary, (4, 12))
    index = torch.arange(48)
    logits = generator({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, index)
    assert logits.shape[1] == model.config.vocab_size and torch.isneginf(logits[:, vocabulary:]).all()
    drawn = sample_replacements(logits, index, torch.arange(4), length=12)
    assert int(drawn.max()) < vocabulary


@pytest.mark.parametrize("arch", ["bert", "gpt2", "llama"])
def test_an_export_is_the_unpadded_model(arch: str, tmp_path: Path) -> None:
    """The export holds the tokenizer's V rows and says vocab_size = V: AutoModel loads it, its logits are the padded
    model's on the real columns, and the model in memory is still padded afterwards."""
    model, tokenizer, _ = built(arch, 64)
    padded_rows = model.config.vocab_size
    export_pretrained(model, tokenizer, tmp_path / "export")
    assert model.config.vocab_size == padded_rows and vocabulary_size(model) == len(tokenizer)
    loader = AutoModelForCausalLM if ARCHITECTURES[arch].family == "decoder" else AutoModelForMaskedLM
    loaded = loader.from_pretrained(tmp_path / "export").eval()
    assert loaded.config.vocab_size == len(tokenizer) == loaded.get_input_embeddings().num_embeddings
    assert not hasattr(loaded.config, "unpadded_vocab_size")
    ids = torch.randint(0, len(tokenizer), (2, 10))
    with torch.no_grad():
        expected = model.eval()(input_ids=ids).logits[..., : len(tokenizer)]
        torch.testing.assert_close(loaded(input_ids=ids).logits, expected)


def test_spectrum_control_on_a_padded_vocabulary_is_refused_by_name() -> None:
    model, _, _ = built("gpt2", 64)
    terms, _ = build_terms({"regularizer": {"spectrum_control": {"weight": 1.0}}})
    with pytest.raises(ValueError, match=r"pad_vocab_to_multiple_of=1"):
        terms["spectrum_control"].setup(TermContext(hidden_size=model.config.hidden_size,
                                                    vocab_size=vocabulary_size(model), backbone=Backbone(model),
                                                    batch_size=2, block_size=8))  # fmt: skip


def test_a_multiple_below_one_is_refused_by_the_schema() -> None:
    from degen_train.models.section import model_section

    cfg, _ = tiny("bert")
    with pytest.raises(ValueError, match="pad_vocab_to_multiple_of"):
        model_section({**dict(cfg.model), "pad_vocab_to_multiple_of": 0})
