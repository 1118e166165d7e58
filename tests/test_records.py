"""What every run records and offers: provenance everywhere, --reproduce, --list, the debug group, MFU,
wandb runs that resume as one, and data.revision reaching load_dataset."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from degen_train.config import load_config
from degen_train.core.package_dir import config_dir
from degen_train.data import corpus as corpus_module
from degen_train.losses.catalog import discover_terms
from tests.helpers import command, logged, run

SHORT = ["trainer.max_steps=4", "data.tokenizer.vocab_size=1000", "trainer.val_check_interval=4"]


@pytest.fixture(scope="module")
def text_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("records")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n\n".join(f"paragraph {i} has some words about cones and spectra." for i in range(300)))
    run(folder / "run", "data=text", f"data.path={corpus}", *SHORT, "callbacks.throughput.count_total_flops=true")
    return folder / "run"


def test_provenance_is_in_the_summary_every_checkpoint_and_the_export(text_run: Path) -> None:
    summary = json.loads((text_run / "summary.json").read_text())
    record = summary["provenance"]
    corpus = Path(summary["config"]["data"]["path"])
    assert record["corpus"]["files"] == [
        {
            "path": str(corpus.resolve()),
            "bytes": corpus.stat().st_size,
            "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
        }
    ]
    assert set(record["versions"]) >= {"torch", "transformers", "lightning", "datasets", "tokenizers", "degen_train"}
    assert record["versions"]["torch"] == torch.__version__
    assert {"git_sha", "dirty"} <= set(record["code"]) and record["world_size"] == 1 and record["seed"] == 0
    assert len(record["tokenizer_sha"]) == 16 and record["vocab_size"] > 100
    checkpoint = torch.load(text_run / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["degen_train"]["provenance"]["corpus"] == record["corpus"]
    assert checkpoint["degen_train"]["provenance"]["config"] == summary["config"]
    exported = json.loads((text_run / "hf" / "degen_train.json").read_text())
    assert exported["tokenizer_sha"] == record["tokenizer_sha"] and exported["config"] == summary["config"]


def test_throughput_and_mfu_are_in_the_summary_and_the_logs(text_run: Path) -> None:
    summary = json.loads((text_run / "summary.json").read_text())
    assert summary["tokens_per_s"] > summary["predicted_tokens_per_s"] > 0  # MLM predicts ~15% of tokens
    assert 0 < summary["mfu"] < 1 and summary["peak_flops_source"].startswith("measured")
    assert summary["model_flops_per_token"] > 0
    assert logged(text_run, "train/mfu") and logged(text_run, "train/mfu_total")


def test_a_short_run_validating_after_every_update_is_timed(tmp_path: Path) -> None:
    """Issue 67.4: a 6-update run (a joblib sweep member, measured) reported `speed 0 tokens/s` and tokens_per_s 0.0:
    the batch after each validation was treated as a start and never timed. What was not measured is null, saying
    why, never 0."""
    from degen_train.callbacks.throughput import Throughput
    from tests.helpers import run

    summary = run(tmp_path / "run", "trainer.max_steps=6", "trainer.val_check_interval=1", "export_hf=false")
    assert summary["tokens_per_s"] > 0 and summary["seconds_per_batch"] > 0
    assert summary["tokens_per_s_unmeasured"] is None
    untimed = Throughput(count_total_flops=False).summary(world_size=1)
    assert untimed["tokens_per_s"] is None and untimed["steady_tokens_per_s"] is None
    assert untimed["tokens_per_s_unmeasured"].startswith("no step was timed")


def test_the_final_validation_is_the_periodic_one_when_nothing_changed_since(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 67.5: the final validation repeated the last periodic one at the same step, with the same loss (20 s of
    each 8.5-minute run). Its numbers are taken, and its row is logged at the final step as before."""
    from tests.helpers import run

    caplog.set_level("INFO", logger="degen_train")
    summary = run(tmp_path / "run", "trainer.max_steps=6", "trainer.val_check_interval=3", "export_hf=false")
    assert any(r.getMessage().startswith("final validation at step 6: ") and "unchanged since" in r.getMessage()
               for r in caplog.records)
    rows = {step: loss for step, loss in logged(tmp_path / "run", "val/loss").items()}
    assert rows[5] == rows[6] == pytest.approx(summary["val_loss"])  # the periodic row, stamped again as the final


def rebased(tree: Any, old_run_dir: str) -> Any:
    """``tree`` with every string that is, or lies inside, ``old_run_dir`` written as ``${run_dir}``..."""
    if isinstance(tree, dict):
        return {key: rebased(value, old_run_dir) for key, value in tree.items()}
    if isinstance(tree, list):
        return [rebased(value, old_run_dir) for value in tree]
    old = old_run_dir.rstrip("/")
    if isinstance(tree, str) and (tree == old or tree.startswith(old + "/")):
        return "${run_dir}" + tree[len(old) :]
    return tree


def test_reproduce_relaunches_a_run_from_its_record(text_run: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    result = command("degen-train", "--reproduce", str(text_run), "trainer.enable_progress_bar=false",
                     f"hydra.run.dir={again}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = (json.loads((d / "summary.json").read_text()) for d in (text_run, again))
    assert after["train_loss"] == before["train_loss"] and after["val_loss"] == before["val_loss"]
    # The same config, every path inside the run folder rebuilt inside the new one (never written into the old).
    assert rebased(after["config"], str(again)) == rebased(before["config"], str(text_run))
    assert after["config"]["callbacks"]["checkpoint"]["dirpath"] == f"{again}/checkpoints"


def test_reproduce_of_a_folder_that_is_not_a_run_names_it(tmp_path: Path) -> None:
    result = command("degen-train", "--reproduce", str(tmp_path))
    assert result.returncode != 0 and f"{tmp_path}/config.yaml does not exist" in result.stderr


def test_list_names_every_recipe_preset_and_term() -> None:
    result = command("degen-train", "--list")
    assert result.returncode == 0, result.stderr
    for recipe in (config_dir() / "recipe").glob("*.yaml"):
        assert f"  {recipe.stem} " in result.stdout
    for name in discover_terms():
        assert f"  {name} " in result.stdout
    assert "temperature=0.01" in result.stdout and "L=2 H=128" in result.stdout  # tacl's switch, tiny's shape


def test_debug_fast_is_a_five_step_smoke_test() -> None:
    cfg = load_config(["debug=fast"])
    assert cfg.trainer.max_steps == 5 and cfg.data.batch_size == 4


def test_debug_overfit_memorises_its_two_batches(tmp_path: Path) -> None:
    run(tmp_path, "debug=overfit", "trainer.max_steps=60", "data.tokenizer.vocab_size=1000", "export_hf=false")
    losses = logged(tmp_path, "train/loss")
    assert losses[59] < 0.4 * losses[0], losses  # a real run's loss barely moves in 60 steps


def test_debug_profile_writes_a_trace(tmp_path: Path) -> None:
    run(tmp_path, "debug=profile", "data.tokenizer.vocab_size=1000", "trainer.max_steps=8",
        "trainer.profiler.schedule.wait=2", "trainer.profiler.schedule.active=3")  # fmt: skip
    traces = list((tmp_path / "profile").glob("*.pt.trace.json"))
    assert traces and json.loads(traces[0].read_text())["traceEvents"]


def test_a_resumed_wandb_run_logs_into_the_same_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    common = ["logger=wandb", "data.tokenizer.vocab_size=1000", "scheduler.total_steps=4", "export_hf=false",
              "callbacks.checkpoint.every_n_train_steps=2"]  # the same checkpoint callback on both sides of the resume
    run(tmp_path, *common, "trainer.max_steps=2")
    run(tmp_path, *common, "trainer.max_steps=4", "ckpt_path=last")
    segments = sorted((tmp_path / "wandb").glob("offline-run-*"))
    ids = {path.stem.removeprefix("run-") for segment in segments for path in segment.glob("run-*.wandb")}
    assert len(segments) == 2 and len(ids) == 1, (segments, ids)  # two segments, one wandb run to sync
    files = segments[-1] / "files"
    assert json.loads((files / "wandb-summary.json").read_text())["final_step"] == 4
    assert "seed: 0" in (files / "config.yaml").read_text()
    assert "HandleAbandonedError" not in (segments[-1] / "logs" / "debug.log").read_text()


def test_data_revision_reaches_load_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load_dataset(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append((args, kwargs))
        return datasets.Dataset.from_dict({"text": ["one document", "another one"]})

    monkeypatch.setattr(corpus_module.datasets, "load_dataset", fake_load_dataset)
    cfg = load_config(["data=hub", "data.name=wikitext", "data.config=wikitext-2-raw-v1", "data.revision=b08601e"])
    loaded = corpus_module.load_corpus(cfg.data)
    assert calls and all(kwargs["revision"] == "b08601e" for _, kwargs in calls)
    assert loaded.provenance["revision"] == "b08601e" and loaded.provenance["name"] == "wikitext"
