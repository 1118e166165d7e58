"""Multirun sweeps: a grid runs into one folder, failures are recorded, reruns skip finished runs; degen-report."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from degen_train.cli.report import main as report_main
from degen_train.cli.report import report
from tests.conftest import FAST
from tests.helpers import degen_train

QUICK = [
    *FAST,
    "trainer.max_steps=10",
    "trainer.val_check_interval=10",
    "export_hf=false",
    "callbacks.isotropy.every_n_steps=5",
    "data.tokenizer.vocab_size=2000",
]


def sweep(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return degen_train("-m", *QUICK, *overrides, f"hydra.sweep.dir={sweep_dir}")


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sweep_dir = tmp_path_factory.mktemp("grid")
    result = sweep(sweep_dir, "regularizer=cosreg", "regularizer.cosreg.weight=0,1", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir


def test_grid_report_has_one_row_per_run_matching_its_summary(grid: Path) -> None:
    runs = sorted(p.parent for p in grid.glob("*/summary.json"))
    assert len(runs) == 4
    result = report([grid])
    with open(grid / "report" / "runs.csv", newline="") as handle:
        rows = {r["run"]: r for r in csv.DictReader(handle)}
    assert len(rows) == 4
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        row = rows[run.name]
        assert float(row["val_loss"]) == pytest.approx(summary["val_loss"], rel=1e-3)
        assert float(row["isotropy/embedding/mean_cosine"]) == pytest.approx(
            summary["isotropy"]["isotropy/embedding/mean_cosine"], rel=1e-3
        )
        assert row["regularizer.cosreg.weight"] in ("0", "1") and row["seed"] in ("1", "2")
        assert float(row["outliers/max_kurtosis"]) == pytest.approx(summary["isotropy"]["outliers/max_kurtosis"])
    assert len(result["grouped"]) == 2 and all(g["seeds"] == 2 for g in result["grouped"])
    # Headline columns first: swept values, validation loss and perplexity, each term's own value.
    with open(grid / "report" / "runs.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert header[:8] == [
        "run", "status", "regularizer.cosreg.weight", "seed", "objective", "val_objective_loss", "val_perplexity",
        "val_loss",
    ]  # fmt: skip
    assert {"val/cosreg/loss", "train/cosreg/loss", "val/mlm/loss"} <= set(header[8:12])
    assert all(float(r["val_objective_loss"]) == float(r["val/mlm/loss"]) for r in rows.values())
    baseline = [r for r in rows.values() if r["regularizer.cosreg.weight"] == "0"]
    assert all(float(r["val/cosreg/loss"]) > 0 for r in baseline)  # weight 0: computed and reported, not optimised
    # Mean and std over seeds are numbers in their own columns.
    with open(grid / "report" / "seeds.csv", newline="") as handle:
        seeds = {r["regularizer.cosreg.weight"]: r for r in csv.DictReader(handle)}
    losses = [float(r["val_loss"]) for r in baseline]
    assert float(seeds["0"]["val_loss mean"]) == pytest.approx(sum(losses) / 2, rel=1e-6)
    assert float(seeds["0"]["val_loss std"]) == pytest.approx(abs(losses[0] - losses[1]) / 2**0.5, rel=1e-5)
    html = (grid / "report" / "report.html").read_text()
    assert "data:image/png;base64," in html and "mean ± standard deviation over seeds (a spread, not an" in html
    # Issue 65: every setting against its baseline (weight 0: the value that switches the swept term off)
    with open(grid / "report" / "verdicts.csv", newline="") as handle:
        verdicts = list(csv.DictReader(handle))
    assert {v["baseline"] for v in verdicts} == {"regularizer.cosreg.weight=0"}
    assert {v["setting"] for v in verdicts} == {"regularizer.cosreg.weight=1"}
    assert {v["seeds"] for v in verdicts} == {"2 + 2"} and "isotropy/embedding/mean_cosine" in {
        v["measure"] for v in verdicts}  # fmt: skip
    assert all(v["verdict"] in ("lower", "higher", "no difference shown", "cannot tell") for v in verdicts)
    assert "standardised effects against regularizer.cosreg.weight=0, every measure" in html  # one forest plot
    assert "val_perplexity against embedding IsoScore" in html
    markdown = (grid / "report" / "report.md").read_text()
    assert "regularizer=cosreg" in markdown.split("\n")[2]
    assert "- val_objective_loss (lower is better): regularizer.cosreg.weight=" in markdown
    assert "tokens_per_s (" not in markdown and "mfu (" not in markdown  # the machine's load is not crowned
    headline = markdown[markdown.index("## Headline") : markdown.index("## Figures")]
    assert "val_objective_loss mean" in headline and "tokens_per_s" not in headline and "train/" not in headline
    figures = re.findall(r"!\[([^]]+)\]\((figures/[^)]+\.png)\)", markdown)
    assert any("validation loss of the objective" in name for name, _ in figures)
    assert all((grid / "report" / path).stat().st_size > 1000 for _, path in figures)


def test_the_ranking_is_by_the_objectives_own_loss_not_loss_plus_regularizer(tmp_path: Path) -> None:
    """Before: "best val_loss" crowned a weight-0 baseline, whose val_loss leaves its regularizer out."""
    for weight, mle, cos in (("0", 4.0, 0.5), ("1", 3.9, 0.2)):
        run = tmp_path / f"w{weight}"
        run.mkdir()
        (run / "config.yaml").write_text("seed: 0\n")
        (run / "overrides.json").write_text(json.dumps([f"regularizer.cosreg.weight={weight}"]))
        summary = {
            "config": {"objective": {"mle": {"weight": 1.0}}, "regularizer": {"cosreg": {"weight": float(weight)}}},
            "final_step": 10, "val_loss": mle + float(weight) * cos, "val_terms": {"mle": mle, "cosreg": cos},
            "tokens_per_s": 1000.0 if weight == "0" else 10.0, "mfu": 0.5 if weight == "0" else 0.1,
        }  # fmt: skip
        (run / "summary.json").write_text(json.dumps(summary))
        (run / "analysis").mkdir()  # degen-analyze's numbers on the export, outliers included
        layers = [{"mean_cosine": 0.3, "self_similarity": 0.5}]
        outliers = {"max_kurtosis": 20.0 + float(weight), "max_inf_norm": 9.0, "attention_sink_rate": 55.0}
        (run / "analysis" / "metrics.json").write_text(json.dumps({"layers": layers, "outliers": outliers}))
    report([tmp_path], run_analysis=False)
    with open(tmp_path / "report" / "runs.csv", newline="") as handle:
        rows = {r["run"]: r for r in csv.DictReader(handle)}
    assert float(rows["w1"]["analysis/max_kurtosis"]) == 21 and float(rows["w0"]["analysis/attention_sink_rate"]) == 55
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "- val_objective_loss (lower is better): regularizer.cosreg.weight=1 — 3.9" in markdown
    assert "val_loss (" not in markdown and "tokens_per_s (" not in markdown


def test_rerunning_a_sweep_skips_finished_runs(grid: Path) -> None:
    stamps = {p: p.stat().st_mtime_ns for p in grid.glob("*/summary.json")}
    result = sweep(grid, "regularizer=cosreg", "regularizer.cosreg.weight=0,1", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("finished before: skipped") + result.stdout.count("finished before: skipped") == 4
    outcome = f"sweep of 4 runs in {grid}: 0 trained, 4 finished before (skipped), 0 failed; compare them: "
    assert outcome in result.stdout
    assert {p: p.stat().st_mtime_ns for p in grid.glob("*/summary.json")} == stamps


def test_rerunning_a_sweep_with_a_changed_setting_is_refused_naming_it(grid: Path) -> None:
    """Before: `optimizer.lr=0.01` added to the same command printed "finished before: skipped" four times and the
    report showed the old runs under the new setting."""
    stamps = {p: p.stat().st_mtime_ns for p in grid.glob("*/summary.json")}
    result = sweep(grid, "regularizer=cosreg", "regularizer.cosreg.weight=0,1", "seed=1,2", "optimizer.lr=0.01")
    assert result.returncode != 0
    assert "finished before with other settings (optimizer.lr: 0.0005 -> 0.01)" in result.stderr
    assert "Sweep into a new folder (hydra.sweep.dir=...)" in result.stderr
    assert {p: p.stat().st_mtime_ns for p in grid.glob("*/summary.json")} == stamps


def test_a_failed_run_is_recorded_and_the_others_finish(tmp_path: Path) -> None:
    result = sweep(tmp_path, "optimizer.lr=1e-3,-1,2e-3,3e-3")
    assert result.returncode == 1, result.stderr[-3000:]  # the others ran; the command still reports the failure
    assert f"sweep of 4 runs in {tmp_path}: 3 trained, 0 finished before (skipped), 1 failed" in result.stdout
    assert result.stdout.rstrip().endswith(f"compare them: degen-report {tmp_path}")
    failed = list(tmp_path.glob("*/failed.json"))
    assert len(failed) == 1
    assert "optimizer.lr=-1: Input should be greater than 0" in json.loads(failed[0].read_text())["error"]
    rows = report([tmp_path])["rows"]
    assert sorted(r["status"] for r in rows) == ["failed", "finished", "finished", "finished"]
    failed_row = next(r for r in rows if r["status"] == "failed")
    assert failed_row["swept:optimizer.lr"] == -1  # swept values are numbers where they are numbers


def test_sweeping_a_key_that_does_not_exist_names_it(tmp_path: Path) -> None:
    result = sweep(tmp_path, "regularizer.cosreg.weight=0.1,1")  # regularizer=none has no cosreg entry
    assert result.returncode != 0
    assert "regularizer.cosreg.weight" in result.stderr


def test_report_on_a_folder_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        report_main([str(tmp_path)])
    assert "no runs found in" in capsys.readouterr().err


def test_runs_with_different_metric_sets_leave_blank_cells(grid: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "summary.json").write_text(json.dumps({"final_step": 3, "val_loss": 9.0, "isotropy": {}}))
    runs = [*sorted(p.parent for p in grid.glob("*/summary.json"))[:1], other]
    report(runs, out=tmp_path / "report")
    with open(tmp_path / "report" / "runs.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[1]["isotropy/embedding/mean_cosine"] == "" and float(rows[1]["val_loss"]) == 9


def test_report_reads_an_offline_wandb_run(tmp_path: Path) -> None:
    run = tmp_path / "wandb_only"
    files = run / "wandb" / "offline-run-20260101_000000-abc" / "files"
    files.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    (files / "wandb-summary.json").write_text(json.dumps({"val/loss": 4.5, "_step": 10}))
    rows = report([run], out=tmp_path / "report")["rows"]
    assert rows[0]["status"] == "finished (wandb)" and rows[0]["val/loss"] == 4.5 and "_step" not in rows[0]


def test_swept_keys_are_read_by_hydras_own_parser() -> None:
    from degen_train.run.sweep import swept_keys

    argv = ["-m", "regularizer=[cosreg,tacl]", "seed=1,2", "+x=range(3)", "optimizer.lr=choice(1e-3,2e-3)", "y=z"]
    assert swept_keys(argv=argv) == {"seed", "x", "optimizer.lr"}  # a list value is one value, not a sweep


def test_the_report_renders_in_a_real_browser(grid: Path, tmp_path: Path) -> None:
    """Headless Chromium loads report.html: every image decodes, the tables are there, the screenshot is not blank."""
    import shutil

    import matplotlib.image

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    report([grid], out=tmp_path / "report")
    page = (tmp_path / "report" / "report.html").as_uri()
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
    dom = subprocess.run([*flags, "--dump-dom", page], capture_output=True, text=True, timeout=180).stdout
    images = re.search(r'data-images="(\d+)/(\d+)"', dom)
    assert images and int(images[2]) >= 3 and images[1] == images[2], dom[:2000]  # all decoded
    assert 'data-tables="3"' in dom  # the headline, every run, and the mean ± std over seeds
    shot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1400,2400", page], capture_output=True, timeout=180)
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] > 1000 and pixels[..., :3].std() > 0.05  # text, tables and plots, not a blank page


def test_compare_methods_sweeps_whole_methods_into_one_report(tmp_path: Path) -> None:
    """recipe=compare_methods: each method (objective + terms) one swept value; the report has mean ± std per
    method. Two of the seven methods and two seeds here (the recipe's own grid is 7 × 3)."""
    result = sweep(tmp_path, "recipe=compare_methods", "method=mle,agg", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    grouped = {g["swept:method"]: g for g in report([tmp_path])["grouped"]}
    assert set(grouped) == {"mle", "agg"} and all(g["seeds"] == 2 for g in grouped.values())
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("*/summary.json")]
    assert sorted(s["val_perplexity_of"] for s in summaries) == ["agg/loss", "agg/loss", "mle/loss", "mle/loss"]


@pytest.mark.parametrize(
    "method", sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "method").glob("*.yaml"))
)
def test_every_method_composes_with_compare_methods(method: str) -> None:
    from degen_train.config import load_config

    cfg = load_config(["recipe=compare_methods", f"method={method}"])
    terms = {*cfg.objective, *cfg.regularizer}
    assert method in terms or (method == "mle" and terms == {"mle"})


def test_a_joblib_sweep_runs_its_members_side_by_side_dividing_the_threads(tmp_path: Path) -> None:
    """Issue 56.4: hydra/launcher=joblib runs N members at once on one machine (hydra-joblib-launcher's loky
    processes); each member's threads=auto divides the usable CPUs by N, and the command still ends with every
    member's outcome (read from their folders: the jobs ran in other processes)."""
    import datetime
    import re as regex

    result = sweep(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"sweep of 2 runs in {tmp_path}: 2 trained, 0 finished before (skipped), 0 failed" in result.stdout
    logs = [path.read_text() for path in sorted(tmp_path.glob("*/train.log"))]
    # joblib's loky workers export OMP_NUM_THREADS = CPUs // n_jobs, which threads=auto takes; without it (another
    # backend) degen-train divides the CPUs by n_jobs itself (run/sweep.py: jobs_side_by_side)
    counts = [int(regex.search(r"CPU threads per process: (\d+) ", log).group(1)) for log in logs]
    assert len(logs) == 2 and counts == [max(1, len(os.sched_getaffinity(0)) // 2)] * 2, logs

    def span(log: str) -> tuple[datetime.datetime, datetime.datetime]:
        stamps = regex.findall(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\]", log, flags=regex.MULTILINE)
        return datetime.datetime.fromisoformat(stamps[0]), datetime.datetime.fromisoformat(stamps[-1])

    (first_start, first_end), (second_start, second_end) = sorted(span(log) for log in logs)
    assert second_start <= first_end  # at once, not one after the other


def test_a_stopped_joblib_sweep_checkpoints_its_members_and_leaves_no_process(tmp_path: Path) -> None:
    """Issue 63.8: SIGTERM to a joblib sweep's parent left its two loky workers alive minutes later (a second SIGTERM
    did nothing). Now each member writes its last.ckpt, no member starts after the signal, and no worker is left."""
    import signal
    import sys
    import time

    import psutil

    command = [str(Path(sys.executable).parent / "degen-train"), "-m", *QUICK, "trainer.max_steps=100000",
               "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2,3", "threads=1",
               f"hydra.sweep.dir={tmp_path}"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    deadline = time.monotonic() + 240
    logs = [tmp_path / f"seed={seed}" / "logs" / "metrics.csv" for seed in (1, 2)]
    while not all(log.is_file() and log.stat().st_size > 0 for log in logs):  # both members are training
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.5)
    workers = [child for child in psutil.Process(process.pid).children() if "resource_tracker" not in
               " ".join(child.cmdline())]  # fmt: skip
    assert len(workers) == 2
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=240)
    assert process.returncode == 75, err[-3000:]
    for seed in (1, 2):
        assert (tmp_path / f"seed={seed}" / "checkpoints" / "last.ckpt.meta.json").is_file(), err[-3000:]
    assert not (tmp_path / "seed=3" / "checkpoints").exists()  # no member started after the signal
    assert "2 stopped with a checkpoint" in err and "run the same command again to resume it (exit code 75)" in err
    time.sleep(1)
    assert not [w.pid for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
