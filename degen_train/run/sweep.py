"""Runs inside a Hydra multirun: skip what finished, resume what did not, record failures and go on."""

from __future__ import annotations

import logging
import math
import os
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from degen_train.core.exit_codes import PREEMPTED_EXIT
from degen_train.core.io import atomic_write_json, cache_key

log = logging.getLogger("degen_train.run.sweep")
FAILED = "failed.json"
# What became of each job of this process's sweep, for the line the sweep ends with; a failure makes the command exit
# non-zero.
SWEEP_OUTCOMES: dict[str, list[str]] = {"trained": [], "skipped": [], "failed": [], "stopped": []}
FAILED_RUNS = SWEEP_OUTCOMES["failed"]
# This process's launch: its sweep folder and when it started (SweepFolderCheck), so a launcher that runs the jobs in
# other processes (hydra/launcher=joblib) still ends with their outcomes, read from their folders.
LAUNCH: dict[str, Any] = {"dir": None, "started": None}


class SweepFolderCheck(Callback):
    """A Hydra callback (conf/hydra/default.yaml): before the sweeper writes anything (multirun.yaml first), the sweep
    folder Hydra resolved is checked for links (storage/runlock.py), the same check as a command line's
    ``hydra.sweep.dir``, for a folder named by a config or an interpolation. A refusal is one line and exit 2. A
    multirun.yaml an earlier launch wrote there is kept beside it, named by when it was written (Hydra would
    overwrite it: a second sweep into the same folder lost the first one's record)."""

    def on_multirun_start(self, config: DictConfig, **_: Any) -> None:
        import sys

        from degen_train.storage.runlock import refuse_links_in_sweep

        folder = Path(str(config.hydra.sweep.dir))
        try:
            refuse_links_in_sweep(folder)
        except ValueError as error:
            print(f"degen-train: error: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        keep_earlier_launch(folder)
        LAUNCH["dir"], LAUNCH["started"] = folder, time.time()
        if "joblib" in str(OmegaConf.select(config, "hydra.launcher._target_", default="")):  # members in workers
            from degen_train.run.sweep_stop import forward_stop_signals

            forward_stop_signals()
        announce_plan(config, folder)
        # A member started by a launcher in a process of its own (submitit's job: `python -m submitit.core._submit`)
        # has no command line to read its swept keys from: it inherits them here, as SLURM exports the submitting
        # environment to a job (issue 56.4: every member of a submitit sweep wrote into SWEEP/run).
        import os

        os.environ[SWEPT_KEYS_VARIABLE] = ",".join(sorted(swept_keys(config)))


def announce_plan(config: DictConfig, folder: Path) -> None:
    """The sweep's size and the members side by side, in the environment its members inherit: the first to time
    its steps says what the sweep will cost (callbacks/sweep_eta.py)."""
    import json

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from degen_train.callbacks.sweep_eta import MARKER, PLAN_VARIABLE

    members = OmegaConf.select(config, "hydra.sweeper.n_trials")  # a search: its trials
    if members is None:
        members = 1
        task = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
        for override in OverridesParser.create().parse_overrides(list(task)):
            if override.is_sweep_override():
                members *= len(list(override.sweep_string_iterator()))
    jobs = 1
    if "joblib" in str(OmegaConf.select(config, "hydra.launcher._target_", default="")):
        jobs = int(OmegaConf.select(config, "hydra.launcher.n_jobs", default=1) or 1)
        jobs = min(jobs if jobs > 0 else (os.cpu_count() or 1), int(members))
    os.environ[PLAN_VARIABLE] = json.dumps({"members": int(members), "jobs": jobs, "dir": str(folder)})
    (folder / MARKER).unlink(missing_ok=True)  # each launch says its own estimate


def keep_earlier_launch(folder: Path) -> Path | None:
    """SWEEP/multirun.yaml of an earlier launch moved to SWEEP/multirun.YYYYMMDD-HHMMSS[-N].yaml (its own write time),
    so each launch's record is kept; returns where it went, None when there was none."""
    import datetime

    record = folder / "multirun.yaml"
    if not record.is_file():
        return None
    stamp = datetime.datetime.fromtimestamp(record.stat().st_mtime).strftime("%Y%m%d-%H%M%S")
    target, number = folder / f"multirun.{stamp}.yaml", 1
    while target.exists():
        number += 1
        target = folder / f"multirun.{stamp}-{number}.yaml"
    os.replace(record, target)
    log.info("the earlier launch's multirun.yaml is kept as %s", target.name)
    return target


def jobs_side_by_side() -> int:
    """How many jobs of this sweep run at once on this machine: hydra/launcher=joblib's n_jobs (-1 or 0: every
    usable CPU), else 1. Each job's threads=auto divides the CPUs by it, so jobs × threads stay within the cores."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
    except (ImportError, ValueError):
        return 1
    launcher = hydra_cfg.launcher
    if hydra_cfg.mode != RunMode.MULTIRUN or "joblib" not in str(launcher.get("_target_", "")):
        return 1
    jobs = int(launcher.get("n_jobs") or -1)
    if jobs <= 0:
        from degen_train.devices.threads import usable_cpus

        jobs = usable_cpus().count
    return max(1, jobs)


SWEPT_KEYS_VARIABLE = "DEGEN_TRAIN_SWEPT_KEYS"  # the sweep's swept keys, for members launched in processes of their own


def swept_keys(root: Any = None, argv: list[str] | None = None) -> set[str]:
    """Keys that take several values in this sweep, as Hydra's own override parser reads the command line
    (``seed=1,2``, ``x=range(3)``: swept; ``regularizer=[cosreg,tacl]``: one list value), plus the sweeper's params.
    A process without the sweep's command line (a submitit job) reads them from SWEPT_KEYS_VARIABLE."""
    import os
    import sys

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args = [a for a in (sys.argv[1:] if argv is None else argv) if "=" in a and not a.startswith("-")]
    keys = set()
    inherited = os.environ.get(SWEPT_KEYS_VARIABLE)
    if argv is None and not args and inherited:
        keys |= set(inherited.split(","))
    parser = OverridesParser.create()
    for arg in args:
        try:
            (override,) = parser.parse_overrides([arg])
        except HydraException:  # Hydra itself reports a malformed override; it is not ours to judge here
            continue
        if override.is_sweep_override():
            keys.add(override.get_key_element().lstrip("+~"))
    params = OmegaConf.select(root, "hydra.sweeper.params") if root is not None else None
    if params:
        keys |= {str(k).lstrip("+~") for k in params}
    return keys


def run_name(overrides: Any, *, _root_: Any = None) -> str:
    """A sweep job's folder name: its swept key=value pairs only (stable across reruns, short)."""
    swept = swept_keys(_root_)
    parts = sorted(str(o) for o in overrides if str(o).split("=", 1)[0].lstrip("+~") in swept)
    name = ",".join(parts).replace("/", "_") or "run"
    if len(name) > 150:
        name = name[:130] + "-" + cache_key(name)[:8]
    return name


OmegaConf.register_new_resolver("dt.run_name", run_name, replace=True)


def swept_overrides() -> list[str]:
    """The command-line/sweeper overrides that define this run (Hydra's task overrides)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return [str(o) for o in HydraConfig.get().overrides.task]


def run_in_sweep(cfg: DictConfig, train: Callable[[DictConfig], dict[str, Any]]) -> float | None:
    """One job of a sweep. A failure is written to RUN/failed.json and does not stop the other jobs."""
    # a member's run loads the frameworks anyway; the sweep's own callback (Hydra's, at start) needs none of them
    from degen_train.callbacks.preemption import PreparationStopped, RunPreempted
    from degen_train.run.resume import finished_summary
    from degen_train.run.sweep_stop import in_worker, worker_stopped

    run_dir = Path(cfg.run_dir)
    if in_worker():  # a joblib worker of a sweep that was stopped: no member starts after the signal
        log.info("%s not started: the sweep was stopped", run_dir)
        return None
    done = finished_summary(run_dir, OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    if done is not None:
        log.info("%s finished before: skipped", run_dir)
        SWEEP_OUTCOMES["skipped"].append(str(run_dir))
        return search_objective(done, cfg.search)
    if cfg.ckpt_path is None:  # a run stopped before the end resumes from its newest good checkpoint
        with open_dict(cfg):
            cfg.ckpt_path = "auto"
    (run_dir / FAILED).unlink(missing_ok=True)
    from degen_train.callbacks import sweep_eta

    sweep_eta.member_started()
    try:
        summary = train(cfg)
    except (RunPreempted, PreparationStopped) as preempted:  # not a failure: the sweep stops, resumable as it was
        print(
            f"degen-train: the sweep was interrupted in {run_dir} ({preempted}); the runs after it did not start. "
            f"Run the same command again to resume it and go on (exit code {PREEMPTED_EXIT})"
        )
        if worker_stopped(signal.SIGTERM):  # a joblib worker returns: loky reads an exit as a dead worker
            SWEEP_OUTCOMES["stopped"].append(str(run_dir))
            return None
        raise SystemExit(PREEMPTED_EXIT) from None
    except Exception as error:  # noqa: BLE001 - one bad run must not end the sweep
        log.error("run %s failed: %s", run_dir, error)
        FAILED_RUNS.append(str(run_dir))
        atomic_write_json(
            run_dir / FAILED,
            {
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(),
                "overrides": swept_overrides(),
            },
        )
        return None
    SWEEP_OUTCOMES["trained"].append(str(run_dir))
    sweep_eta.member_finished()
    return search_objective(summary, cfg.search)


def outcomes_of_launch() -> None:
    """Fill SWEEP_OUTCOMES from the launch's folder when its jobs ran in other processes (joblib, submitit): a run
    folder with a failed.json written since the launch started failed, one with a summary.json written since
    trained, one with an older summary.json was skipped."""
    if any(SWEEP_OUTCOMES.values()) or LAUNCH["dir"] is None:
        return
    started = float(LAUNCH["started"]) - 1  # file times are whole seconds on some filesystems
    for config in sorted(Path(LAUNCH["dir"]).glob("*/config.yaml")):
        run, failed, summary = config.parent, config.parent / FAILED, config.parent / "summary.json"
        last = run / "checkpoints" / "last.ckpt"
        if failed.is_file() and failed.stat().st_mtime >= started:
            SWEEP_OUTCOMES["failed"].append(str(run))
        elif summary.is_file():
            SWEEP_OUTCOMES["trained" if summary.stat().st_mtime >= started else "skipped"].append(str(run))
        elif last.is_file() and last.stat().st_mtime >= started:  # stopped on a signal, its checkpoint written
            SWEEP_OUTCOMES["stopped"].append(str(run))


def sweep_summary_line() -> str | None:
    """'sweep of 4 runs in DIR: 3 trained, 1 finished before (skipped), 0 failed; compare them: degen-report DIR', or
    None when no sweep ran in this process."""
    outcomes_of_launch()
    runs = [run for outcome in SWEEP_OUTCOMES.values() for run in outcome]
    if not runs:
        return None
    folder = Path(os.path.commonpath(runs)) if len(runs) > 1 else Path(runs[0]).parent
    counts = ", ".join(
        f"{len(SWEEP_OUTCOMES[k])} {label}"
        for k, label in (("trained", "trained"), ("skipped", "finished before (skipped)"), ("failed", "failed"),
                         ("stopped", "stopped with a checkpoint")) if k != "stopped" or SWEEP_OUTCOMES[k]
    )
    failed = " (see RUN/failed.json: " + ", ".join(SWEEP_OUTCOMES["failed"]) + ")" if FAILED_RUNS else ""
    took = ""
    if LAUNCH["started"] is not None and SWEEP_OUTCOMES["trained"]:  # the estimates checked against the sweep's time
        from degen_train.callbacks.sweep_eta import duration, estimates_said

        said = estimates_said(Path(LAUNCH["dir"])) if LAUNCH["dir"] is not None else ""
        took = f"; it took {duration(time.time() - float(LAUNCH['started']))}" + (f" ({said})" if said else "")
    return f"sweep of {len(runs)} runs in {folder}: {counts}{failed}{took}; compare them: degen-report {folder}"


def search_objective(summary: dict[str, Any], search: Any) -> float:
    """What a search minimises: ``search.metric`` + cosine_weight · mean cosine, or +inf above cosine_bound."""
    value = summary.get(search.metric)
    if value is None:
        value = summary.get("val_metrics", {}).get(search.metric)
    if value is None:
        return math.inf
    cosine = summary.get("isotropy", {}).get("isotropy/embedding/mean_cosine")
    if cosine is not None:
        if search.cosine_bound is not None and cosine > search.cosine_bound:
            return math.inf
        value += search.cosine_weight * cosine
    return float(value)
