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
    start = summary["branched_from"].pop("validation")  # the parent's weights at step 6, validated by the branch
    assert summary["branched_from"] == {"run": str(parent.resolve()), "step": 6, "checkpoint": str(
        parent.resolve() / "checkpoints" / "step=00000006.ckpt")}  # fmt: skip
    assert start["val/loss"] == pytest.approx(logged(parent, "val/loss")[5])  # validated after update 6: stamped 5
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
    # Issue 72.8 (NB1): a torn checkpoint of the parent is named as the parent's, with its other steps, not with a
    # resume's "use an earlier one"
    torn = parent / "checkpoints" / "step=00000004.ckpt"
    whole = torn.read_bytes()
    torn.write_bytes(whole[:1000])
    with pytest.raises(Exception, match=r"branch_from=.*parent@4: the parent's checkpoint \S+step=00000004\.ckpt is "
                                        r"not a readable PyTorch checkpoint .*Branch from another step of the parent "
                                        r"\(steps with a readable checkpoint file: 2, 6\)") as refused:  # fmt: skip
        run(tmp_path / "torn", *wsd(small_corpus), "trainer.max_steps=9", f"branch_from={parent}@4")
    assert "use an earlier one" not in str(refused.value)
    torn.write_bytes(whole)
    # Issue 72.7 (LK1, LK2): the parent's checkpoints are read from its own folder, never through a link
    elsewhere = tmp_path / "elsewhere.ckpt"
    (parent / "checkpoints" / "step=00000002.ckpt").rename(elsewhere)
    (parent / "checkpoints" / "step=00000002.ckpt").symlink_to(elsewhere)
    with pytest.raises(ValueError, match=r"branch_from=.*parent@2: the parent's \S+step=00000002\.ckpt -> \S+"
                                         r"elsewhere\.ckpt is a link: a parent's checkpoints and tokenizer are read "
                                         r"from its own folder only"):  # fmt: skip
        run(tmp_path / "linked", *wsd(small_corpus), "trainer.max_steps=9", f"branch_from={parent}@2")


def test_the_report_of_branched_cooldowns_shows_their_parent_at_the_branch_step(
    tmp_path: Path,
    small_corpus: Path,
) -> None:
    from degen_train.cli.report import report

    parent, cooldowns = tmp_path / "stable", tmp_path / "cooldowns"
    run(parent, *wsd(small_corpus), "trainer.max_steps=10", "export_hf=false")
    for shape in ("linear", "one_minus_sqrt"):
        run(cooldowns / shape, *wsd(small_corpus), "trainer.max_steps=9", "scheduler.decay_steps=3",
            f"scheduler.decay_shape={shape}", f"branch_from={parent}@6")  # fmt: skip
    result = report([cooldowns], run_analysis=False)
    (heading, rows), *others = result["branches"].items()
    assert not others and heading == f"{parent.resolve()} at step 6: 2 branches"
    start = logged(parent, "val/loss")[5]  # validated after update 6 (val_check_interval=3), stamped 5 (0-based)
    assert rows[0]["run"] == "stable (parent, validated after update 6)" and rows[0]["val_loss"] == pytest.approx(start)
    assert {r["run"] for r in rows[1:]} == {"linear", "one_minus_sqrt"}
    for row in rows[1:]:
        assert row["val_objective_loss change"] == pytest.approx(row["val_objective_loss"] - start)  # MLM alone
    assert "## Branches of " in (cooldowns / "report" / "report.md").read_text()


def test_a_cooldown_that_switches_a_regularizer_on_is_compared_by_its_objective(
    tmp_path: Path, small_corpus: Path
) -> None:
    """Issue drill: the CosReg cooldown read +0.29 (worse) in "val_loss change", which added its regularizer, while its
    objective's own loss fell below the parent's; the parent's row was nan in every column but one."""
    from degen_train.cli.report import report

    parent, cooldowns = tmp_path / "stable", tmp_path / "cooldowns"
    run(parent, *wsd(small_corpus), "regularizer=cosreg", "regularizer.cosreg.weight=0", "trainer.max_steps=10",
        "export_hf=false", "callbacks.isotropy.at_end=true")  # fmt: skip
    run(cooldowns / "on", f"branch_from={parent}@6", "trainer.max_steps=9", "scheduler.decay_steps=3",
        "regularizer.cosreg.weight=1", "callbacks.isotropy.at_end=true")  # fmt: skip
    (_, rows), *_ = report([cooldowns], run_analysis=False)["branches"].items()
    parent_row, branch_row = rows
    start = logged(parent, "val/mlm/loss")[5]
    assert parent_row["val_objective_loss"] == pytest.approx(start)
    assert parent_row["val_perplexity"] == pytest.approx(__import__("math").exp(start))
    assert parent_row["isotropy/embedding/mean_cosine"] is not None
    assert branch_row["val_objective_loss change"] == pytest.approx(branch_row["val_objective_loss"] - start)
    assert "val_loss change" not in branch_row


def test_a_branch_is_its_parent_plus_what_it_changes(tmp_path: Path, small_corpus: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    """Issue drill: a branch given only its own changes failed (Hydra wanted +regularizer.cosreg.weight: the parent's
    regularizer=cosreg was not inherited), or trained a linear schedule under a WSD parent, among 13 warnings for
    settings nobody changed. Now it composes the parent's overrides first and lists only what it changes."""
    import logging

    parent, branch = tmp_path / "parent", tmp_path / "branch"
    run(parent, *wsd(small_corpus), "recipe=gao_cosreg", "model=gpt2_tiny", "regularizer.cosreg.weight=0",
        "trainer.max_steps=10", "data.tokenizer.vocab_size=1000")  # fmt: skip
    with caplog.at_level(logging.INFO, logger="degen_train"):
        run(branch, f"branch_from={parent}@6", "trainer.max_steps=9", "scheduler.decay_steps=3",
            "regularizer.cosreg.weight=1")  # fmt: skip
    config = json.loads((branch / "config.json").read_text())
    assert config["scheduler"]["schedule"] == "wsd" and config["regularizer"]["cosreg"]["weight"] == 1
    assert config["objective"]["mle"] is not None and config["model"]["arch"] == "gpt2"
    said = next(m for m in (r.getMessage() for r in caplog.records) if "branch of" in m and " reads: " not in m)
    changed = [line.strip().split(":")[0] for line in said.splitlines()[1:]]
    # what it trains, and export_hf: a branch decides its own outputs (role output: the parent's run's
    # export_hf=false, a test helper's, is not carried; core/roles.py)
    assert sorted(changed) == ["export_hf", "regularizer.cosreg.weight", "scheduler.decay_steps",
                               "trainer.max_steps"], said  # fmt: skip
    assert not [r for r in caplog.records if r.getMessage().startswith("resume changes")]


def test_a_branch_whose_decay_would_start_before_it_is_refused(tmp_path: Path, small_corpus: Path) -> None:
    """Issue drill: branch_from=RUN@1200 trainer.max_steps=1400 with scheduler.decay_steps unset took the default
    fraction of the whole run, and the rate dropped to 0.465× at the branch step."""
    parent = tmp_path / "parent"
    settings = [*resume_settings(small_corpus), "scheduler=wsd", "scheduler.warmup_steps=1",
                "callbacks.checkpoint.every_n_train_steps=2", "callbacks.checkpoint.save_top_k=-1"]  # fmt: skip
    run(parent, *settings, "trainer.max_steps=12")
    # int(0.2 · 13) = 2 decay steps (rounded down as the released WSD code does): steps 11..13, one before the branch.
    with pytest.raises(ValueError, match=r"the WSD decay \(scheduler.decay_fraction=0.2 of total_steps=13: 2 steps\) "
                                         r"would start at step 11, before the branch step 12.*Set "
                                         r"scheduler.decay_steps=1"):  # fmt: skip
        run(tmp_path / "branch", f"branch_from={parent}@12", "trainer.max_steps=13")
    run(tmp_path / "branch", f"branch_from={parent}@12", "trainer.max_steps=13", "scheduler.decay_steps=1")


def test_a_branch_table_shows_the_parent_at_the_branch_step_when_the_parent_did_not_validate_there(
    tmp_path: Path, small_corpus: Path
) -> None:
    """Issue 47.6: the parent row was all NaN ("validated after update ?") when the parent had not validated at the
    branch step. A branch validates its starting weights itself and records them (summary.json's branched_from)."""
    from degen_train.cli.report import report

    parent, cooldowns = tmp_path / "stable", tmp_path / "cooldowns"
    run(parent, *wsd(small_corpus), "trainer.max_steps=8", "trainer.val_check_interval=8", "export_hf=false")
    assert min(logged(parent, "val/loss")) == 7  # no validation before update 8
    run(cooldowns / "a", f"branch_from={parent}@4", "trainer.max_steps=6", "scheduler.decay_steps=2")
    (_, rows), *_ = report([cooldowns], run_analysis=False)["branches"].items()
    parent_row, branch_row = rows
    assert parent_row["run"] == "stable (parent, validated after update 4)"
    assert parent_row["val_objective_loss"] == pytest.approx(json.loads((cooldowns / "a" / "summary.json").read_text(
        ))["branched_from"]["validation"]["val/mlm/loss"])  # fmt: skip
    assert branch_row["val_objective_loss change"] == pytest.approx(branch_row["val_objective_loss"] -
                                                                     parent_row["val_objective_loss"])  # fmt: skip


def test_a_branch_refused_for_what_it_may_not_change_names_the_parents_checkpoint(
    tmp_path: Path, small_corpus: Path
) -> None:
    """Issue 72.8 (NB12–NB15, PR15): a branch that changed its model, its terms, a setting it trains by or its
    tokenizer was refused in a resume's words ("resume with the run's own …", "A resume continues one run"), without
    naming the parent's file. Now each refusal names branch_from, the parent's checkpoint and what a branch may
    change; a resume's refusals keep their own words (tests/test_resume.py)."""
    import re

    from degen_train.run.resume import check_tokenizer

    parent = tmp_path / "parent"
    run(parent, *wsd(small_corpus), "trainer.max_steps=8")
    start = re.escape(f"branch_from={parent}@4: the parent's checkpoint ") + r"\S+step=00000004\.ckpt "
    may = r"a branch may change only its schedule \(scheduler\.\*\), its length \(trainer\.max_steps\)"
    for change, said in [
        ("model.num_layers=3", r"was written with model.num_layers=2, this branch has model.num_layers=3: " + may),
        # a model key by its role (run/resume.py), not by a list that had forgotten it
        ("model.attention_dropout=0.2", r"was written with model.attention_dropout=0.1, this branch has "
                                        r"model.attention_dropout=0.2: " + may),
        ("regularizer=cosreg", r"was trained with loss terms \['mlm'\], this branch has \['cosreg', 'mlm'\]: " + may),
        ("optimizer.lr=0.01", r"was trained with other settings than this branch has:\n  optimizer.lr: 0.0005 -> "
                              r"0.01\nA branch may change only"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=start + said) as refused:
            run(tmp_path / "branch", *wsd(small_corpus), "trainer.max_steps=8", f"branch_from={parent}@4", change)
        assert f"model.init_from={parent}/hf" in str(refused.value) and "resume" not in str(refused.value)
    # the tokenizer: only the built tokenizer shows it (the same vocabulary size, other tokens)
    with pytest.raises(ValueError, match=r"branch_from=P@2: the parent's checkpoint P/c\.ckpt was trained with "
                                         r"tokenizer a, this branch has \w+ .*branch with the parent's own tokenizer "
                                         r"\(P/tokenizer/"):  # fmt: skip
        check_tokenizer(Path("P/c.ckpt"), {"provenance": {"tokenizer_sha": "a"}}, _Tokenizer(), branch_from="P@2")


class _Tokenizer:
    """The least a tokenizer's identity reads (data/tokenizer.tokenizer_identity: its backend's definition)."""

    class backend_tokenizer:  # noqa: N801 (the attribute's name in transformers)
        @staticmethod
        def to_str() -> str:
            return '{"model": "another"}'

