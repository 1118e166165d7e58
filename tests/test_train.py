"""End-to-end runs on the tiny model: loss falls, outputs are written, the export loads offline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

from degen_train.metrics.evaluation_noise import ItemScores
from degen_train.models.backbone import Backbone
from tests.helpers import checkpoint_weights, logged, run


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("mlm_run")
    run(run_dir, "trainer.max_steps=30", "trainer.val_check_interval=15", "optimizer.lr=2e-3")
    return run_dir


def test_thirty_steps_lower_the_loss_and_write_the_run(mlm_run: Path) -> None:
    losses = logged(mlm_run, "train/loss")
    steps = sorted(losses)
    first, last = [losses[s] for s in steps[:5]], [losses[s] for s in steps[-5:]]
    assert sum(last) / 5 < sum(first) / 5 - 0.5
    summary = json.loads((mlm_run / "summary.json").read_text())
    assert summary["final_step"] == 30
    assert summary["val_perplexity"] == pytest.approx(torch.tensor(summary["val_loss"]).exp().item(), rel=1e-4)
    assert summary["tokens_per_s"] > 0 and summary["config"]["model"]["hidden_size"] == 128
    # issue 71.5: the final validation's batches, each its examples and their summed loss: their bootstrap is
    # val_perplexity's evaluation-set error, and the whole set scores val_perplexity itself
    batches = ItemScores.of(summary["items"]["val_perplexity"])
    assert batches.kind == "perplexity" and batches.items >= 2 and all(i.startswith("rank0.batch") for i in batches.ids)
    assert batches.score(np.arange(batches.items)) == pytest.approx(summary["val_perplexity"], rel=1e-5)
    assert (mlm_run / "checkpoints" / "last.ckpt").exists() and (mlm_run / "config.yaml").exists()


def test_runs_of_other_seeds_pair_their_validation_batches(mlm_run: Path, tmp_path: Path) -> None:
    """Another seed masks other tokens of the same validation text: its batches keep the same ids (the text's hash,
    the masked labels put back), so the report pairs val_perplexity batch by batch (data/validation_items.py)."""
    run(tmp_path, "trainer.max_steps=2", "seed=7")
    ids = [json.loads((r / "summary.json").read_text())["items"]["val_perplexity"]["ids"] for r in (mlm_run, tmp_path)]
    assert ids[0] == ids[1] and len(set(ids[0])) == len(ids[0])


def test_export_loads_offline_and_matches_the_trained_model(mlm_run: Path) -> None:
    exported = AutoModelForMaskedLM.from_pretrained(mlm_run / "hf").eval()
    tokenizer = AutoTokenizer.from_pretrained(mlm_run / "hf")
    assert isinstance(AutoModel.from_pretrained(mlm_run / "hf"), torch.nn.Module)
    # The Lightning model, rebuilt from last.ckpt's weights.
    trained = AutoModelForMaskedLM.from_config(exported.config)
    weights = {
        k.removeprefix("backbone.model."): v
        for k, v in checkpoint_weights(mlm_run / "checkpoints" / "last.ckpt").items()
    }
    trained.load_state_dict(weights, strict=False)
    backbone = Backbone(trained).eval()
    encoded = tokenizer(["The assert statement checks a condition.", "A loop runs."], padding=True, return_tensors="pt")
    batch = {**encoded, "labels": torch.where(encoded["attention_mask"].bool(), encoded["input_ids"], -100)}
    with torch.no_grad():
        reference = exported(**encoded).logits  # (B, T, V)
        ours = backbone(batch, requires=frozenset({"logits"})).logits  # (N, V) at labelled positions only
    assert torch.allclose(backbone.full_logits(batch), reference, atol=1e-5)
    assert torch.allclose(ours, reference[batch["labels"] != -100], atol=1e-5)
    assert (
        exported.cls.predictions.decoder.weight.data_ptr() == exported.bert.embeddings.word_embeddings.weight.data_ptr()
    )


def test_mle_on_a_decoder_exports_a_causal_lm(tmp_path: Path) -> None:
    summary = run(tmp_path, "objective=mle", "model=gpt2_tiny", "trainer.max_steps=8", "trainer.val_check_interval=8")
    assert summary["val_metrics"]["val/mle/loss"] > 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = tokenizer("def f(x): return x", return_tensors="pt")["input_ids"]
    assert model(ids).logits.shape == (1, ids.shape[1], len(tokenizer))


def test_mlm_nsp_trains_both_heads_and_exports_them(tmp_path: Path) -> None:
    summary = run(tmp_path, "objective=mlm_nsp", "trainer.max_steps=6", "trainer.val_check_interval=6")
    assert {"val/mlm/loss", "val/nsp/loss", "val/nsp/accuracy"} <= set(summary["val_metrics"])
    assert "train/nsp/loss" in (tmp_path / "logs" / "metrics.csv").read_text().splitlines()[0]
    model = AutoModelForPreTraining.from_pretrained(tmp_path / "hf")
    assert model.cls.seq_relationship.out_features == 2
