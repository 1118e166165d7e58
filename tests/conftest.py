"""Test set-up: nothing downloads, wandb never prompts, caches live in a temporary folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from degen_train.data.builtin_corpus import builtin_documents

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "disabled"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# Settings that keep a test run small and quiet.
FAST = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=2",
    "data.batch_size=8",
    "data.block_size=64",
    "model.max_position=128",
]


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("degen_cache")
    os.environ["DEGEN_TRAIN_CACHE"] = str(cache)
    os.environ["DEGEN_TRAIN_STATE"] = str(cache / "state")  # the own-runs registry (own_runs.py): the tests' own
    os.environ.setdefault("HF_DATASETS_CACHE", str(cache / "hf_datasets"))
    return cache


EXPORTED_THREADS = os.environ.get("OMP_NUM_THREADS")  # as the session started, before any run exported its own


@pytest.fixture(autouse=True)
def _threads_setting_stays_in_its_test() -> Iterator[None]:
    """An in-process run exports OMP_NUM_THREADS for its children (threads=auto); later tests' subprocesses must
    not take it for one the user exported. Restored to the session's value (a module fixture's run exports one
    before the module's first test starts)."""
    yield
    if EXPORTED_THREADS is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = EXPORTED_THREADS


def shared_data(*parts: str) -> Path:
    """A file under ../shared/data, or skip the test saying why."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared data folder only exists on the project's machines")
    return path


@pytest.fixture(scope="session")
def dropout_free_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TaCL teacher for the multi-process tests: a short MLM+NSP run without dropout (its student inherits
    the config, and dropout draws differ with the process count)."""
    from tests.helpers import run

    run_dir = tmp_path_factory.mktemp("dropout_free_teacher")
    run(run_dir, "recipe=bert_mlm_nsp", "model=tiny", "data.tokenizer.vocab_size=1000", "trainer.max_steps=2",
        "model.dropout=0", "model.attention_dropout=0")  # fmt: skip
    return run_dir


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few help topics: about five batches an epoch, so the runs below cross epochs."""
    path = tmp_path_factory.mktemp("corpus") / "topics.txt"
    path.write_text("\n\n".join(builtin_documents()[:4]))
    return path

