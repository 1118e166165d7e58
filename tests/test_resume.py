"""Exact resume: 2N steps in one run equal N steps + resume + N steps (weights and logged losses)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from degen_train.config import load_config
from degen_train.data.datamodule import prepare_data
from tests.helpers import checkpoint_weights, logged, resume_settings, run


def test_stop_and_resume_equals_one_run(tmp_path: Path, small_corpus: Path) -> None:
    common = resume_settings(small_corpus)
    straight, split = tmp_path / "straight", tmp_path / "split"
    run(straight, *common, "trainer.max_steps=14")
    run(split, *common, "trainer.max_steps=7", "scheduler.total_steps=14")
    halfway = checkpoint_weights(split / "checkpoints" / "last.ckpt")
    run(split, *common, "trainer.max_steps=14", "ckpt_path=last")

    examples = len(
        prepare_data(load_config(resume_settings(small_corpus)).data, family="encoder", data_format="mlm", seed=0).train
    )
    assert 14 > 2 * (examples // 8)  # 8 = data.batch_size of the fast settings: the runs cross two epochs
    a, b = (
        checkpoint_weights(straight / "checkpoints" / "last.ckpt"),
        checkpoint_weights(split / "checkpoints" / "last.ckpt"),
    )
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6
    assert max((a[k] - halfway[k]).abs().max().item() for k in a) > 1e-3  # the second half did train
    assert logged(straight, "train/loss") == logged(split, "train/loss")
    assert logged(straight, "val/loss") == logged(split, "val/loss")
    assert len(logged(split, "train/loss")) == 14


def test_resume_without_checkpoint_names_the_path_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"ckpt_path=last but .*checkpoints holds no checkpoint that loads"):
        run(tmp_path, "ckpt_path=last")
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_from_another_shape_is_refused_before_training(tmp_path: Path, small_corpus: Path) -> None:
    run(tmp_path, *resume_settings(small_corpus), "trainer.max_steps=2")
    config_before = (tmp_path / "config.yaml").read_bytes()
    ckpt_before = (tmp_path / "checkpoints" / "last.ckpt").read_bytes()
    with pytest.raises(ValueError, match=r"written with model.hidden_size=128, this run has model.hidden_size=256"):
        run(tmp_path, *resume_settings(small_corpus), "model=mini", "trainer.max_steps=4", "ckpt_path=last")
    with pytest.raises(ValueError, match=r"trained with loss terms \['mlm'\], this run has \['mlm', 'nsp'\]"):
        run(tmp_path, *resume_settings(small_corpus), "objective=mlm_nsp", "trainer.max_steps=4", "ckpt_path=last")
    # Another tokenizer size, with every model.* key the same: refused by the resume policy before any data is read.
    with pytest.raises(ValueError, match=r"data.tokenizer.vocab_size: 1000 -> 300\nA resume continues one run"):
        other_vocabulary = ["data.tokenizer.vocab_size=300", "trainer.max_steps=4", "ckpt_path=last"]
        run(tmp_path, *resume_settings(small_corpus), *other_vocabulary)
    assert (tmp_path / "config.yaml").read_bytes() == config_before
    assert (tmp_path / "checkpoints" / "last.ckpt").read_bytes() == ckpt_before


def test_a_failed_checkpoint_write_keeps_the_previous_one(
    tmp_path: Path, small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(tmp_path, *resume_settings(small_corpus), "trainer.max_steps=3")
    good = (tmp_path / "checkpoints" / "last.ckpt").read_bytes()
    from degen_train.storage.checkpoints import _HashingWriter

    real_write = _HashingWriter.write
    crashed = []

    def crash_halfway(self, data):  # the disk fills up / the job is killed while a checkpoint is written
        crashed.append(self.stream.name)
        real_write(self, bytes(data)[: len(data) // 2])
        raise OSError("simulated crash while writing")

    monkeypatch.setattr(_HashingWriter, "write", crash_halfway)
    with pytest.raises(OSError, match="could not write checkpoint .*simulated crash"):
        run(tmp_path, *resume_settings(small_corpus), "trainer.max_steps=6", "ckpt_path=last")
    monkeypatch.undo()
    assert crashed, "the crash was not injected into a checkpoint write"
    assert (tmp_path / "checkpoints" / "last.ckpt").read_bytes() == good
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))  # the staging file went with the failure


def test_resume_is_exact_with_gradient_accumulation_and_untied_embeddings(tmp_path: Path, small_corpus: Path) -> None:
    common = [
        *resume_settings(small_corpus),
        "trainer.accumulate_grad_batches=2",
        "model.tie_embeddings=false",
        "regularizer=cosreg",
        "regularizer.cosreg.matrix=both",
    ]
    run(tmp_path / "straight", *common, "trainer.max_steps=6")
    run(tmp_path / "split", *common, "trainer.max_steps=3", "scheduler.total_steps=6")
    run(tmp_path / "split", *common, "trainer.max_steps=6", "ckpt_path=last")
    a = checkpoint_weights(tmp_path / "straight" / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(tmp_path / "split" / "checkpoints" / "last.ckpt")
    assert max((a[k].float() - b[k].float()).abs().max().item() for k in a) <= 1e-6
    decoder, embedding = (
        "backbone.model.cls.predictions.decoder.weight",
        "backbone.model.bert.embeddings.word_embeddings.weight",
    )
    assert not torch.equal(a[decoder], a[embedding])  # untied: two matrices, both regularized and trained
