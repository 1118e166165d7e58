"""What a resume may change (degen_train/run/resume.py): refused what changes the weights, warned what not."""

from __future__ import annotations

from pathlib import Path

import pytest

from degen_train.run.resume import resume_changes
from tests.helpers import run

BEFORE = {
    "seed": 0,
    "run_dir": "/runs/a",
    "data": {"batch_size": 8, "block_size": 64, "num_workers": 0},
    "optimizer": {"lr": 5e-4},
    "regularizer": {"cosreg": {"weight": 1.0, "matrix": "output"}},
    "trainer": {"max_steps": 10, "devices": 2, "num_nodes": 1, "accumulate_grad_batches": 1, "precision": "32-true"},
}


def changed(**updates: object) -> dict:
    after = {key: (dict(value) if isinstance(value, dict) else value) for key, value in BEFORE.items()}
    for dotted, value in updates.items():
        section, _, key = dotted.partition("__")
        if key:
            after[section] = {**after[section], key: value}
        else:
            after[section] = value
    return after


@pytest.mark.parametrize(
    ("update", "line"),
    [
        ({"seed": 3}, "seed: 0 -> 3"),
        ({"optimizer__lr": 1e-3}, "optimizer.lr: 0.0005 -> 0.001"),
        ({"data__block_size": 128}, "data.block_size: 64 -> 128"),
        ({"data__batch_size": 4}, "the global batch (data.batch_size × trainer.devices × trainer.num_nodes"),
        ({"trainer__accumulate_grad_batches": 2}, "trainer.accumulate_grad_batches: 1 -> 2"),
        ({"regularizer": {"cosreg": {"weight": 1.0, "matrix": "input"}}}, "regularizer.cosreg.matrix"),
    ],
)
def test_what_changes_the_trained_weights_is_refused(update: dict, line: str) -> None:
    refused, _ = resume_changes(BEFORE, changed(**update))
    assert any(line in r for r in refused), refused


def test_what_the_run_may_change_on_the_way_is_allowed() -> None:
    after = changed(trainer__max_steps=20, data__num_workers=2, trainer__precision="bf16-mixed", run_dir="/runs/b")
    after["regularizer"] = {"cosreg": {"weight": 0.5, "matrix": "output"}}  # a weight schedule
    refused, allowed = resume_changes(BEFORE, after)
    assert refused == [] and len(allowed) == 4  # run_dir is allowed and unremarkable: a copied run lives elsewhere
    assert not any(line.startswith("run_dir") for line in allowed)
    # Another process layout with the same global batch (2 × 8 -> 1 × 16): the supported cross-count resume.
    assert resume_changes(BEFORE, changed(data__batch_size=16, trainer__devices=1))[0] == []


def test_a_checkpoint_recorded_before_vocabulary_padding_resumes_unpadded_only() -> None:
    """A record of 2026-11-27 has no model.pad_vocab_to_multiple_of: it reads as 1 (no padding, the code it ran),
    so the same run resumes and a resume asking for padding is refused by name."""
    before = {**BEFORE, "model": {"family": "encoder", "hidden_size": 8}}
    same = {**BEFORE, "model": {"family": "encoder", "hidden_size": 8, "pad_vocab_to_multiple_of": 1}}
    assert resume_changes(before, same) == ([], [])
    padded = {**same, "model": {**same["model"], "pad_vocab_to_multiple_of": 64}}
    assert resume_changes(before, padded)[0] == ["model.pad_vocab_to_multiple_of: 1 -> 64"]


def test_a_resume_with_another_learning_rate_is_refused_and_nothing_is_rewritten(tmp_path: Path) -> None:
    """Before: the old learning rate went on (restored with the optimizer) while config.yaml, summary.json and the
    export recorded the new one."""
    run(tmp_path, "trainer.max_steps=2", "export_hf=false")
    recorded = (tmp_path / "config.yaml").read_bytes()
    with pytest.raises(ValueError, match=r"optimizer.lr: 0.0005 -> 0.01\nA resume continues one run"):
        run(tmp_path, "trainer.max_steps=4", "export_hf=false", "ckpt_path=last", "optimizer.lr=0.01")
    with pytest.raises(ValueError, match=r"seed: 0 -> 1"):
        run(tmp_path, "trainer.max_steps=4", "export_hf=false", "ckpt_path=last", "seed=1")
    assert (tmp_path / "config.yaml").read_bytes() == recorded
    run(tmp_path, "trainer.max_steps=4", "export_hf=false", "ckpt_path=last")  # longer: allowed
    assert sorted(p.name for p in (tmp_path / "config_history").iterdir()) == [
        "from_step_00000000.yaml",
        "from_step_00000002.yaml",
    ]


def test_the_follow_up_command_of_a_torchrun_job_is_a_torchrun_line() -> None:
    """Issue 56.6: the command printed after a torchrun smoke run left out torchrun (one process would resume it)."""
    from degen_train.run.end_of_run_table import launched_as

    assert launched_as({}) == ["degen-train"]
    one_node = launched_as({"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "8", "WORLD_SIZE": "8"})
    assert one_node[:2] == ["torchrun", "--nproc-per-node=8"] and one_node[-1].endswith("degen-train")
    two_nodes = launched_as({"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "8", "WORLD_SIZE": "16"})
    assert "--nnodes=2" in two_nodes and "--rdzv-backend=c10d" in two_nodes
