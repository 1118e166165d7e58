"""model.arch: every architecture builds from its config class, and the backbone reads its head as HF does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from degen_train.config import load_config
from degen_train.data.tokenizer import train_byte_bpe, train_wordpiece
from degen_train.losses.catalog import build_terms
from degen_train.losses.contract import TermContext
from degen_train.models.architectures import ARCHITECTURES
from degen_train.models.backbone import Backbone, build_hf_model

TINY = {"bert": "tiny", "roberta": "roberta_tiny", "modernbert": "modernbert_tiny", "gpt2": "gpt2_tiny",
        "llama": "llama_tiny", "qwen2": "qwen2_tiny"}  # fmt: skip
CORPUS = ["the cat sat on the mat and the dog sat on the log"] * 20


def tiny(arch: str, *extra: str):  # noqa: ANN201
    decoder = ARCHITECTURES[arch].family == "decoder"
    cfg = load_config([f"model={TINY[arch]}", *(["objective=mle"] if decoder else []), *extra])
    tokenizer = (train_byte_bpe if decoder else train_wordpiece)(iter(CORPUS), cfg.data.tokenizer)
    return cfg, tokenizer


def test_every_architecture_has_a_tiny_and_a_base_preset() -> None:
    for arch, preset in TINY.items():
        for size in (preset, "base" if arch == "bert" else f"{arch}_small" if arch == "gpt2" else f"{arch}_base"):
            assert (
                load_config([f"model={size}", "objective=mle" if "gpt2" in size else "objective=mlm"]).model.get("arch")
                == arch
            ), size


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_the_split_head_gives_the_models_own_logits(arch: str) -> None:
    """logits = linear(transform(h)) at labelled positions equals the HF class's own forward (its head as written
    in transformers), so the masked-positions head computes what the exported model computes."""
    cfg, tokenizer = tiny(arch)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False).eval()
    assert type(model) is ARCHITECTURES[arch].model_class
    backbone = Backbone(model)
    ids = torch.randint(0, len(tokenizer), (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    expected = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
    transform, linear = backbone.vocab_parts()
    hidden = backbone.encode({"input_ids": ids, "attention_mask": mask}).last_hidden_state
    torch.testing.assert_close(linear(transform(hidden)), expected, rtol=0, atol=1e-6)
    assert linear.weight is model.get_output_embeddings().weight
    assert (linear.weight is model.get_input_embeddings().weight) == bool(cfg.model.tie_embeddings)


def test_llama_preset_is_untied_with_grouped_query_attention() -> None:
    cfg, tokenizer = tiny("llama")
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    assert model.config.num_key_value_heads == 2 and model.config.num_attention_heads == 4
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.arch=gpt3"], "model.arch='gpt3': not one of bert, roberta, modernbert, gpt2, llama, qwen2"),
        (["model.arch=llama"], "model.arch=llama is a decoder but model.family=encoder"),
        (["model=llama_tiny", "objective=mle", "model.dropout=0.1"], "llama has no hidden-state dropout"),
    ],
)
def test_bad_architecture_settings_are_named(overrides: list[str], message: str) -> None:
    """The model's section holds the architectures and their rules (models/section.py): refused by the checked
    config before any framework loads, and by the build of a section composed in Python."""
    from degen_train.config.schema import validate_config

    cfg = load_config(overrides)
    for refused in (lambda: validate_config(cfg), lambda: build_hf_model(cfg.model, tokenizer=range(30),
                                                                         with_nsp_head=False)):  # fmt: skip
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            refused()


def test_next_sentence_prediction_needs_an_architecture_with_that_head() -> None:
    cfg, tokenizer = tiny("roberta")
    with pytest.raises(ValueError, match="model.arch=roberta does not have; architectures with one: bert"):
        build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=True)


@pytest.mark.parametrize("recipe", ["electra", "coco_lm"])
def test_generator_terms_name_the_architecture_they_need(recipe: str) -> None:
    cfg, tokenizer = tiny("modernbert", f"recipe={recipe}")
    assert cfg.model.arch == "modernbert"
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    terms, _ = build_terms({"objective": cfg.objective, "regularizer": cfg.regularizer})
    context = TermContext(hidden_size=128, vocab_size=len(tokenizer), batch_size=2, backbone=Backbone(model))
    with pytest.raises(ValueError, match="it needs model.arch=bert, this model is 'modernbert'"):
        for term in terms.values():
            term.setup(context)


@pytest.mark.parametrize("arch", ["bert", "roberta", "gpt2"])
def test_a_model_without_position_embeddings_keeps_its_table_at_zero(arch: str) -> None:
    """model.position_embeddings=none (Luo et al. 2021's ablation, reproduce part (o)): the learned absolute table is
    zero and frozen, so after an update it is still zero and no position signal enters; the rest trains."""
    from degen_train.models.backbone import build_hf_model

    cfg, tokenizer = tiny(arch, "model.position_embeddings=none")
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False, sequence_length=16)
    table = next(m for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in ("position_embeddings", "wpe"))
    assert not table.weight.requires_grad and not table.weight.any()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1)
    ids = torch.randint(5, len(tokenizer), (2, 12), generator=torch.Generator().manual_seed(0))
    before = model.get_input_embeddings().weight.clone()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    assert not table.weight.any() and not torch.equal(model.get_input_embeddings().weight, before)
    shuffled = ids[:, torch.randperm(12, generator=torch.Generator().manual_seed(1))]
    if arch != "gpt2":  # an encoder without positions treats its input as a bag: a token's state ignores the order
        model.eval()
        with torch.no_grad():
            states, reordered = (model.base_model(input_ids=x).last_hidden_state for x in (ids, shuffled))
        assert torch.allclose(states.sort(dim=1).values, reordered.sort(dim=1).values, atol=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_loaded_model_without_position_embeddings_is_zeroed_or_refused(arch: str, tmp_path: Path) -> None:
    """model.position_embeddings=none with model.init_from: the loaded model's own learned table is zeroed and
    frozen, as a fresh model's; a loaded model with rotary positions is refused, naming it (the section cannot know
    a loaded model's architecture). Before, the setting was ignored in silence for every loaded model."""
    cfg, tokenizer = tiny(arch)
    build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False).save_pretrained(tmp_path / arch)
    loaded, _ = tiny(arch, f"model.init_from={tmp_path / arch}", "model.position_embeddings=none")
    if arch == "llama":
        with pytest.raises(ValueError, match=rf"model.init_from={tmp_path / arch} \(llama\) has no learned absolute"):
            build_hf_model(loaded.model, tokenizer=tokenizer, with_nsp_head=False)
        return
    model = build_hf_model(loaded.model, tokenizer=tokenizer, with_nsp_head=False)
    table = model.transformer.wpe.weight
    assert not table.requires_grad and not table.any()


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_the_sections_position_fact_holds_for_the_models_built(arch: str) -> None:
    """models/section.py's LEARNED_POSITIONS decides a refusal before torch loads: checked here against the position
    tables of the model each architecture builds (NEXT_SENTENCE_HEAD is held by models/architectures.py at import)."""
    from degen_train.models.backbone import position_tables
    from degen_train.models.section import LEARNED_POSITIONS, ModelConfig

    cfg, tokenizer = tiny(arch)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False, sequence_length=16)
    assert bool(position_tables(model)) == (arch in LEARNED_POSITIONS)  # NEXT_SENTENCE_HEAD: held at import
    if arch not in LEARNED_POSITIONS:
        with pytest.raises(ValueError, match=f"model.position_embeddings=none: {arch} has no learned absolute"):
            ModelConfig.model_validate({**OmegaConf.to_container(cfg.model), "position_embeddings": "none"})


