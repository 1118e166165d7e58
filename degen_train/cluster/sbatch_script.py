"""A batch script read as SLURM reads it: its ``#SBATCH`` directives, its allocation, its ``srun degen-train`` steps
and the modules it loads, with nothing run.

sbatch reads ``#SBATCH`` lines from the top of the script until the first line that is neither a comment nor blank
(later ones are ignored, as sbatch ignores them); each is split into words as a shell would (``--signal=USR1@90``,
``--signal USR1@90``, ``-N 2``), long options by name and the short ones sbatch(1) documents by what they stand
for. The steps are the script's lines (joined across a trailing backslash) whose words run ``srun ... degen-train``;
their arguments are read unexpanded (``trainer.devices=${GPUS}`` stays a variable), so what is a literal here is
what the script fixes whatever the allocation."""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

SHORT = {"N": "nodes", "n": "ntasks", "c": "cpus-per-task", "t": "time", "G": "gpus", "J": "job-name",
         "o": "output", "e": "error", "p": "partition", "A": "account", "a": "array", "q": "qos", "w": "nodelist",
         "C": "constraint", "D": "chdir", "d": "dependency", "x": "exclude"}  # fmt: skip
FLAGS = {"requeue", "no-requeue", "exclusive", "overcommit", "hold", "contiguous", "spread-job", "use-min-nodes",
         "test-only", "parsable", "wait", "ignore-pbs", "no-kill", "oversubscribe", "reboot"}  # fmt: skip
MOST_TASKS = 64  # nodes × tasks a check may start on one machine (each task a process of degen-train)
CHECKED_NODES, CHECKED_TASKS = 2, 2  # the largest allocation a check runs by default: what a CPU can hold


class ScriptError(ValueError):
    """A batch script that cannot be read as sbatch reads it (the line and what is wrong)."""


def directives(text: str) -> dict[str, str]:
    """The script's ``#SBATCH`` options by long name ("" for a flag), in sbatch's order (a later one wins)."""
    options: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # sbatch stops at the first command
        if not stripped.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(stripped[len("#SBATCH") :], comments=True)
        except ValueError as error:
            raise ScriptError(f"line {number}: {stripped!r}: {error}") from None
        while words:
            word = words.pop(0)
            if word.startswith("--"):
                key, equals, value = word[2:].partition("=")
                if not equals and key not in FLAGS and words and not words[0].startswith("-"):
                    value = words.pop(0)
            elif word.startswith("-") and len(word) >= 2:
                key, value = SHORT.get(word[1], word[1]), word[2:]
                if not value and words and not words[0].startswith("-"):
                    value = words.pop(0)
            else:
                raise ScriptError(f"line {number}: {stripped!r}: {word!r} is no option (sbatch reads --KEY[=VALUE])")
            options[key] = value
    return options


def _count(value: str | None) -> int | None:
    """A count of sbatch's forms: ``2``, ``2-4`` (at least 2), ``a100:8`` (typed), ``gpu:a100:8``, ``8(x2)``."""
    if not value:
        return None
    found = re.match(r"^(?:gpu:)?(?:[\w.-]+:)?(\d+)(?:-\d+)?(?:\(x\d+\))?(?:,.*)?$", value.strip())
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Allocation:
    """What the script asks SLURM for: nodes, tasks a node, GPUs a node (None: none asked), CPUs a task."""

    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    time: str | None = None

    @classmethod
    def of(cls, options: dict[str, str]) -> Allocation:
        nodes = _count(options.get("nodes")) or 1
        per_node = _count(options.get("ntasks-per-node"))
        if per_node is None:
            tasks = _count(options.get("ntasks"))
            per_node = math.ceil(tasks / nodes) if tasks else 1
        gpus = None
        gres = options.get("gres", "")
        if "gpus-per-node" in options:
            gpus = _count(options["gpus-per-node"])
        elif gres.startswith("gpu"):
            gpus = _count(gres if gres.count(":") else "gpu:1")
        elif "gpus" in options:
            total = _count(options["gpus"])
            gpus = math.ceil(total / nodes) if total else None
        elif "gpus-per-task" in options:
            each = _count(options["gpus-per-task"])
            gpus = each * per_node if each else None
        return cls(nodes, per_node, gpus, _count(options.get("cpus-per-task")), options.get("time"))

    def described(self) -> str:
        gpus = f", {self.gpus_per_node} GPU(s) a node" if self.gpus_per_node else ""
        return f"{self.nodes} node(s) × {self.tasks_per_node} task(s){gpus}"

    def scaled(self, nodes: int | None = None, per_node: int | None = None) -> Allocation:
        """What this machine runs of it: at most CHECKED_NODES × CHECKED_TASKS unless asked, each task one device,
        the GPUs a node scaled with the tasks (a node of 8 tasks and 8 GPUs checked as 2 tasks and 2 GPUs)."""
        checked_nodes = nodes or min(self.nodes, CHECKED_NODES)
        checked_tasks = per_node or min(self.tasks_per_node, CHECKED_TASKS)
        gpus = None
        if self.gpus_per_node:
            gpus = max(1, round(self.gpus_per_node * checked_tasks / self.tasks_per_node))
        return Allocation(checked_nodes, checked_tasks, gpus, self.cpus_per_task, self.time)


@dataclass
class Step:
    """One ``srun ... degen-train ARGS`` line of the script: its line number and degen-train's words, unexpanded."""

    line: int
    arguments: list[str] = field(default_factory=list)

    @property
    def prepares(self) -> bool:
        return "prepare_only=true" in self.arguments

    def value(self, key: str) -> str | None:
        """The last ``KEY=VALUE`` this step gives degen-train, as written."""
        found = None
        for word in self.arguments:
            name, equals, value = word.lstrip("+~").partition("=")
            if equals and name == key:
                found = value
        return found


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, the line with its trailing-backslash continuations joined)."""
    joined, start, parts = [], 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if not parts:
            start = number
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        joined.append((start, " ".join(parts)))
        parts = []
    if parts:
        joined.append((start, " ".join(parts)))
    return joined


def steps(text: str) -> list[Step]:
    """The script's ``srun ... degen-train`` steps, in order."""
    found = []
    for number, line in logical_lines(text):
        if line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True, posix=True)
        except ValueError:
            continue
        if "srun" not in words:
            continue
        after = words[words.index("srun") + 1 :]
        program = next((i for i, w in enumerate(after) if Path(w).name == "degen-train"), None)
        if program is not None:
            found.append(Step(number, after[program + 1 :]))
    return found


def modules_loaded(text: str) -> list[str]:
    """What the script's ``module load`` / ``module add`` / ``ml`` lines load (in order)."""
    loaded = []
    for _, line in logical_lines(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if words[:1] == ["module"] and len(words) > 2 and words[1] in ("load", "add"):
            loaded += words[2:]
        elif words[:1] == ["ml"] and len(words) > 1 and not words[1].startswith("-"):
            loaded += [w for w in words[1:] if w not in ("load", "add")]
    return loaded


def calls_modules(text: str) -> bool:
    """Whether any line of the script calls ``module`` or ``ml`` at all (purge, use, load ...)."""
    return any(re.match(r"^\s*(module|ml)(\s|$)", line) for _, line in logical_lines(text))
