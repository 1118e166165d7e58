"""A SLURM cluster on one machine: ``srun`` and ``scontrol`` stand-ins that start real processes with the variables
SLURM gives each task, so that Lightning's SLURMEnvironment (not a torchrun launcher) assigns the ranks.

    degen-cluster check SCRIPT ...                                  (the user's command: cluster/check.py)
    python -m degen_train.cluster.simulated srun [--nodes=N] [--ntasks=M] COMMAND ...   (what bin/srun runs)
    python -m degen_train.cli.simulated_task ARGS ...                                   (one task of degen-train)

For Hydra's submitit launcher (one job per sweep member), ``install_scheduler`` puts ``sbatch``, ``sacct`` and
``scancel`` stand-ins on PATH: ``sbatch FILE`` reads the file's ``#SBATCH`` lines (nodes, tasks per node, the job
array), answers "Submitted batch job ID" as SLURM does, and runs each array task in the background as one job of its
own (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID); submitit learns a task finished from its result file.

``sbatch`` runs a batch script (conf/cluster/degen-train.sbatch, or your copy of it) as SLURM would on an allocation
of N nodes of M tasks: the script's own environment, stand-ins first on PATH, the job's folder (task logs, pids,
scontrol's record) printed at the end; its exit code is the script's.

The job's allocation comes from the batch script's environment, as SLURM sets it: SLURM_NNODES, SLURM_NTASKS,
SLURM_NTASKS_PER_NODE, SLURM_JOB_ID, SLURM_JOB_NAME, SLURM_NODELIST. Node k is the loopback address 127.0.0.(k+1)
(SLURM_NODELIST=127.0.0.[1-2]: Lightning takes the first as the main address, as it takes a real node list's
first host). Each task gets SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURMD_NODENAME, SLURM_STEP_ID; its output
goes to SIMULATED_SLURM_DIR/step<S>.task<R>.log, its pid to step<S>.pids. srun waits for every task and exits with
the highest exit code, as srun does; a task that fails (not 0, not 75) stops the others after a grace period, as
``srun --kill-on-bad-exit`` would, so no rank waits forever in a collective.

A fault for the preemption drills, ``SIMULATED_FAULT``: ``usr1_mid_step=N`` (rank 0, between the forward and the
backward of update N, sends SIGUSR1 to every task of the step, as ``sbatch --signal=USR1@...`` reaches every task)
or ``usr1_mid_checkpoint=N`` (rank 0, while writing the periodic checkpoint of update N).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MODULE = "degen_train.cluster.simulated"
TASK = "degen_train.cli.simulated_task"  # one task of `srun degen-train`: the drill's fault, then degen-train


def install(bin_dir: Path) -> None:
    """Write ``srun``, ``scontrol``, ``module`` and ``ml`` into ``bin_dir`` (put it first on PATH); scontrol appends
    its arguments to SIMULATED_SLURM_DIR/scontrol.log, module and ml theirs to module.log."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    (bin_dir / "srun").write_text(f'#!/bin/sh\nexec "{python}" -m {MODULE} srun "$@"\n')
    (bin_dir / "scontrol").write_text('#!/bin/sh\necho "$@" >> "$SIMULATED_SLURM_DIR/scontrol.log"\n')
    # Environment Modules / Lmod, which every HPC script calls and no CPU machine has: each call is logged, exit 0
    for name in ("module", "ml"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "$SIMULATED_SLURM_DIR/module.log"\n')
    for name in ("srun", "scontrol", "module", "ml"):
        (bin_dir / name).chmod(0o755)


def free_job_id() -> str:
    """A job id whose port (Lightning's SLURMEnvironment: 15000 + its last four digits) is free here."""
    import random
    import socket

    for _ in range(200):
        job = random.randint(1000, 9999)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", 15000 + job))
            except OSError:
                continue
        return str(job)
    raise RuntimeError("no free port in 16000-24999")


def gpu_variables(options: dict[str, str], gpus_per_node: int | None) -> dict[str, str]:
    """What SLURM exports to a job for its GPU request, by the form the script used (``--gpus-per-node``,
    ``--gres=gpu:N``, ``--gpus``, ``--gpus-per-task``), with this check's count: a script that reads one of them
    under ``set -u`` runs here as on the cluster. {} without a GPU request."""
    if not gpus_per_node:
        return {}
    import re

    found = {"SLURM_GPUS_ON_NODE": str(gpus_per_node), "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(gpus_per_node))),
             "SLURM_JOB_GPUS": ",".join(map(str, range(gpus_per_node)))}  # fmt: skip
    if "gpus-per-node" in options:  # exported as given: a typed request keeps its type (a100:8)
        kind = re.match(r"^(?:gpu:)?([A-Za-z][\w.-]*):\d", options["gpus-per-node"])
        found["SLURM_GPUS_PER_NODE"] = f"{kind.group(1)}:{gpus_per_node}" if kind else str(gpus_per_node)
    elif "gpus" in options:
        found["SLURM_GPUS"] = str(gpus_per_node)
    elif "gpus-per-task" in options:
        found["SLURM_GPUS_PER_TASK"] = options["gpus-per-task"]
    return found


def sbatch(script: Path, arguments: list[str], *, nodes: int, per_node: int, job_dir: Path, job: str | None = None,
           cwd: Path | None = None, restarts: int = 0, name: str = "simulated", timeout: float = 900,
           **variables: str) -> subprocess.CompletedProcess:  # fmt: skip
    """``sbatch --nodes=NODES --ntasks-per-node=PER_NODE SCRIPT ARGUMENTS`` on this machine, its output captured; the
    script runs in ``cwd`` (SLURM: the folder it was submitted from; default ``job_dir``), a requeued job with the
    same ``job`` id and SLURM_RESTART_COUNT=``restarts``, as SLURM keeps the id across a requeue."""
    job_dir.mkdir(parents=True, exist_ok=True)
    install(job_dir / "bin")
    cwd = cwd or job_dir
    env = {**os.environ, "PATH": f"{job_dir / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SIMULATED_SLURM_DIR": str(job_dir), "SLURM_JOB_ID": job or free_job_id(), "SLURM_JOB_NAME": name,
           "SLURM_NNODES": str(nodes), "SLURM_NTASKS_PER_NODE": str(per_node), "SLURM_NTASKS": str(nodes * per_node),
           "SLURM_NODELIST": f"127.0.0.[1-{nodes}]" if nodes > 1 else "127.0.0.1", "SLURM_RESTART_COUNT": str(restarts),
           "SLURM_SUBMIT_DIR": os.environ.get("SLURM_SUBMIT_DIR", str(cwd)),
           # the batch step is task 0 on the first node, as SLURM sets it for the script itself
           "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURMD_NODENAME": "127.0.0.1",
           **variables}  # fmt: skip
    # its own session: at the time limit the whole job ends (the script and every process it started), as SLURM's
    # does, never leaving a task that waits for the others to hold the run folder
    # Its output goes to files, not pipes: a process the script detached keeps its copy of them open, and a pipe
    # would hold the job "running" until that process ended (degen-cluster check ends it once the script has).
    out_file, err_file = job_dir / "batch.out", job_dir / "batch.err"
    with open(out_file, "w") as out, open(err_file, "w") as err:
        job = subprocess.Popen(["bash", str(script), *arguments], cwd=cwd, env=env, stdout=out, stderr=err,
                               start_new_session=True)  # fmt: skip
        try:
            job.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            raise
    read = {f: f.read_text(errors="replace") for f in (out_file, err_file)}
    return subprocess.CompletedProcess(job.args, job.returncode, read[out_file], read[err_file])


SRUN_OPTIONS_WITH_A_VALUE = ("output", "error", "nodes", "ntasks")  # as "--output FILE" (submitit writes so)


def install_scheduler(bin_dir: Path) -> None:
    """``srun`` and ``scontrol`` (install), and ``sbatch``, ``sacct``, ``scancel`` for submitit, into ``bin_dir``."""
    install(bin_dir)
    python = sys.executable
    for name, command in (("sbatch", "submit"), ("sacct", "accounting")):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{python}" -m {MODULE} {command} "$@"\n')
        (bin_dir / name).chmod(0o755)
    (bin_dir / "scancel").write_text('#!/bin/sh\necho "$@" >> "$SIMULATED_SLURM_DIR/scancel.log"\n')
    (bin_dir / "scancel").chmod(0o755)


def sbatch_options(script: Path) -> dict[str, str]:
    """The ``#SBATCH`` options of a batch script, as sbatch reads them (cluster/sbatch_script.directives)."""
    from degen_train.cluster.sbatch_script import directives

    return directives(script.read_text())


def submit(arguments: list[str]) -> int:
    """``sbatch FILE``: the job's id now, its array tasks run in a detached process (as a scheduler would)."""
    script = Path(arguments[-1]).resolve()
    job = free_job_id()
    folder = Path(os.environ["SIMULATED_SLURM_DIR"]) / f"job{job}"
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.Popen([sys.executable, "-m", MODULE, "run-job", str(script), job, str(folder)],
                     stdout=subprocess.DEVNULL, stderr=open(folder / "runner.log", "w"),  # noqa: SIM115
                     start_new_session=True, env={**os.environ})  # fmt: skip
    print(f"Submitted batch job {job}")
    return 0


def run_job(script: Path, job: str, folder: Path) -> None:
    """Each array task of ``script`` (or the one job), one after the other, as jobs of their own; each task's
    state is written to FOLDER/TASK.state for sacct."""
    options = sbatch_options(script)
    nodes, per_node = int(options.get("nodes", 1)), int(options.get("ntasks-per-node", 1))
    tasks = [None]
    if "array" in options:
        first, last = options["array"].split("%")[0].split("-")
        tasks = list(range(int(first), int(last) + 1))
    for index in tasks:
        name = job if index is None else f"{job}_{index}"
        (folder / f"{name}.state").write_text("RUNNING")
        variables = {"SLURM_JOB_NUM_NODES": str(nodes), "SLURM_JOB_NODELIST": "127.0.0.1"}
        if index is not None:
            variables |= {"SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": str(index)}
        result = sbatch(script, [], nodes=nodes, per_node=per_node, job_dir=folder / name,
                        job=job if index is None else free_job_id(), **variables)  # fmt: skip
        (folder / name / "batch.log").write_text(result.stdout + result.stderr)
        (folder / f"{name}.state").write_text("COMPLETED" if result.returncode == 0 else "FAILED")


def accounting(arguments: list[str]) -> int:
    """``sacct -o JobID,State,NodeList --parsable2 -j ID ...``: each asked job's tasks and their states."""
    asked = [arguments[i + 1] for i, a in enumerate(arguments) if a == "-j"]
    print("JobID|State|NodeList")
    root = Path(os.environ["SIMULATED_SLURM_DIR"])
    for job in asked:
        for state in sorted((root / f"job{job.split('_')[0]}").glob("*.state")):
            print(f"{state.stem}|{state.read_text()}|127.0.0.1")
    return 0


def srun(arguments: list[str]) -> int:
    options: dict[str, str] = {}
    while arguments and arguments[0].startswith("--"):
        key, _, value = arguments.pop(0)[2:].partition("=")
        if not value and key in SRUN_OPTIONS_WITH_A_VALUE:
            value = arguments.pop(0)
        options[key] = value
    nodes = int(options.get("nodes", os.environ["SLURM_NNODES"]))
    tasks = int(options.get("ntasks", nodes * int(os.environ["SLURM_NTASKS_PER_NODE"])))
    per_node = tasks // nodes
    folder = Path(os.environ["SIMULATED_SLURM_DIR"])
    step = len(list(folder.glob("step*.pids")))
    (folder / f"step{step}.command").write_text(" ".join(arguments))  # what the step ran: degen-cluster check reads it
    if Path(arguments[0]).name == "degen-train":  # one task of degen-train, with the drill's fault when one is asked
        arguments = [sys.executable, "-m", TASK, *arguments[1:]]
    addresses = f"127.0.0.[1-{nodes}]" if nodes > 1 else "127.0.0.1"
    processes = []
    for rank in range(tasks):
        node = rank // per_node
        env = {**os.environ, "SLURM_NTASKS": str(tasks), "SLURM_NNODES": str(nodes), "SLURM_NTASKS_PER_NODE":
               str(per_node), "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank % per_node), "SLURM_NODEID":
               str(node), "SLURMD_NODENAME": f"127.0.0.{node + 1}", "SLURM_NODELIST": addresses, "SLURM_STEP_ID":
               str(step), "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_STEP_NUM_NODES": str(nodes),
               "SLURM_CPUS_PER_TASK": "1"}  # fmt: skip
        log = open(folder / f"step{step}.task{rank}.log", "w")  # noqa: SIM115 - closed below
        if "output" in options:  # srun --output PATTERN (submitit's): %j the job, %t the task, %A_%a an array task
            pattern = options["output"].replace("%A", os.environ.get("SLURM_ARRAY_JOB_ID", ""))
            pattern = pattern.replace("%a", os.environ.get("SLURM_ARRAY_TASK_ID", ""))
            log = open(pattern.replace("%j", os.environ["SLURM_JOB_ID"]).replace("%t", str(rank)), "a")  # noqa: SIM115
        processes.append((subprocess.Popen(arguments, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    (folder / f"step{step}.pids").write_text("\n".join(str(p.pid) for p, _ in processes))
    failed_at = None
    while any(p.poll() is None for p, _ in processes):
        bad = [p.returncode for p, _ in processes if p.returncode not in (None, 0, 75)]
        failed_at = failed_at or (time.monotonic() if bad else None)
        if failed_at and time.monotonic() - failed_at > 30:
            for p, _ in processes:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.1)
    for _, log in processes:
        log.close()
    return max(abs(p.returncode) for p, _ in processes)


def every_task_of_this_step() -> list[int]:
    folder = Path(os.environ["SIMULATED_SLURM_DIR"])
    return [int(pid) for pid in (folder / f"step{os.environ['SLURM_STEP_ID']}.pids").read_text().split()]


def signal_every_task() -> None:
    deadline = time.monotonic() + 30
    while True:  # srun writes the pids once every task has started
        try:
            pids = every_task_of_this_step()
            break
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)


def inject(fault: str) -> None:
    """Rank 0 of the step signals every task at the fault's moment (see the module doc)."""
    name, _, value = fault.partition("=")
    step = int(value)
    if name == "usr1_mid_step":
        from degen_train.run.module import PretrainModule

        original_step = PretrainModule.training_step

        def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN202
            loss = original_step(self, batch, batch_idx)  # the forward done, the backward still to come
            if self.global_step == step and not getattr(self, "_signalled", False):
                self._signalled = True
                signal_every_task()
                time.sleep(0.5)  # the signals land while this update is in flight
            return loss

        PretrainModule.training_step = training_step
    elif name == "usr1_mid_checkpoint":
        import degen_train.storage.checkpoints as checkpoints

        original_save = checkpoints.save_checkpoint_file

        def save_checkpoint_file(checkpoint, path):  # noqa: ANN001, ANN202
            if Path(path).name == f"step={step:08d}.ckpt":
                signal_every_task()
                time.sleep(0.5)  # the others wait in the checkpoint's barrier while it is written
            original_save(checkpoint, path)

        checkpoints.save_checkpoint_file = save_checkpoint_file
    else:
        raise ValueError(f"SIMULATED_FAULT={fault}: usr1_mid_step=N or usr1_mid_checkpoint=N")


ENTRIES = ("srun", "submit", "accounting", "run-job")  # what the stand-ins run; a user's door: degen-cluster

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ENTRIES:  # never a default training run (issue 66)
        sys.exit(f"{MODULE} runs the simulated cluster's stand-ins ({', '.join(ENTRIES)}); to check a batch script "
                 f"use: degen-cluster check SCRIPT --nodes N --ntasks-per-node M [KEY=VALUE ...]")  # fmt: skip
    if sys.argv[1] == "srun":
        sys.exit(srun(sys.argv[2:]))
    if sys.argv[1] == "submit":
        sys.exit(submit(sys.argv[2:]))
    if sys.argv[1] == "accounting":
        sys.exit(accounting(sys.argv[2:]))
    if sys.argv[1] == "run-job":
        run_job(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
        sys.exit(0)

