"""``degen-cluster check SCRIPT``: the user's own batch script run as SLURM would run it, on simulated nodes × tasks
of this CPU over gloo (cluster/simulated.py), before it waits hours in a real queue.

First what the script says, read as sbatch reads it (cluster/sbatch_script.py): its ``#SBATCH`` signal and requeue,
its allocation against the ``trainer.devices`` / ``trainer.num_nodes`` its steps give, the modules it loads (stood
in). Then the script's own job made tiny (cluster/tiny_job.py: its recipe kept, a tiny model of its family, the
builtin corpus, six updates, dropout 0), on its allocation scaled to this machine, three times and once alone: the
job signalled with SIGUSR1 mid-step (as ``#SBATCH --signal=USR1@…`` would), requeued as SLURM requeues it (the same
job id, SLURM_RESTART_COUNT + 1) and run to its end in whatever folder the script computes; the same job left alone;
and one process holding the global batch, from the same words the job's tasks ran. One line per check, ✔ or ✘
with what it compared or its cause; a job that never trained is one line with its cause, and the checks that needed
it are not run. Exit 0 only when every line holds. Every process a job starts ends with it (cluster/reaper.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from degen_train.cluster import simulated
from degen_train.cluster.sbatch_script import MOST_TASKS, Allocation, Step, calls_modules, directives, modules_loaded
from degen_train.cluster.sbatch_script import steps as script_steps
from degen_train.cluster.tiny_job import CHECK_VARIABLE, TINY, key_of, tiny_model

SIGNAL_AT = 4  # the update mid-way through which SIGUSR1 reaches every task
TOLERANCE = 1e-5  # max |Δw| of float32 runs that did the same arithmetic in another order
LIMIT = 600.0  # seconds the first job may take unless --limit says otherwise
LATER_LIMIT = (3.0, 120.0)  # each later job: 3 × the first job's time, at least 120 s (never above the limit)
SCRIPT_BYTES = 1_000_000  # a batch script longer than this is no batch script
PROCESS_LINE = re.compile(r"process (\d+) of (\d+) \(node (\d+), local (\d+)\): (\w+), trainer\.num_nodes=(\d+) "
                          r"trainer\.devices=(\d+), run folder (\S+)")  # fmt: skip
RESUMED_LINE = re.compile(r"ckpt_path=\w+: resuming from (\S+) at update (\d+)")


@dataclass
class Line:
    """One check: what it checked, whether it held, and what was seen (the cause when it did not)."""

    what: str
    ok: bool
    seen: str

    def __str__(self) -> str:
        return f"{'✔' if self.ok else '✘'} {self.what}: {self.seen}"


@dataclass
class Plan:
    """What the script says and what the check will run of it, before anything runs."""

    script: Path
    options: dict[str, str]
    allocation: Allocation
    checked: Allocation
    steps: list[Step]
    modules: list[str]
    calls_modules: bool
    limit: float
    own_data: bool = False
    overrides: list[str] = field(default_factory=list)

    def said(self) -> list[str]:
        """The lines said before the jobs run: the scaling, the tiny job, the time limit."""
        corpus = "the script's own corpus (--own-data)" if self.own_data else "the builtin corpus (--own-data: yours)"
        return [f"the script asks for {self.allocation.described()}; checked as {self.checked.described()} here, "
                f"each task one device of this CPU (--nodes / --ntasks-per-node to choose)",
                f"the tiny job: the script's own degen-train arguments, its model the tiny one of its family, "
                f"{corpus}, 6 updates, dropout 0",
                f"each job's limit: {self.limit:.0f} s for the first (--limit SECONDS), then {LATER_LIMIT[0]:g} × "
                f"its time, at least {LATER_LIMIT[1]:.0f} s"]  # fmt: skip


def plan(script: Path, *, nodes: int | None = None, per_node: int | None = None, overrides: list[str] | None = None,
         limit: float = LIMIT, own_data: bool = False) -> Plan:  # fmt: skip
    """The script read (ScriptError or ValueError naming what does not fit), nothing run."""
    size = script.stat().st_size
    if size > SCRIPT_BYTES:
        raise ValueError(f"{script}: {size:,} bytes, more than the {SCRIPT_BYTES:,} of any batch script")
    text = script.read_text(errors="replace")
    options = directives(text)
    allocation = Allocation.of(options)
    checked = allocation.scaled(nodes, per_node)
    if checked.nodes * checked.tasks_per_node > MOST_TASKS:
        raise ValueError(f"{checked.nodes} node(s) × {checked.tasks_per_node} task(s) = "
                         f"{checked.nodes * checked.tasks_per_node} processes: a check starts at most {MOST_TASKS} on "
                         f"one machine; give --nodes and --ntasks-per-node with a smaller product")  # fmt: skip
    return Plan(script, options, allocation, checked, script_steps(text), modules_loaded(text), calls_modules(text),
                float(limit), own_data, list(overrides or []))  # fmt: skip


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
    resumed: set[tuple[str, int]] = field(default_factory=set)  # (checkpoint, its update) each task resumed from
    commands: list[str] = field(default_factory=list)
    srun_degen_train: bool = False
    seconds: float = 0.0
    limit: float | None = None  # set when the job ran past its limit
    left_running: list[str] = field(default_factory=list)  # processes the job left, ended by the check

    @classmethod
    def of(cls, result: subprocess.CompletedProcess | None, folder: Path, *, seconds: float = 0.0,
           limit: float | None = None) -> Job:  # fmt: skip
        job = cls(-1, folder, "") if result is None else cls(result.returncode, folder, result.stdout + result.stderr)
        job.seconds, job.limit = seconds, limit if result is None else None
        job.commands = [p.read_text(errors="replace") for p in sorted(folder.glob("step*.command"))]
        job.srun_degen_train = any("degen-train" in c and "prepare_only=true" not in c for c in job.commands)
        for log in sorted(folder.glob("step*.task*.log")):
            text = log.read_text(errors="replace")
            for m in PROCESS_LINE.finditer(text):
                rank, world, node, local, strategy, nodes, devices, run_dir = m.groups()
                job.processes.append(tuple(map(int, (rank, world, node, local, nodes, devices))))
                job.strategy.add(strategy)
                job.run_dirs.add(run_dir)
            job.stopped |= {int(s) for s in re.findall(r"stopped after step (\d+)", text)}
            job.resumed |= {(path, int(step)) for path, step in RESUMED_LINE.findall(text)}
        return job

    def tail(self) -> str:
        """The last error a task or the script printed: the cause of a job that failed."""
        texts = [self.output, *(p.read_text(errors="replace") for p in sorted(self.folder.glob("step*.task*.log")))]
        errors = [line.strip() for text in texts for line in text.splitlines()
                  if re.search(r"error|Error|exception|refused|not found|No such", line)]  # fmt: skip
        if errors:
            return errors[-1][:300]
        last = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
        return last[-1][:300] if last else "it printed nothing"

    def never_trained(self) -> str | None:
        """Why no task of the job started training (one cause, the script's or a task's own line), or None."""
        if self.processes:
            return None
        ran = f" (it ran past its limit of {self.limit:.0f} s: --limit SECONDS)" if self.limit else ""
        if not self.commands:
            return (f"the script ended (exit {self.code}) before its first srun{ran}; its last line: "
                    f"{self.tail()}")  # fmt: skip
        if not self.srun_degen_train:
            steps = "; ".join(c[:80] for c in self.commands)
            return (f"no srun step ran degen-train (its steps ran: {steps}){ran}: without srun the script runs one "
                    f"process, outside the allocation's tasks; launch it as `srun degen-train ...`. {self.tail()}")
        return f"no task reached the start of training (exit {self.code}){ran}; the last line: {self.tail()}"


def check(planned: Plan, *, work: Path | None = None) -> list[Line]:
    """The checks of the planned script (module docstring), in the order a user reads them. ``work``: a folder of
    the check's own (created; the CLI has refused one that exists and is not empty)."""
    import tempfile

    from degen_train.cluster.reaper import become_subreaper

    work = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="degen-cluster-check-"))
    work.mkdir(parents=True, exist_ok=True)
    reaping = become_subreaper()
    lines = [_signal_line(planned.options), _requeue_line(planned.options), allocation_line(planned)]
    if planned.calls_modules:
        loaded = ", ".join(planned.modules) or "nothing (module called without load)"
        lines.append(Line("module / ml stood in", True, f"each call logged and answered with exit 0; the script "
                          f"loads {loaded}: have them on the cluster"))  # fmt: skip
    nodes, per_node = planned.checked.nodes, planned.checked.tasks_per_node
    job_id = simulated.free_job_id()
    submit = work / "submitted"  # the folder sbatch ran from: the script's relative paths resolve here, every time
    first = _run(planned, work / "job-signalled", submit, job_id, 0, planned.limit,
                 SIMULATED_FAULT=f"usr1_mid_step={SIGNAL_AT}")  # fmt: skip
    cause = first.never_trained()
    if cause:
        return [*lines, Line("the job trained", False, cause), _left_line([first], reaping)]
    lines += [_tiny_job_line(first), _srun_line(first), _ranks_line(first, nodes, per_node),
              _devices_line(first, nodes, per_node)]  # fmt: skip
    checkpoint_step = _checkpoint_step(first)  # read before the requeued job writes its own
    lines.append(_signal_caught_line(first, job_id, checkpoint_step))
    later = min(planned.limit, max(LATER_LIMIT[0] * first.seconds, LATER_LIMIT[1]))
    requeued = _run(planned, work / "job-requeued", submit, job_id, 1, later)
    lines.append(_folder_line(first, requeued))
    straight = _run(planned, work / "job-straight", work / "straight-submitted", simulated.free_job_id(), 0, later)
    one = _one_process(work / "one-process", straight, later)
    lines += [_resumed_line(first, requeued, straight, checkpoint_step),
              _same_weights_line("equal to one process holding the global batch (dropout 0)", straight, one),
              _left_line([first, requeued, straight], reaping)]  # fmt: skip
    return lines


def _run(planned: Plan, folder: Path, cwd: Path, job: str, restarts: int, limit: float, **variables: str) -> Job:
    from degen_train.cluster.reaper import end_descendants

    cwd.mkdir(parents=True, exist_ok=True)
    checked = planned.checked
    variables |= simulated.gpu_variables(planned.options, checked.gpus_per_node)
    variables[CHECK_VARIABLE] = json.dumps({"user": planned.overrides, "own_data": planned.own_data})
    start = time.perf_counter()
    try:
        result = simulated.sbatch(planned.script, [], nodes=checked.nodes, per_node=checked.tasks_per_node,
                                  job_dir=folder, job=job, cwd=cwd, restarts=restarts, timeout=limit,
                                  name="degen-cluster-check", **variables)  # fmt: skip
    except subprocess.TimeoutExpired:
        result = None
    seconds = time.perf_counter() - start
    left = end_descendants()
    found = Job.of(result, folder, seconds=seconds, limit=limit)
    found.left_running = left
    return found


def _tiny_job_line(job: Job) -> Line:
    """What the job's training tasks ran: the script's own words made tiny (cluster/tiny_job.py)."""
    what = "the tiny job is the script's own"
    ran = [p for p in sorted(job.folder.glob("step*.task0.argv.json")) if "prepare_only=true" not in p.read_text()]
    if not ran:
        return Line(what, False, "no training task recorded the words it ran")
    words = json.loads(ran[-1].read_text())
    tiny = set(TINY)
    own = [w for w in words if w not in tiny and not w.startswith(("model=", "data="))]
    model = next((w for w in words if w.startswith("model=")), "model=?")
    _, why = tiny_model([w for w in words if not w.startswith("model=")])
    return Line(what, True, f"its words {' '.join(own)[:300]}; {model} ({why.split('(', 1)[1]}")


def _left_line(jobs: list[Job], reaping: bool) -> Line:
    left = [command for job in jobs for command in job.left_running]
    what = "every process a job started ended with it"
    if not reaping:
        return Line(what, True, "not vouched for: this kernel offers no child subreaper (prctl), so a process a "
                    "script detached (setsid) would outlive the check unseen")  # fmt: skip
    if left:
        return Line(what, False, f"{len(left)} process(es) outlived their job and were ended by the check: "
                    f"{'; '.join(left[:3])}; on the cluster SLURM ends them with the job, but they hold the node's "
                    f"memory and devices until then: wait for what the script starts")  # fmt: skip
    return Line(what, True, "none was left after any job (the check is the subreaper of what the script detaches)")


def allocation_line(planned: Plan) -> Line:
    """The script's #SBATCH allocation against the trainer.devices / trainer.num_nodes its training steps give."""
    what = "#SBATCH allocation against trainer.devices × trainer.num_nodes"
    allocation = planned.allocation
    training = [s for s in planned.steps if not s.prepares]
    if not training:
        return Line(what, True, "no srun degen-train step found in the script's text to compare (the jobs show "
                    "what ran)")  # fmt: skip
    problems, seen = [], []
    for step in training:
        for key, asked, option in (("trainer.devices", allocation.tasks_per_node, "--ntasks-per-node"),
                                   ("trainer.num_nodes", allocation.nodes, "--nodes")):  # fmt: skip
            value = step.value(key)
            if value is None:
                seen.append(f"{key} not given (Lightning takes SLURM's)")
            elif value.isdigit() and int(value) != asked:
                problems.append(f"line {step.line}: {key}={value} where #SBATCH {option}={asked}: one task per "
                                f"device, so {'the job hangs or idles devices' if key == 'trainer.devices' else 'the ranks do not add up'}; "  # noqa: E501
                                f"pass {key}=${{SLURM_{'NTASKS_PER_NODE' if key == 'trainer.devices' else 'NNODES'}}}")
            else:
                seen.append(f"{key}={value}")
    gpus = allocation.gpus_per_node
    if gpus and gpus != allocation.tasks_per_node:
        problems.append(f"#SBATCH asks for {gpus} GPU(s) a node but {allocation.tasks_per_node} task(s) a node: "
                        f"degen-train runs one task per GPU; set --ntasks-per-node={gpus}")  # fmt: skip
    if problems:
        return Line(what, False, "; ".join(problems))
    return Line(what, True, f"{allocation.described()}; the steps give {', '.join(dict.fromkeys(seen))}")


def _signal_line(options: dict[str, str]) -> Line:
    value = options.get("signal", "")
    ok = bool(re.match(r"^(B:|R:|RB:|BR:)?(SIG)?USR[12]@\d+$", value))
    return Line("#SBATCH --signal", ok, f"--signal={value}: SIGUSR1 {value.split('@')[-1]} s before the time limit, "
                "a checkpoint written and the job requeued" if ok else (f"--signal={value} is not USR1@SECONDS: "
                if value else "none: ") + "at its time limit SLURM kills the job without warning and the updates "
                "since the last periodic checkpoint are lost; add #SBATCH --signal=USR1@90")  # fmt: skip


def _requeue_line(options: dict[str, str]) -> Line:
    ok = "requeue" in options and "no-requeue" not in options
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
                    f"{nodes} × {per_node}, as the checked --nodes={nodes} --ntasks-per-node={per_node}")  # fmt: skip
    given = ", ".join(f"{n} × {d}" for n, d in sorted(seen)) or "none (the run did not start)"
    return Line("trainer.num_nodes × trainer.devices against the allocation", False,
                f"{given}, where the allocation is {nodes} node(s) × {per_node} task(s): pass "
                f"trainer.num_nodes=$SLURM_NNODES trainer.devices=$SLURM_NTASKS_PER_NODE (one task per device). "
                f"{job.tail()}")  # fmt: skip


def _run_dir(job: Job) -> Path | None:
    return Path(next(iter(job.run_dirs))) if len(job.run_dirs) == 1 else None


def _checkpoint_step(job: Job) -> int | None:
    from degen_train.storage.checkpoints import verified_step

    run_dir = _run_dir(job)
    return verified_step(run_dir / "checkpoints" / "last.ckpt") if run_dir is not None else None


def _signal_caught_line(job: Job, job_id: str, step: int | None) -> Line:
    requeues = (job.folder / "scontrol.log").read_text().split() if (job.folder / "scontrol.log").exists() else []
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


def _resumed_line(first: Job, requeued: Job, straight: Job, step: int | None) -> Line:
    """Holds only when the requeued job resumed from the signalled job's checkpoint at its update, in its folder,
    and then ended with the weights of the job left alone (equal weights alone prove nothing: a job that started
    afresh trains the same six updates)."""
    what = "resumed = uninterrupted"
    run_dir = _run_dir(first)
    expected = (str(run_dir / "checkpoints" / "last.ckpt"), step) if run_dir is not None and step else None
    if expected is None:
        return Line(what, False, f"the signalled job left no verified checkpoint to resume from ({first.tail()})")
    if expected not in requeued.resumed:
        said = ", ".join(f"{p} at update {s}" for p, s in sorted(requeued.resumed)) or "started afresh"
        cause = f" (exit {requeued.code}: {requeued.tail()})" if requeued.code != 0 else ""
        return Line(what, False, f"the requeued job did not resume from {expected[0]} at update {step}: it {said}"
                    f"{cause}; equal weights would prove nothing: a job started afresh trains the same updates")
    compared = _same_weights_line(what, requeued, straight)
    return Line(what, compared.ok, f"resumed from {expected[0]} at update {step}; {compared.seen}")


def _one_process(folder: Path, straight: Job, limit: float) -> Path | str:
    """One process holding the straight job's global batch, from the words its training tasks ran (the script's
    arguments made tiny): what every layout must equal; or why it did not run. ``folder`` is new (the check's)."""
    import yaml

    if len(straight.run_dirs) != 1 or not straight.processes:
        return f"the straight job left no run to size it from ({straight.tail()})"
    recorded = Path(next(iter(straight.run_dirs))) / "config.yaml"
    ran = [p for p in sorted(straight.folder.glob("step*.task0.argv.json"))
           if "prepare_only=true" not in p.read_text()]  # fmt: skip
    if not recorded.exists() or not ran:
        return f"the straight job recorded no {recorded if not recorded.exists() else 'words its tasks ran'}"
    config = yaml.safe_load(recorded.read_text())
    world = straight.processes[0][1]
    global_batch = int(config["data"]["batch_size"]) * world
    ours = [f"data.batch_size={global_batch}", "trainer.devices=1", "trainer.num_nodes=1", "strategy=auto",
            "threads=1", f"hydra.run.dir={folder}", "ckpt_path=null"]  # fmt: skip
    replaced = {key_of(w) for w in ours}
    words = [w for w in json.loads(ran[-1].read_text()) if key_of(w) not in replaced]
    command = [str(Path(sys.executable).parent / "degen-train"), *words, *ours]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # one process, no SLURM
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=limit, env=environment)
    except subprocess.TimeoutExpired:
        return f"the one-process run did not end in {limit:.0f} s"
    if result.returncode == 0:
        return folder
    errors = [line.strip() for line in (result.stdout + result.stderr).splitlines() if re.search(r"rror|refused", line)]
    return f"the one-process run exited {result.returncode}: {(errors or [result.stderr.strip()])[-1][-300:]}"


def _same_weights_line(what: str, job: Job, reference: Job | Path | str) -> Line:
    from degen_train.cluster.compare import compare

    if isinstance(reference, str):
        return Line(what, False, reference)
    mine = _run_dir(job)
    theirs = reference if isinstance(reference, Path) else _run_dir(reference)
    if mine is None or theirs is None or job.code != 0:
        return Line(what, False, f"no finished run to compare ({job.tail()})")
    found = compare(theirs, mine)
    ok = found.max_abs <= TOLERANCE
    return Line(what, ok, f"max |Δw| {found.max_abs:.2g} (tolerance {TOLERANCE:g}; `degen-cluster compare {theirs} "
                          f"{mine}`)")  # fmt: skip

