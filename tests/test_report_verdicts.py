"""Issue 65: a sweep's report says what its seeds can tell: each setting against its baseline by the one rule, what
moved the other way, what was never compared and why, and how many seeds would decide the rest. On runs' records as
degen-train writes them (no training: the report reads files only); the real commands are tests/test_sweeps.py's."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from degen_train.cli.report import main, report


def member(sweep: Path, weight: float, seed: int, *, loss: float, cosine: float, layer: float,
           extra: dict | None = None, items: dict | None = None) -> Path:  # fmt: skip
    run = sweep / f"regularizer.cosreg.weight={weight:g},seed={seed}"
    (run / "logs").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "overrides.json").write_text(json.dumps([f"regularizer.cosreg.weight={weight:g}", f"seed={seed}"]))
    config = {"objective": {"mle": {"weight": 1.0}}, "regularizer": {"cosreg": {"weight": weight}}, "seed": seed,
              "model": {"hidden_size": 64}, **(extra or {})}  # fmt: skip
    summary = {"config": config, "final_step": 300, "val_loss": loss, "val_terms": {"mle": loss},
               "val_perplexity": 2.718281828**loss, "isotropy": {"isotropy/embedding/mean_cosine": cosine,
                                                                 "isotropy/layer_1/mean_cosine": layer}}  # fmt: skip
    if items:
        summary["items"] = items
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "logs" / "metrics.csv").write_text("step,train/loss\n0,5.0\n299,4.0\n")
    return run


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """CosReg 0 vs 1, 3 seeds: the embedding cone falls clearly, the last layer's rises (the issue's researcher's
    sweep, in small), the loss rises a little."""
    folder = tmp_path / "sweep"
    for seed, wiggle in zip((1, 2, 3), (-0.01, 0.0, 0.01), strict=True):
        member(folder, 0, seed, loss=4.00 + wiggle, cosine=0.40 + wiggle, layer=0.50 + wiggle)
        member(folder, 1, seed, loss=4.20 + wiggle, cosine=0.10 + wiggle, layer=0.56 + wiggle)
    return folder


def verdicts(folder: Path) -> dict[str, dict[str, str]]:
    with open(folder / "report" / "verdicts.csv", newline="") as handle:
        return {row["measure"]: row for row in csv.DictReader(handle)}


def test_each_setting_against_the_value_that_switches_the_term_off(sweep: Path) -> None:
    result = report([sweep], run_analysis=False)
    rows = verdicts(sweep)
    assert result["comparisons"].baseline == ("regularizer.cosreg.weight", "0")
    assert rows["isotropy/embedding/mean_cosine"]["verdict"] == "lower"
    assert float(rows["isotropy/embedding/mean_cosine"]["effect"]) == pytest.approx(-0.30)
    assert rows["val_objective_loss"]["verdict"] == "higher" and rows["val_objective_loss"]["seeds"] == "3 + 3"
    assert rows["isotropy/layer_1/mean_cosine"]["verdict"] == "higher"
    markdown = (sweep / "report" / "report.md").read_text()
    first = markdown[: markdown.index("## Verdicts")]
    assert "Baseline: regularizer.cosreg.weight=0, the value that switches the swept term off" in first
    # issue 71.2: one family over the whole table, its size said; the counts in verdicts.csv's words
    assert "Holm's correction over the 4 comparisons with a p-value (every setting × measure: one family)" in first
    assert "4 show a difference (1 lower, 3 higher)" in first
    # what moved against its better direction is named before the table, not left in it
    assert "isotropy/layer_1/mean_cosine under regularizer.cosreg.weight=1: higher, +0.06" in first
    assert "the cone: higher is worse" in first and "val_objective_loss under" in first
    assert "## All runs, every column" not in markdown  # the wide tables live in runs.csv and report.html
    html = (sweep / "report" / "report.html").read_text()
    assert "<details><summary>All runs, every column</summary>" in html
    # issue 71.5: one forest plot of standardised effects across the measures, not one PNG per measure
    assert html.count("standardised effects against regularizer.cosreg.weight=0, every measure") == 1


def test_a_given_baseline_and_a_refused_one(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    report([sweep], run_analysis=False, baseline="regularizer.cosreg.weight=1")
    assert verdicts(sweep)["isotropy/embedding/mean_cosine"]["verdict"] == "higher"
    with pytest.raises(SystemExit) as exited:
        main([str(sweep), "--no-analyze", "--baseline", "regularizer.cosreg.weight=5"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert "--baseline regularizer.cosreg.weight=5: not a swept key at one of its values; the sweep's are " \
           "regularizer.cosreg.weight: 0, 1" in said  # fmt: skip


def test_the_terminal_says_a_few_lines(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    main([str(sweep), "--no-analyze"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("baseline regularizer.cosreg.weight=0: ") and "comparisons show a difference" in out[1]
    assert len(out) <= 9 and any("verdicts.csv" in line for line in out)


def test_one_seed_cannot_tell_and_the_seeds_advice_names_a_count(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    member(folder, 0, 1, loss=4.0, cosine=0.40, layer=0.5)
    member(folder, 1, 1, loss=4.2, cosine=0.10, layer=0.5)
    report([folder], run_analysis=False)
    assert {row["verdict"] for row in verdicts(folder).values()} == {"cannot tell"}
    noisy = tmp_path / "noisy"
    for seed, wiggle in zip((1, 2, 3), (-0.1, 0.0, 0.1), strict=True):
        member(noisy, 0, seed, loss=4.0 + wiggle, cosine=0.40 + wiggle, layer=0.5)
        member(noisy, 1, seed, loss=4.1 - wiggle, cosine=0.35 - wiggle, layer=0.5)
    report([noisy], run_analysis=False)
    row = verdicts(noisy)["val_objective_loss"]
    assert row["verdict"] == "no difference shown" and row["seeds to decide"].startswith("about ")
    assert int(row["seeds to decide"].split()[1]) > 3


def test_settings_that_differ_in_more_than_the_swept_keys_are_never_compared(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    for seed in (1, 2):
        member(folder, 0, seed, loss=4.0 + seed / 100, cosine=0.4, layer=0.5)
        member(folder, 1, seed, loss=4.2 + seed / 100, cosine=0.1, layer=0.5, extra={"model": {"hidden_size": 128}})
    result = report([folder], run_analysis=False)
    said = result["comparisons"].not_compared
    assert said == ["regularizer.cosreg.weight=1: its runs differ from the baseline's in model.hidden_size (64 → 128), "
                    "which nobody swept: not the same experiment"]  # fmt: skip
    assert "Not compared: regularizer.cosreg.weight=1: its runs differ" in (folder / "report" / "report.md").read_text()


def generation_member(sweep: Path, weight: float, seed: int, *, kept: float, rep: float, ids: list[str],
                      values: list[float]) -> Path:  # fmt: skip
    """A member whose eval.generate kept ``kept`` tokens a contrastive continuation, with per-prompt records."""
    run = member(sweep, weight, seed, loss=4.0 + weight / 5 + seed / 100, cosine=0.4, layer=0.5)
    summary = json.loads((run / "summary.json").read_text())
    summary["eval"] = {"generation": {"decodings": {"contrastive": {"rep_2": rep, "mean_kept_tokens": kept,
                                                                    "ended_early": 1.0 if kept < 10 else 0.2},
                                                    "greedy": {"coherence_simcse": sum(values) / len(values),
                                                               "mean_kept_tokens": 120.0, "ended_early": 0.0}}}}
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "eval").mkdir()
    record = {"kind": "mean", "value": values, "ids": ids}
    (run / "eval" / "eval.json").write_text(json.dumps({"items": {"generation/greedy/coherence_simcse": record}}))
    return run


def test_no_verdict_on_text_that_is_not_there_and_pairs_by_item_id(tmp_path: Path) -> None:
    """Issue 71.4: contrastive continuations that end within 3 tokens get "not measured", never a rep-2 verdict; the
    kept tokens and ended-early share are columns of runs.csv and verdicts.csv. Issue 71.3: a run whose prompts are
    other prompts (same count) is named, and the measure takes each arm's own sampling error."""
    import numpy as np

    folder = tmp_path / "sweep"
    ids = [f"{i}@0:{i:012x}" for i in range(30)]
    draw = np.random.default_rng(0)
    for seed in (1, 2, 3):
        generation_member(folder, 0, seed, kept=3.0, rep=0.0, ids=ids, values=draw.normal(0.1, 0.05, 30).tolist())
        other = ids if seed != 3 else [f"{i + 100}@0:{i:012x}" for i in range(30)]
        generation_member(folder, 1, seed, kept=2.5, rep=0.0 + seed / 1000, ids=other,
                          values=draw.normal(0.2, 0.05, 30).tolist())  # fmt: skip
    report([folder], run_analysis=False)
    rows = verdicts(folder)
    short = rows["generation/contrastive/rep_2"]
    assert short["verdict"] == "not measured" and short["interval low"] == ""
    assert "continuations end within 32 tokens: contrastive kept 3.0 and 2.5 tokens on average" in short["noise"]
    assert short["mean kept tokens"] == "3 → 2.5" and short["ended early"] == "1 → 1"
    coherence = rows["generation/greedy/coherence_simcse"]
    assert coherence["verdict"] in ("higher", "no difference shown") and coherence["mean kept tokens"] == "120 → 120"
    assert "not paired: " in coherence["noise"] and "regularizer.cosreg.weight=1,seed=3/eval/eval.json items[" \
        "'generation/greedy/coherence_simcse']: 30 items, 30 of them not among" in coherence["noise"]  # fmt: skip
    with open(folder / "report" / "runs.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert "generation/contrastive/mean_kept_tokens" in header and "generation/contrastive/ended_early" in header
    assert "1 not measured" in (folder / "report" / "report.md").read_text()


def test_val_perplexity_carries_its_validation_batches_error_paired_by_batch(tmp_path: Path) -> None:
    """Issue 71.5: val_perplexity's evaluation-set error is a bootstrap over the final validation's batches
    (summary.json items, data/validation_items.py), paired by batch id; arms that validated other batches are named
    and take each run's own bootstrap error (runs.csv's "val_perplexity sampling error")."""
    import math

    import numpy as np

    from degen_train.metrics.evaluation_noise import ItemScores

    def batches(loss: float, ids: list[str], draw: np.random.Generator) -> dict:
        losses = loss + draw.normal(0, 0.3, len(ids))  # the batches' luck: the validation set's error
        record = ItemScores("perplexity", {"nll": 4 * losses, "tokens": np.full(len(ids), 4.0)}, tuple(ids))
        return {"val_perplexity": record.record()}, float(np.log(record.score(np.arange(len(ids)))))

    for paired in (True, False):
        folder, draw = tmp_path / f"sweep_{paired}", np.random.default_rng(1)
        ids = [f"rank0.batch{i}:{i:016x}" for i in range(40)]
        for seed, wiggle in zip((1, 2, 3), (-0.01, 0.0, 0.01), strict=True):
            base, loss = batches(4.0 + wiggle, ids, draw)
            member(folder, 0, seed, loss=loss, cosine=0.4, layer=0.5, items=base)
            other = ids if paired else [f"rank0.batch{i}:{i + 1:016x}" for i in range(40)]  # other text
            setting, loss = batches(4.02 + wiggle, other, draw)
            member(folder, 1, seed, loss=loss, cosine=0.1, layer=0.5, items=setting)
        report([folder], run_analysis=False)
        row = verdicts(folder)["val_perplexity"]
        with open(folder / "report" / "runs.csv", newline="") as handle:
            runs = list(csv.DictReader(handle))
        assert all(float(r["val_perplexity sampling error"]) > 0 for r in runs)
        summary = json.loads(next(folder.glob("*seed=1")).joinpath("summary.json").read_text())
        assert math.log(summary["val_perplexity"]) == pytest.approx(4.0 - 0.01, abs=0.2)
        if paired:
            assert "evaluation set, paired by item" in row["noise"] and "not paired" not in row["noise"]
        else:
            assert "not paired: " in row["noise"] and "summary.json items['val_perplexity']: 40 items, 40 of them " \
                "not among" in row["noise"]  # fmt: skip
            assert "+ evaluation set" in row["noise"]


def test_primary_measures_are_their_own_family(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 71.2: --primary corrects the study's measures among themselves and labels the rest exploratory; the
    terminal names each family and its size, and counts in verdicts.csv's words."""
    main([str(sweep), "--no-analyze", "--primary", "val_objective_loss"])
    out = capsys.readouterr().out
    assert "1 primary comparison with a p-value, judged alone (a family of one: nothing to correct)" in out
    assert "Holm's correction over the 3 exploratory comparisons with a p-value" in out
    assert "Holm-corrected" not in out
    rows = verdicts(sweep)
    assert rows["val_objective_loss"]["family"] == "primary (1)"
    assert rows["val_perplexity"]["family"] == "exploratory (3)"
    with pytest.raises(SystemExit):
        main([str(sweep), "--no-analyze", "--primary", "val_perplexiy"])
    assert "--primary val_perplexiy: not a measure the runs have; they have val_objective_loss" in \
        capsys.readouterr().err  # fmt: skip


def test_arms_that_read_another_corpus_are_never_compared(tmp_path: Path) -> None:
    """Issue 72.6 (V13): the report's "same experiment" read only what a run trains, so arms trained on another
    corpus from other initial weights (data.path, model.init_from: inputs) were judged against the baseline."""
    folder = tmp_path / "sweep"
    for seed in (1, 2):
        member(folder, 0, seed, loss=4.0 + seed / 100, cosine=0.4, layer=0.5, extra={"data": {"path": "a.txt"}})
        member(folder, 1, seed, loss=4.2 + seed / 100, cosine=0.1, layer=0.5, extra={"data": {"path": "b.txt"}})
    result = report([folder], run_analysis=False)
    assert result["comparisons"].not_compared == [
        "regularizer.cosreg.weight=1: its runs differ from the baseline's in data.path ('a.txt' → 'b.txt'), which "
        "nobody swept: not the same experiment"]  # fmt: skip


def test_one_unreadable_member_does_not_make_every_recorded_key_look_swept(tmp_path: Path) -> None:
    """Issue 72.7 (V18, RB1): a member whose overrides.json is not JSON is listed unreadable, with no swept value.
    The keys every other run shares (data=wikitext2 on each command line) stay shared: before, its blanks made
    data look swept, the report took data=wikitext2 for the baseline (the first key's first value) and compared
    nothing."""
    folder = tmp_path / "sweep"
    for rate, cosine in (("0.001", 0.40), ("0.003", 0.10)):
        for seed, wiggle in zip((1, 2, 3), (-0.01, 0.0, 0.01), strict=True):
            run = member(folder / rate, 0, seed, loss=4.0 + wiggle, cosine=cosine + wiggle, layer=0.5,
                         extra={"optimizer": {"lr": float(rate)}})  # fmt: skip
            (run / "overrides.json").write_text(json.dumps(["data=wikitext2", f"optimizer.lr={rate}", f"seed={seed}"]))
    broken = member(folder / "broken", 0, 4, loss=4.2, cosine=0.1, layer=0.56)
    (broken / "overrides.json").write_text("[ not json")
    result = report(sorted(p for p in folder.glob("*/*") if p.is_dir()), run_analysis=False)
    assert result["comparisons"].baseline == ("optimizer.lr", "0.001")
    assert result["comparisons"].decided and not result["comparisons"].not_compared


def test_a_member_that_is_a_link_is_listed_unreadable_not_dropped(sweep: Path, tmp_path: Path) -> None:
    """Issue 72.7 (LK4): a sweep member that is itself a link to a run elsewhere silently dropped out of the report;
    it is listed as unreadable, naming the link, and never read through."""
    elsewhere = member(tmp_path / "elsewhere", 1, 9, loss=4.2, cosine=0.1, layer=0.56)
    (sweep / "regularizer.cosreg.weight=1,seed=9").symlink_to(elsewhere, target_is_directory=True)
    report([sweep], run_analysis=False)
    with open(sweep / "report" / "runs.csv", newline="") as handle:
        rows = {row["run"]: row for row in csv.DictReader(handle)}
    linked = rows["regularizer.cosreg.weight=1,seed=9"]
    assert linked["status"] == "unreadable" and "is a link (to " in linked["error"]
    assert "never through a link" in linked["error"]
