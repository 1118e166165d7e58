"""Issue 56.3: a report a user can afford. The analyses a report runs are capped (sentences, a decoder's greedy
continuations) and can leave parts out; present analyses are reused; the time they took is said."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tests.unit.test_decoding import _export

VOCABULARY = 300  # degen-analyze refuses a tokenizer of fewer entries than a trained one has (MIN_VOCABULARY)


@pytest.fixture
def decoder_export(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCABULARY, n_positions=256, n_embd=32, n_layer=2, n_head=2, bos_token_id=0,
                        eos_token_id=0)  # fmt: skip
    model = GPT2LMHeadModel(config)
    return _export(tmp_path / "export", model.eval())


def _corpus(path: Path, sentences: int, words: int) -> Path:
    draw = torch.Generator().manual_seed(1)
    lines = [" ".join(f"w{int(i)}" for i in torch.randint(1, VOCABULARY, (words,), generator=draw))
             for _ in range(sentences)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_analysis_leaves_out_what_it_is_told_and_caps_the_continuations(
    decoder_export: Path, tmp_path: Path
) -> None:
    from degen_train.evaluation.model_analysis import analyze

    corpus = _corpus(tmp_path / "corpus.txt", 12, 60)  # 60 words: each holds the probe's 50-token prefix
    result = analyze(decoder_export, out=tmp_path / "capped", corpus=str(corpus), max_sentences=8,
                     generation_prompts=3, skip=("outliers", "figures"))  # fmt: skip
    assert result["generation"]["prefixes"] == 3 and result["skipped"] == ["figures", "outliers"]
    assert "outliers" not in result and "pictures" not in result and "layers" in result
    assert not list((tmp_path / "capped").glob("*.png"))
    assert json.loads((tmp_path / "capped" / "metrics.json").read_text())["skipped"] == ["figures", "outliers"]
    with pytest.raises(ValueError, match=r"cannot skip cone: the parts that can be skipped are outliers, generation"):
        analyze(decoder_export, out=tmp_path / "bad", corpus=str(corpus), skip=("cone",))


def test_the_report_checks_its_caps_before_reading_a_run(tmp_path: Path) -> None:
    from degen_train.cli.report import AnalysisCaps, report

    with pytest.raises(ValueError, match=r"--analysis-skip cone: not a part of an analysis; choose from outliers"):
        report([tmp_path / "no_such_sweep"], caps=AnalysisCaps(skip=("cone",)))
    with pytest.raises(ValueError, match=r"--analysis-sentences=0 and --generation-prompts=50 must each be at least 1"):
        report([tmp_path / "no_such_sweep"], caps=AnalysisCaps(sentences=0))


def test_the_reports_analyses_run_at_its_caps_reuse_what_is_there_and_are_timed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from degen_train.cli import report as report_module
    from degen_train.evaluation import model_analysis

    runs = []
    for name in ("a", "b"):
        (tmp_path / name / "hf").mkdir(parents=True)
        (tmp_path / name / "hf" / "config.json").write_text("{}")
        runs.append(tmp_path / name)
    (tmp_path / "b" / "analysis").mkdir()
    (tmp_path / "b" / "analysis" / "metrics.json").write_text("{}")  # present: reused, not run again
    calls = []
    monkeypatch.setattr(model_analysis, "analyze", lambda run, **options: calls.append((run, options)))
    timing: dict[str, float] = {}
    caps = report_module.AnalysisCaps(sentences=50, generation_prompts=5, skip=("generation",))
    assert report_module.analyze_missing(runs, caps=caps, timing=timing) == []
    assert calls == [(runs[0], {"trust_config": False, "max_sentences": 50, "skip": ("generation",),
                                "generation_prompts": 5})]  # fmt: skip
    assert timing["runs"] == 1 and timing["reused"] == 1 and timing["seconds"] >= 0.0
    # Issue 73.3: a decoder that measured its greedy continuations at its end (eval.generate) is not made to
    # generate again in its analysis; the report shows the run's own (generation/greedy/*) and says so
    (tmp_path / "a" / "summary.json").write_text(json.dumps({"eval": {"generation": {"decodings": {
        "greedy": {"rep_2": 0.5}}}}}))  # fmt: skip
    calls.clear()
    everything = report_module.AnalysisCaps(sentences=50, generation_prompts=5)
    assert report_module.analyze_missing(runs, caps=everything, timing=timing) == []
    assert calls == [(runs[0], {"trust_config": False, "max_sentences": 50, "skip": ("generation",),
                                "generation_prompts": 5})]  # fmt: skip
    assert timing["generated_at_end"] == 1
    (tmp_path / "a" / "summary.json").write_text("[1, 2]")  # unreadable: the analysis measures it itself
    calls.clear()
    assert report_module.analyze_missing(runs, caps=everything, timing=timing) == []
    assert calls[0][1]["skip"] == () and timing["generated_at_end"] == 0


def test_a_decoder_run_measures_its_generations_at_its_end_and_the_report_shows_them(tmp_path: Path) -> None:
    """Issue 56.1/56.2: eval.generate on a decoder's run puts each decoding's measures in summary.json (typed by
    config/records.Generation) and the report's runs.csv; on an encoder run it is refused before any data."""
    from degen_train.cli.report import report
    from tests.helpers import run

    text = tmp_path / "held_out.txt"
    text.write_text("\n".join(["the quick brown fox jumps over the lazy dog " * 12] * 4) + "\n")
    with pytest.raises(ValueError, match=r"eval.generate_prefix_tokens \+ eval.generate_new_tokens = 160 tokens is "
                                         r"longer than model.max_position=128"):  # fmt: skip
        run(tmp_path / "too_long", "objective=mle", "model=gpt2_tiny", f"eval.generate={text}")
    assert not (tmp_path / "too_long" / "checkpoints").exists()  # refused before training
    if importlib.util.find_spec("lm_eval") is not None:  # the harness's task index, read before training
        with pytest.raises(ValueError, match=r"eval.lm_eval: task\(s\) no_such_task not known to lm-eval .* a "
                                             r"folder given by eval.lm_eval_include"):  # fmt: skip
            run(tmp_path / "unknown_task", "objective=mle", "model=gpt2_tiny", "eval.lm_eval=[no_such_task]")
        assert not (tmp_path / "unknown_task" / "checkpoints").exists()
    summary = run(tmp_path / "decoder", "objective=mle", "model=gpt2_tiny", "trainer.max_steps=2",
                  f"eval.generate={text}", "eval.generate_prompts=2", "eval.generate_prefix_tokens=8",
                  "eval.generate_new_tokens=16")  # fmt: skip
    measures = summary["eval"]["generation"]["decodings"]
    assert set(measures) == {"greedy", "beam", "top_k", "nucleus", "contrastive"}
    assert all(0.0 <= m["diversity"] <= 1.0 for m in measures.values())
    assert (tmp_path / "decoder" / "eval" / "generations.jsonl").is_file()
    rows = report([tmp_path / "decoder"], out=tmp_path / "report", run_analysis=False)["rows"]
    assert rows[0]["generation/contrastive/rep_4"] == pytest.approx(measures["contrastive"]["rep_4"])
    with pytest.raises(ValueError, match=r"eval.generate measure a decoder's generations; this run's model is an "
                                         r"encoder"):  # fmt: skip
        run(tmp_path / "encoder", f"eval.generate={text}")
