"""SimCSE's released model selection: score an STS file every N steps, keep the best weights, export those."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import checkpoint_weights, logged, run

SENTENCES = [
    ("a man is playing a guitar", "a person plays the guitar", 4.6),
    ("a woman is slicing an onion", "someone cuts an onion", 4.2),
    ("the cat sleeps on the sofa", "a dog runs in the park", 0.4),
    ("children play football outside", "kids are playing soccer", 4.0),
    ("the market fell sharply today", "stocks dropped on monday", 3.1),
    ("a plane is taking off", "an airplane departs", 4.4),
    ("he reads a book at night", "the train arrives at noon", 0.2),
    ("the soup is too salty", "this soup has too much salt", 4.8),
    ("rain is expected tomorrow", "the forecast says sunny skies", 1.0),
    ("she sings in a choir", "a woman is singing", 2.9),
    ("the bridge was closed for repairs", "workers repaired the bridge", 3.0),
    ("two men are fighting", "a man eats a sandwich", 0.6),
]


@pytest.fixture
def sts_file(tmp_path: Path) -> Path:
    path = tmp_path / "sts.tsv"  # the STS-B distribution's layout: genre, file, year, id, score, s1, s2
    path.write_text("".join(f"g\tf\t2017\t{i}\t{s}\t{a}\t{b}\n" for i, (a, b, s) in enumerate(SENTENCES)))
    return path


def test_the_export_holds_the_best_scoring_step(tmp_path: Path, sts_file: Path, teacher: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    caplog.set_level("INFO", logger="degen_train")
    run_dir = tmp_path / "run"
    summary = run(
        run_dir,
        "recipe=simcse",
        f"start={teacher}",
        "optimizer.lr=1e-3",
        "trainer.max_steps=6",
        f"callbacks.best_by_sts.sts={sts_file}",
        "callbacks.best_by_sts.every_n_steps=2",
        "callbacks.checkpoint.every_n_train_steps=2",
        "callbacks.checkpoint.save_top_k=-1",
    )
    scores = set(logged(run_dir, "train/sts_spearman").values())
    assert len(scores) == 3  # scored after updates 2, 4 and 6
    best = summary["best_by_sts"]
    assert best["spearman"] == pytest.approx(max(scores), abs=1e-4)
    assert best["step"] in (2, 4, 6) and best["pooling"] == "cls"
    chosen = checkpoint_weights(run_dir / "checkpoints" / f"step={best['step']:08d}.ckpt")
    exported = load_file(str(run_dir / "hf" / "model.safetensors"))
    for name, tensor in exported.items():
        torch.testing.assert_close(tensor, chosen[f"backbone.model.{name}"], rtol=0, atol=0)
    # the weights put back are validated again (issue 67.5 elides a final validation only when nothing changed)
    assert not any("final validation: the periodic one" in r.getMessage() for r in caplog.records)


def test_a_missing_sts_file_fails_before_training(tmp_path: Path, teacher: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"STS file .*nowhere.tsv does not exist"):
        run(tmp_path, "recipe=simcse", f"start={teacher}", "callbacks.best_by_sts.sts=nowhere.tsv")
    assert not (tmp_path / "config.yaml").exists()
