"""branch_from=RUN@STEP: a cooldown branched from a stable run equals one warm-up–stable–decay run (issue 25)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import checkpoint_weights, logged, resume_settings, run


def wsd(corpus: Path) -> list[str]:
    return [*resume_settings(corpus), "scheduler=wsd", "scheduler.warmup_steps=2", "scheduler.decay_steps=4",
            "callbacks.checkpoint.every_n_train_steps=2", "callbacks.checkpoint.save_top_k=-1"]  # fmt: skip


def test_a_branch_at_the_stable_phase_equals_one_wsd_run(tmp_path: Path, small_corpus: Path) -> None:
    """Parent: 12 steps, stable until step 8. Branch at step 6 with a 4-step decay = one 10-step run whose stable
    phase ends at step 6 (weights ≤ 1e-6); the parent's folder is left as it was."""
    parent, branch, single = tmp_path / "parent", tmp_path / "branch", tmp_path / "single"
    run(parent, *wsd(small_corpus), "trainer.max_steps=12")
    before = {p.name: p.read_bytes() for p in (parent / "checkpoints").iterdir()}
    summary = run(branch, *wsd(small_corpus), "trainer.max_steps=10", f"branch_from={parent}@6")
    run(single, *wsd(small_corpus), "trainer.max_steps=10")
    a = checkpoint_weights(single / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(branch / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6
    rates = logged(branch, "lr-AdamW/pg1")
    assert sorted(rates) == [6, 7, 8, 9] and rates[7] < rates[6] == logged(single, "lr-AdamW/pg1")[5]  # decaying
    assert summary["branched_from"] == {"run": str(parent.resolve()), "step": 6, "checkpoint": str(
        parent.resolve() / "checkpoints" / "step=00000006.ckpt")}  # fmt: skip
    assert json.loads((branch / "summary.json").read_text())["branched_from"]["step"] == 6
    assert {p.name: p.read_bytes() for p in (parent / "checkpoints").iterdir()} == before


def test_a_branch_at_a_step_without_checkpoint_lists_the_steps_that_have_one(
    tmp_path: Path,
    small_corpus: Path,
) -> None:
    parent = tmp_path / "parent"
    run(parent, *wsd(small_corpus), "trainer.max_steps=6")
    with pytest.raises(FileNotFoundError, match=r"has no checkpoint at step 5; steps with one: 2, 4, 6"):
        run(tmp_path / "branch", *wsd(small_corpus), "trainer.max_steps=9", f"branch_from={parent}@5")
    with pytest.raises(ValueError, match=r"branch_from=.*parent@4 into the parent's own folder"):
        run(parent, *wsd(small_corpus), "trainer.max_steps=9", f"branch_from={parent}@4")
    with pytest.raises(ValueError, match=r"branch_from='runs/x': expected RUN@STEP"):
        run(tmp_path / "other", *wsd(small_corpus), "branch_from=runs/x")


def test_the_report_of_branched_cooldowns_shows_their_parent_at_the_branch_step(
    tmp_path: Path,
    small_corpus: Path,
) -> None:
    from degen_train.cli.report import report

    parent, cooldowns = tmp_path / "stable", tmp_path / "cooldowns"
    run(parent, *wsd(small_corpus), "trainer.max_steps=10", "export_hf=false")
    for shape in ("linear", "one_minus_sqrt"):
        run(cooldowns / shape, *wsd(small_corpus), "trainer.max_steps=9", f"scheduler.decay_shape={shape}",
            f"branch_from={parent}@6")  # fmt: skip
    result = report([cooldowns], run_analysis=False)
    (heading, rows), *others = result["branches"].items()
    assert not others and heading == f"{parent.resolve()} at step 6: 2 branches"
    start = logged(parent, "val/loss")[5]  # validated after update 6 (val_check_interval=3), stamped 5 (0-based)
    assert rows[0]["run"] == "stable (parent, validated after update 6)" and rows[0]["val_loss"] == pytest.approx(start)
    assert {r["run"] for r in rows[1:]} == {"linear", "one_minus_sqrt"}
    for row in rows[1:]:
        assert row["val_loss change"] == pytest.approx(row["val_loss"] - start)
    assert "## Branches of " in (cooldowns / "report" / "report.md").read_text()
