"""``degen-cluster check SCRIPT``: the user's own batch script run as SLURM would run it, on N simulated nodes × M
tasks of this CPU over gloo (cluster/simulated.py), before it waits hours in a real queue.

Three jobs and one process, each a tiny model for a few updates unless the user's overrides say otherwise, dropout 0:
the job signalled with SIGUSR1 mid-step (as ``#SBATCH --signal=USR1@…`` would), requeued as SLURM requeues it (the
same job id, SLURM_RESTART_COUNT + 1) and run to its end in whatever folder the script computes; the same job left
alone; and one process holding the global batch. Then one line per check, ✔ or ✘ with its cause. Exit 0 only when
every line holds.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from degen_train.cluster import simulated

# What makes the job tiny and exact here (later overrides win, so the user's own come after these): the CPU and
# float32 instead of trainer=gpu's bf16, dropout 0 (each rank draws its own dropout: with it, 2 × 2 differs from one
# process by 4e-3), six updates, a checkpoint every three, every validation batch (a partial validation would split
# unevenly over four tasks).
TINY = ["trainer.accelerator=cpu", "trainer.precision=32-true", "model=tiny", "model.dropout=0",
        "model.attention_dropout=0", "data.block_size=128", "data.batch_size=2", "trainer.max_steps=6",
        "scheduler.total_steps=6", "trainer.val_check_interval=3", "callbacks.checkpoint.every_n_train_steps=3",
        "trainer.limit_val_batches=1.0", "export_hf=false", "callbacks.isotropy.at_end=false",
        "callbacks.throughput.count_total_flops=false", "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false", "trainer.log_every_n_steps=1"]  # fmt: skip
SIGNAL_AT = 4  # the update mid-way through which SIGUSR1 reaches every task
TOLERANCE = 1e-5  # max |Δw| of float32 runs that did the same arithmetic in another order
PROCESS_LINE = re.compile(r"process (\d+) of (\d+) \(node (\d+), local (\d+)\): (\w+), trainer\.num_nodes=(\d+) "
                          r"trainer\.devices=(\d+), run folder (\S+)")  # fmt: skip


@dataclass
class Line:
    """One check: what it checked, whether it held, and what was seen (the cause when it did not)."""

    what: str
    ok: bool
    seen: str

    def __str__(self) -> str:
        return f"{'✔' if self.ok else '✘'} {self.what}: {self.seen}"


@dataclass
class Job:
    """One simulated job: its exit code, its folder of task logs, and what its tasks said."""

    code: int
    folder: Path
    output: str
    processes: list[tuple[int, ...]] = field(default_factory=list)  # (rank, world, node, local, nodes, devices)
    strategy: set[str] = field(default_factory=set)
    run_dirs: set[str] = field(default_factory=set)
    stopped: set[int] = field(default_factory=set)
    srun_degen_train: bool = False

    @classmethod
    def of(cls, result: subprocess.CompletedProcess | None, folder: Path) -> Job:
        if result is None:
            return cls(-1, folder, "the job did not end in time (a task waiting for others that never came)")
        job = cls(result.returncode, folder, result.stdout + result.stderr)
        commands = [p.read_text() for p in folder.glob("step*.command")]
        job.srun_degen_train = any("degen-train" in c and "prepare_only=true" not in c for c in commands)
        for log in sorted(folder.glob("step*.task*.log")):
            text = log.read_text(errors="replace")
            for m in PROCESS_LINE.finditer(text):
                rank, world, node, local, strategy, nodes, devices, run_dir = m.groups()
                job.processes.append(tuple(map(int, (rank, world, node, local, nodes, devices))))
                job.strategy.add(strategy)
                job.run_dirs.add(run_dir)
            job.stopped |= {int(s) for s in re.findall(r"stopped after step (\d+)", text)}
        return job

    def tail(self) -> str:
        """The last error a task or the script printed: the cause of a job that failed."""
        texts = [self.output, *(p.read_text(errors="replace") for p in sorted(self.folder.glob("step*.task*.log")))]
        errors = [line.strip() for text in texts for line in text.splitlines()
                  if re.search(r"error|Error|exception|refused|not found", line)]  # fmt: skip
        return errors[-1][:300] if errors else self.output.strip()[-300:]


def check(script: Path, *, nodes: int, per_node: int, overrides: list[str], work: Path | None = None,
          timeout: float = 180.0) -> list[Line]:  # fmt: skip
    """The checks of ``script`` on ``nodes`` × ``per_node`` simulated tasks (module docstring), in the order a user
    reads them."""
    work = Path(work or tempfile.mkdtemp(prefix="degen-cluster-check-"))
    options = simulated.sbatch_options(script)
    lines = [_signal_line(options), _requeue_line(options)]
    arguments = [*TINY, *overrides]
    job_id = simulated.free_job_id()
    submit = work / "submitted"  # the folder sbatch ran from: the script's relative paths resolve here, every time
    submit.mkdir(parents=True, exist_ok=True)
    first = _run(script, arguments, nodes, per_node, work / "job-signalled", submit, job_id, 0, timeout,
                 SIMULATED_FAULT=f"usr1_mid_step={SIGNAL_AT}")  # fmt: skip
    lines += [_srun_line(first), _ranks_line(first, nodes, per_node), _devices_line(first, nodes, per_node)]
    lines.append(_signal_caught_line(first, job_id))
    requeued = _run(script, arguments, nodes, per_node, work / "job-requeued", submit, job_id, 1, timeout)
    lines.append(_folder_line(first, requeued))
    straight = _run(script, arguments, nodes, per_node, work / "job-straight", work / "straight-submitted",
                    simulated.free_job_id(), 0, timeout)  # fmt: skip
    one = _one_process(work / "one-process", arguments, straight)
    lines += [_same_weights_line("resumed = uninterrupted", requeued, straight),
              _same_weights_line("equal to one process holding the global batch (dropout 0)", straight, one)]
    return lines


def _run(script: Path, arguments: list[str], nodes: int, per_node: int, folder: Path, cwd: Path, job: str,
         restarts: int, timeout: float, **variables: str) -> Job:  # fmt: skip
    cwd.mkdir(parents=True, exist_ok=True)
    try:
        result = simulated.sbatch(script, arguments, nodes=nodes, per_node=per_node, job_dir=folder, job=job, cwd=cwd,
                                  restarts=restarts, timeout=timeout, name="degen-cluster-check", **variables)
    except subprocess.TimeoutExpired:
        _end_tasks(folder)
        result = None
    return Job.of(result, folder)


def _end_tasks(folder: Path) -> None:
    """A job past its time: every task of it ended (they would wait for each other forever)."""
    import os
    import signal

    for pids in folder.glob("step*.pids"):
        for pid in pids.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                continue


def _signal_line(options: dict[str, str]) -> Line:
    value = options.get("signal", "")
    ok = bool(re.match(r"^(B:)?USR[12]@\d+$", value))
    return Line("#SBATCH --signal", ok, f"--signal={value}: SIGUSR1 {value.split('@')[-1]} s before the time limit, "
                "a checkpoint written and the job requeued" if ok else "none: at its time limit SLURM kills the job "
                "without warning and the updates since the last periodic checkpoint are lost; add "
                "#SBATCH --signal=USR1@90")  # fmt: skip


def _requeue_line(options: dict[str, str]) -> Line:
    ok = "requeue" in options
    return Line("#SBATCH --requeue", ok, "the job may be requeued" if ok else "none: where the cluster's default is "
                "JobRequeue=0, `scontrol requeue` is refused and the preempted job is not run again; add "
                "#SBATCH --requeue")  # fmt: skip


def _srun_line(job: Job) -> Line:
    if job.srun_degen_train:
        return Line("degen-train runs through srun", True, "one task per device, placed by SLURM")
    return Line("degen-train runs through srun", False, "no srun step ran degen-train: without srun the script runs "
                "one process, outside the allocation's tasks; launch it as `srun degen-train ...` (the template's "
                f"last line). {job.tail()}")  # fmt: skip


def _ranks_line(job: Job, nodes: int, per_node: int) -> Line:
    world = nodes * per_node
    seen = sorted(job.processes)
    ranks = [p[0] for p in seen]
    worlds = {p[1] for p in seen}
    described = ", ".join(f"rank {p[0]} of {p[1]} on node {p[2]}" for p in seen) or "none said where it stood"
    ok = ranks == list(range(world)) and worlds == {world} and len(job.strategy) == 1
    strategy = ", ".join(sorted(job.strategy)) or "unknown"
    cause = "" if ok else f" (expected ranks 0..{world - 1} of {world}; {job.tail()})"
    return Line("ranks and world size as each task saw them", ok, f"{described}; strategy {strategy}{cause}")


def _devices_line(job: Job, nodes: int, per_node: int) -> Line:
    seen = {(p[4], p[5]) for p in job.processes}
    if seen == {(nodes, per_node)}:
        return Line("trainer.num_nodes × trainer.devices against the allocation", True,
                    f"{nodes} × {per_node}, as --nodes={nodes} --ntasks-per-node={per_node}")  # fmt: skip
    given = ", ".join(f"{n} × {d}" for n, d in sorted(seen)) or "none (the run did not start)"
    return Line("trainer.num_nodes × trainer.devices against the allocation", False,
                f"{given}, where the allocation is {nodes} node(s) × {per_node} task(s): pass "
                f"trainer.num_nodes=$SLURM_NNODES trainer.devices=$SLURM_NTASKS_PER_NODE (one task per device). "
                f"{job.tail()}")  # fmt: skip


def _signal_caught_line(job: Job, job_id: str) -> Line:
    from degen_train.storage.checkpoints import verified_step

    requeues = (job.folder / "scontrol.log").read_text().split() if (job.folder / "scontrol.log").exists() else []
    run_dir = Path(next(iter(job.run_dirs))) if len(job.run_dirs) == 1 else None
    step = verified_step(run_dir / "checkpoints" / "last.ckpt") if run_dir is not None else None
    ok = job.code == 75 and requeues == ["requeue", job_id] and len(job.stopped) == 1 and step in job.stopped
    seen = (f"exit {job.code}, every task stopped after update {sorted(job.stopped)}, last.ckpt at update {step}, "
            f"scontrol {' '.join(requeues) or 'never called'}")  # fmt: skip
    return Line("one checkpoint at the signal and one requeue", ok, seen if ok else f"{seen}. {job.tail()}")


def _folder_line(first: Job, requeued: Job) -> Line:
    before, after = sorted(first.run_dirs), sorted(requeued.run_dirs)
    if before and before == after and len(before) == 1:
        return Line("the run folder is the same across the requeue", True, f"{before[0]}, resumed there")
    return Line("the run folder is the same across the requeue", False, f"{', '.join(before) or 'none'} → "
                f"{', '.join(after) or 'none'}: the requeued job starts afresh elsewhere; build the folder from "
                f"SLURM_JOB_ID (kept across a requeue), never the time (Hydra's default outputs/DATE/TIME)")


def _one_process(folder: Path, arguments: list[str], straight: Job) -> Path | str:
    """One process holding the straight job's global batch: what every layout must equal; or why it did not run."""
    import yaml

    if len(straight.run_dirs) != 1 or not straight.processes:
        return f"the straight job left no run to size it from ({straight.tail()})"
    recorded = Path(next(iter(straight.run_dirs))) / "config.yaml"
    if not recorded.exists():
        return f"the straight job recorded no {recorded}"
    config = yaml.safe_load(recorded.read_text())
    world = straight.processes[0][1]
    global_batch = int(config["data"]["batch_size"]) * world
    shutil.rmtree(folder, ignore_errors=True)
    command = [str(Path(sys.executable).parent / "degen-train"), *arguments, f"data.batch_size={global_batch}",
               "trainer.devices=1", "trainer.num_nodes=1", "strategy=auto", "threads=1", f"hydra.run.dir={folder}"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "the one-process run did not end in 600 s"
    if result.returncode == 0:
        return folder
    errors = [line.strip() for line in (result.stdout + result.stderr).splitlines() if re.search(r"rror|refused", line)]
    return f"the one-process run exited {result.returncode}: {(errors or [result.stderr.strip()])[-1][-300:]}"


def _same_weights_line(what: str, job: Job, reference: Job | Path | str) -> Line:
    from degen_train.cluster.compare import compare

    if isinstance(reference, str):
        return Line(what, False, reference)
    mine = Path(next(iter(job.run_dirs))) if len(job.run_dirs) == 1 else None
    theirs = reference if isinstance(reference, Path) else (
        Path(next(iter(reference.run_dirs))) if len(reference.run_dirs) == 1 else None)
    if mine is None or theirs is None or job.code != 0:
        return Line(what, False, f"no finished run to compare ({job.tail()})")
    found = compare(theirs, mine)
    ok = found.max_abs <= TOLERANCE
    return Line(what, ok, f"max |Δw| {found.max_abs:.2g} (tolerance {TOLERANCE:g}; `degen-cluster compare {theirs} "
                          f"{mine}`)")  # fmt: skip


def timed(start: float) -> str:
    return f"{time.perf_counter() - start:.0f} s"
