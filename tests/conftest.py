"""Test set-up: nothing downloads, wandb never prompts, caches live in a temporary folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Inductor compiles in the test process, not in a pool of Python workers it would start for each session (79 such
# processes cost more here than the tiny graphs of tests/unit/test_compile.py take to compile).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# `make test` runs on both cores (pytest-xdist, one worker each): a worker's runs take its share of the CPUs, as a
# run's threads=auto takes an exported OMP_NUM_THREADS (devices/threads.py), so two workers never fight over the
# cores; a test that sets threads=N keeps N. Set before torch is imported, which reads it once.
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // max(_workers, 1)))

from degen_train.data.builtin_corpus import builtin_documents  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "disabled"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# Settings that keep a test run small and quiet.
FAST = [
    # The end-of-run isotropy probe and the first step's FLOP count cost ~12% of a tiny run: a test that reads
    # summary.json's final isotropy or its total MFU turns them on.
    "callbacks.isotropy.at_end=false",
    "callbacks.throughput.count_total_flops=false",
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
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's one TaCL teacher (and SimCSE's starting point): a short MLM+NSP run without dropout (a
    student inherits its config, and dropout draws differ with the process count of the two-process tests)."""
    from tests.helpers import run

    run_dir = tmp_path_factory.mktemp("teacher")
    run(run_dir, "recipe=bert_mlm_nsp", "model=tiny", "data.tokenizer.vocab_size=1000", "trainer.max_steps=2",
        "model.dropout=0", "model.attention_dropout=0")  # fmt: skip
    return run_dir


@pytest.fixture(scope="session")
def teacher_with_dropout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TaCL teacher with the recipe's dropout: what a teacher's mode does shows in a run's weights (issue 57)."""
    from tests.helpers import run

    run_dir = tmp_path_factory.mktemp("teacher_with_dropout")
    run(run_dir, "recipe=bert_mlm_nsp", "model=tiny", "data.tokenizer.vocab_size=1000", "trainer.max_steps=2")
    return run_dir


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few help topics: about five batches an epoch, so the runs below cross epochs."""
    path = tmp_path_factory.mktemp("corpus") / "topics.txt"
    path.write_text("\n\n".join(builtin_documents()[:4]))
    return path



# Tiers. A test that starts a Python process (the degen-* commands, two-process jobs, kill drills, a second writer)
# is marked `process`, found here from its code so that no list can drift: the test's own source, its fixtures'
# and those of its module's helpers that start one, searched for PROCESS_STARTERS. `make test` runs the rest,
# `make test-process` these, and `.ci/run` both. In a run that leaves `process` out, a test that still starts a
# Python process fails saying so (the guard below), so a starter this search misses cannot slip into that tier.
PROCESS_STARTERS = ("degen_train(", "on_two_processes(", "killed_run(", "cli_run(", "sys.executable", "multiprocessing",
                    "simulated_sbatch(")  # the last: tests/simulated_slurm.py's job of real tasks


def _source(function: object) -> str:
    import inspect

    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def _module_starters(module: object) -> tuple[str, ...]:
    """PROCESS_STARTERS plus ``name(`` for each function of ``module`` that starts a process, to a fixed point."""
    import inspect

    starters = list(PROCESS_STARTERS)
    functions = {n: _source(f) for n, f in vars(module).items() if inspect.isfunction(f) and f.__module__ ==
                 module.__name__}  # fmt: skip
    grew = True
    while grew:
        grew = False
        for name, source in functions.items():
            body = source.split("\n", 1)[-1]  # not the def line itself
            if f"{name}(" not in starters and _starts(body, tuple(starters)):
                starters.append(f"{name}(")
                grew = True
    return tuple(starters)


def _starts(source: str, starters: tuple[str, ...]) -> bool:
    """Whether ``source`` calls a starter (``name(`` as a whole name, not ``check_name(``) or names sys.executable."""
    import re

    return any(re.search(r"(?<![\w])" + re.escape(starter), source) for starter in starters)


def starts_a_process(item: pytest.Item) -> bool:
    starters = _module_starters(item.module)
    sources = [_source(item.function)]
    for name, definitions in item._fixtureinfo.name2fixturedefs.items():
        if name != "_python_processes_only_in_the_process_tier":  # the guard names sys.executable itself
            sources += [_source(definition.func) for definition in definitions]
    return any(_starts(source, starters) for source in sources)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and starts_a_process(item):
            item.add_marker(pytest.mark.process)


@pytest.fixture(autouse=True)
def _python_processes_only_in_the_process_tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a run without the process tier, starting a Python process fails the test, naming what to change."""
    import subprocess
    import sys

    if request.node.get_closest_marker("process") or "not process" not in (request.config.option.markexpr or ""):
        return
    original = subprocess.Popen.__init__
    interpreters = str(Path(sys.executable).parent)

    def guarded(self: subprocess.Popen, args: object, *rest: object, **kwargs: object) -> None:
        import traceback

        shown = " ".join(map(str, args)) if isinstance(args, list | tuple) else str(args)
        compiler = any("torch/_inductor" in frame.filename for frame in traceback.extract_stack())  # its ISA probe
        if not compiler and (str(sys.executable) in shown or interpreters in shown or "degen-" in shown):
            raise AssertionError(
                f"{request.node.nodeid} starts a Python process ({shown[:120]}) but is not in the process tier: "
                f"start it through a helper named in tests/conftest.py PROCESS_STARTERS, or run it in-process"
            )
        original(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


@pytest.fixture
def no_analysis_pictures(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test that reads an analysis's numbers, not its figures: degen-analyze draws none (six matplotlib figures
    an analysis, about 2.3 s here; the attention reproduce part's six runs spent 16 of their 50 s there). The
    figures are tested where a page shows them (the miniature reproduce page) and in tests/test_probes.py."""
    from degen_train.evaluation import model_analysis

    monkeypatch.setattr(model_analysis, "pictures", lambda *args, **kwargs: {})
