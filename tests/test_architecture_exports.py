"""Beyond BERT and GPT-2: each architecture's tiny preset trains, exports, and its export loads with AutoModel*."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

from tests.helpers import logged, run

CASES = {
    "roberta_tiny": ["recipe=bert_mlm", "regularizer=cosreg"],
    "modernbert_tiny": ["recipe=bert_mlm"],
    "llama_tiny": ["recipe=gao_cosreg"],
    "qwen2_tiny": ["recipe=gpt2_mle"],
}


@pytest.mark.parametrize("preset", list(CASES))
def test_preset_trains_and_its_export_loads(tmp_path: Path, preset: str) -> None:
    summary = run(tmp_path, *CASES[preset], f"model={preset}", "trainer.max_steps=4", "data.tokenizer.vocab_size=500",
                  "eval.sts=[]", "eval.wic=null")  # fmt: skip
    losses = logged(tmp_path, "train/loss")
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(v)) for v in losses.values())
    decoder = preset.startswith(("llama", "qwen2"))
    loaded = (AutoModelForCausalLM if decoder else AutoModelForMaskedLM).from_pretrained(tmp_path / "hf")
    assert loaded.config.model_type == preset.removesuffix("_tiny")
    assert summary["config"]["model"]["arch"] == preset.removesuffix("_tiny")
    weights = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    for key, value in loaded.state_dict().items():  # every exported tensor is the trained one
        torch.testing.assert_close(value, weights[f"backbone.model.{key}"], rtol=0, atol=0)


def test_a_padded_vocabulary_trains_and_exports_the_tokenizers_rows(tmp_path: Path) -> None:
    """model.pad_vocab_to_multiple_of=64 on ELECTRA (the generator decodes with the padded word matrix): the run
    trains rows to a multiple of 64, the summary names both sizes, the isotropy monitor reads the tokenizer's rows,
    and the export holds exactly those rows (models/vocabulary.py)."""
    summary = run(tmp_path, "recipe=electra", "model=tiny", "trainer.max_steps=3", "data.tokenizer.vocab_size=500",
                  "model.pad_vocab_to_multiple_of=64", "callbacks.isotropy.at_end=true", "eval.sts=[]",
                  "eval.wic=null")  # fmt: skip
    vocabulary = summary["tokenizer_vocabulary"]
    assert summary["vocabulary"] % 64 == 0 and 0 < summary["vocabulary"] - vocabulary < 64
    weights = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    rows = weights["backbone.model.bert.embeddings.word_embeddings.weight"]
    assert rows.shape[0] == summary["vocabulary"] and not rows[vocabulary:].any()
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf")
    assert loaded.config.vocab_size == vocabulary
    torch.testing.assert_close(loaded.get_input_embeddings().weight, rows[:vocabulary], rtol=0, atol=0)
    from degen_train.callbacks.isotropy_monitor import embedding_metrics

    logged_cosine = logged(tmp_path, "isotropy/embedding/mean_cosine")
    expected = embedding_metrics(rows[:vocabulary])["mean_cosine"]
    assert abs(logged_cosine[max(logged_cosine)] - expected) < 1e-6
