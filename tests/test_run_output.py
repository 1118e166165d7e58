"""What a user reads: plain log lines in a file, an end-of-run table, parameter counts, any Trainer argument
as trainer.KEY, push_to_hub's dry run, and a report that analyses exported runs once."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM

from degen_train.cli.report import report
from degen_train.config import load_config
from degen_train.config.schema import validate_config
from degen_train.core.io import atomic_directory, atomic_write_json, current_umask
from degen_train.run.build import build_trainer
from tests.conftest import FAST
from tests.helpers import command, degen_train, run

QUIET = [o for o in FAST if o != "trainer.enable_progress_bar=false"]  # the bar stays on: output decides


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run whose stdout and stderr go to a file, as in a batch job."""
    run_dir = tmp_path_factory.mktemp("batch_job") / "run"
    steps = ["trainer.max_steps=10", "trainer.log_every_n_steps=5"]
    umask = os.umask(0o022)  # a shared cluster's usual umask: what cp would make readable by the group
    try:
        result = degen_train(*QUIET, *steps, "data.tokenizer.vocab_size=1000", f"hydra.run.dir={run_dir}")
    finally:
        os.umask(umask)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout + result.stderr


def test_output_to_a_file_is_plain_lines(logged_run: tuple[Path, str]) -> None:
    _, output = logged_run
    assert "\r" not in output and "\x1b[" not in output  # no progress-bar redraws, no escape codes
    assert "step 5/10 | loss " in output and "step 10/10 | loss " in output and "ETA" in output
    assert "final validation at step 10: val/loss" in output
    why = "(OMP_NUM_THREADS=" if os.environ.get("OMP_NUM_THREADS") else "(threads=auto; "  # the user's export wins
    assert "CPU threads per process: " in output and why in output  # said once, with why


def test_known_noise_is_gone(logged_run: tuple[Path, str]) -> None:
    _, output = logged_run
    noises = ("💡 Tip", "LeafSpec", "Writing model shards", "Total FLOPs: 0", "Loading weights", "GPU available: False")
    for noise in (*noises, "TPU available: False", "Map:", "Filter:"):
        assert noise not in output, noise


def test_the_run_ends_with_a_table_saying_where_things_are(logged_run: tuple[Path, str]) -> None:
    run_dir, output = logged_run
    table = output[output.index("run finished:") :]
    summary = json.loads((run_dir / "summary.json").read_text())
    for line in (
        f"run          {run_dir}",
        "steps        10",
        f"val loss     {summary['val_loss']:.4g} (= 1·mlm)",
        f"export       {run_dir / 'hf'}",
        f"checkpoints  {run_dir / 'checkpoints'}",
        f"analyse      degen-analyze {run_dir}",
        "IsoScore",
        "MFU",
    ):
        assert line in table, line
    # The linear schedule has decayed by step 10: going on is a branch with a longer schedule, not a resume at rate 0
    assert f"branch_from={run_dir}@10 trainer.max_steps=20 scheduler.total_steps=20" in table


def test_run_files_follow_the_users_umask_so_colleagues_can_read_them(logged_run: tuple[Path, str]) -> None:
    """Issue 24.9: staged writes (mkstemp 0600, mkdtemp 0700) made exports unreadable on a shared cluster."""
    run_dir, _ = logged_run
    private = [
        f"{p.relative_to(run_dir)} {stat.filemode(p.stat().st_mode)}"
        for p in [run_dir, *run_dir.rglob("*")]
        if p.stat().st_mode & 0o044 != 0o044 or (p.is_dir() and p.stat().st_mode & 0o011 != 0o011)
    ]
    assert not private, private


def test_staged_writes_keep_a_private_umask_private(tmp_path: Path) -> None:
    umask = os.umask(0o077)
    try:
        with atomic_directory(tmp_path / "export") as staging:
            (staging / "weights.bin").write_bytes(b"w")
        atomic_write_json(tmp_path / "summary.json", {})
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "export").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == 0o600
    assert current_umask() == umask


def test_a_pretrained_load_is_one_plain_line_naming_what_starts_untrained(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture
) -> None:
    """Before: transformers' coloured LOAD REPORT table and a progress bar, raw escape codes in a batch log."""
    from transformers import BertConfig, BertModel

    from degen_train.models.loading import load_pretrained

    shape = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 37}
    BertModel(BertConfig(vocab_size=100, **shape)).save_pretrained(tmp_path / "encoder")
    capfd.readouterr()
    with caplog.at_level("INFO", logger="degen_train"):
        model = load_pretrained(AutoModelForMaskedLM, str(tmp_path / "encoder"), "model.init_from")
    printed = capfd.readouterr()
    assert "LOAD REPORT" not in printed.out + printed.err and "\x1b[" not in printed.out + printed.err
    assert (
        f"model.init_from: weights from {tmp_path / 'encoder'}; newly initialised: cls.predictions (6); "
        "in the checkpoint but not used: pooler.dense (2)"
    ) in caplog.text
    assert model.config.hidden_size == 32


def test_parameter_counts_are_in_the_log_and_the_summary(logged_run: tuple[Path, str]) -> None:
    run_dir, output = logged_run
    counts = json.loads((run_dir / "summary.json").read_text())["parameters"]
    model = AutoModelForMaskedLM.from_pretrained(run_dir / "hf")
    bert = model.bert.embeddings  # tokens, positions and segments are the lookup tables
    lookups = sum(
        m.weight.numel() for m in (bert.word_embeddings, bert.position_embeddings, bert.token_type_embeddings)
    )
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["embeddings"] == lookups and counts["non_embedding"] == counts["total"] - lookups
    assert "model: BertForMaskedLM, " in output and "non-embedding)" in output


def test_any_trainer_argument_not_in_the_yaml_is_settable(tmp_path: Path) -> None:
    cfg = load_config(["trainer.fast_dev_run=true", "trainer.max_time=00:00:05:00", "trainer.detect_anomaly=false"],
                      run_dir=tmp_path)  # fmt: skip
    trainer = build_trainer(validate_config(cfg))
    assert trainer.fast_dev_run is True and cfg.trainer.max_time == "00:00:05:00"
    summary = run(tmp_path / "dev", "trainer.fast_dev_run=true", "data.tokenizer.vocab_size=1000")
    assert summary["final_step"] == 1


def test_a_mistyped_trainer_argument_names_the_close_ones() -> None:
    result = command("degen-train", "trainer.fast_dev_ru=true")
    assert result.returncode != 0
    assert (
        "trainer.fast_dev_ru is not a lightning.pytorch.Trainer argument; did you mean: fast_dev_run?" in result.stderr
    )


def test_push_to_hub_dry_run_lists_the_export_and_uploads_nothing(tmp_path: Path) -> None:
    summary = run(tmp_path, "trainer.max_steps=2", "data.tokenizer.vocab_size=1000",
                  "push_to_hub.repo_id=my-lab/tiny-mlm", "push_to_hub.dry_run=true")  # fmt: skip
    plan = summary["push_to_hub"]
    assert plan["dry_run"] and plan["repo_id"] == "my-lab/tiny-mlm" and "url" not in plan
    assert {"config.json", "model.safetensors", "tokenizer.json", "degen_train.json"} <= set(plan["files"])
    assert plan["bytes"] == sum(p.stat().st_size for p in (tmp_path / "hf").rglob("*") if p.is_file())


def test_push_to_hub_offline_is_refused_before_training(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"push_to_hub.repo_id=my-lab/x but HF_HUB_OFFLINE=1: go online, or set"):
        run(tmp_path, "push_to_hub.repo_id=my-lab/x")
    assert not (tmp_path / "checkpoints").exists()


def test_the_report_analyses_exported_runs_once(logged_run: tuple[Path, str], tmp_path: Path) -> None:
    run_dir, _ = logged_run
    rows = report([run_dir], out=tmp_path / "first")["rows"]
    metrics = run_dir / "analysis" / "metrics.json"
    assert metrics.exists() and rows[0]["analysis/last_layer_mean_cosine"] is not None
    stamp = metrics.stat().st_mtime_ns
    report([run_dir], out=tmp_path / "second")
    assert metrics.stat().st_mtime_ns == stamp  # cached: not analysed again
    assert torch.isfinite(torch.tensor(rows[0]["analysis/last_layer_tacl_self_similarity"]))


def test_non_tty_detection_is_what_decides(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import ProgressBar

    from degen_train.callbacks.plain_progress import PlainProgress

    cfg = load_config(QUIET, run_dir=tmp_path)
    config = validate_config(cfg)
    on_terminal, in_a_file = build_trainer(config, interactive=True), build_trainer(config, interactive=False)
    assert any(isinstance(c, ProgressBar) for c in on_terminal.callbacks)
    assert not any(isinstance(c, ProgressBar) for c in in_a_file.callbacks)
    assert any(isinstance(c, PlainProgress) for c in in_a_file.callbacks)
