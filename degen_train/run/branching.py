"""``branch_from=RUN@STEP``: a new run that starts from RUN's checkpoint at STEP (weights, optimizer state, data
position, random state) with its own schedule — one stable warm-up–stable–decay run, many cooldowns.

A branch is a resume into another folder that may change the schedule (``scheduler.*``, and the run's length) and,
as any resume, the weights of the parent's terms (a term trained at weight 0 in the parent can be switched on for the
cooldown). It reads the parent's tokenizer and never writes into the parent. Killed, a branch resumes from its own
checkpoints with the same command.

A branch is its parent plus what you change: its config is composed from the parent's own command-line overrides
(RUN/overrides.json) followed by the branch's, so ``branch_from=RUN@1200 trainer.max_steps=1400`` keeps the parent's
recipe, regularizer and WSD schedule; the run then lists each setting it changes against the parent.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from degen_train.config.schema import TrainConfig
from degen_train.core.paths import links_in, shown_links
from degen_train.storage.checkpoints import CheckpointError, checkpoint_header

log = logging.getLogger("degen_train")
STEP_FILE = re.compile(r"^step=(\d+)\.ckpt$")
# What a branch may change beyond what any resume may (resume.MAY_CHANGE).
BRANCH_MAY_CHANGE = ("scheduler.", "branch_from", "data.tokenizer.path")


# Keys every branch changes by being a branch (its folder, its parent's tokenizer, total_steps = max_steps):
# left out of the list of what the branch changes.
BRANCH_BOOKKEEPING = ("branch_from", "data.tokenizer.path", "callbacks.checkpoint.dirpath", "scheduler.total_steps")


def branch_changes(changes: list[str]) -> list[str]:
    """The 'key: before -> after' lines a user chose, without the keys every branch changes (its own folder)."""
    def key(line: str) -> str:
        return line.split(":", 1)[0]

    return [line for line in changes if key(line) not in BRANCH_BOOKKEEPING
            and not (key(line).startswith("logger.") and key(line).endswith(("save_dir", ".dir")))]  # fmt: skip


def parse_branch(value: str) -> tuple[Path, int]:
    """RUN@STEP -> (RUN, STEP)."""
    run, sep, step = str(value).rpartition("@")
    if not sep or not run or not step.isdigit():
        raise ValueError(f"branch_from={value!r}: expected RUN@STEP, a run folder and a step it has a checkpoint of")
    return Path(run).expanduser().resolve(), int(step)


def checkpoint_steps(run: Path) -> dict[int, Path]:
    """{step: checkpoint} of RUN: its step=N files and last.ckpt (at the step it holds)."""
    folder = run / "checkpoints"
    steps = {int(m.group(1)): p for p in sorted(folder.glob("step=*.ckpt")) if (m := STEP_FILE.match(p.name))}
    last = folder / "last.ckpt"
    if last.exists():
        steps.setdefault(int(checkpoint_header(last).get("global_step", -1)), last)
    return steps


def _refuse_links(branch_from: str, parent: Path) -> None:
    """A parent's checkpoints and tokenizer are read from its own folder only (issue 72.7: a branch loaded a
    parent's checkpoints/ and its files through links, LK1, LK2)."""
    for folder in (parent / "checkpoints", parent / "tokenizer"):
        links = links_in(folder) if os.path.lexists(folder) else []
        if links:
            raise ValueError(
                f"branch_from={branch_from}: the parent's {shown_links(links, 3)} is a link: a parent's checkpoints "
                f"and tokenizer are read from its own folder only, never through a link; replace the link by a "
                f"copy of what it points to"
            )


def _parents_checkpoint_refusal(branch_from: str, error: CheckpointError, others: list[int]) -> CheckpointError:
    """A torn or foreign checkpoint of the parent, named as the parent's, with the parent's other steps (issue 72.8:
    the refusal read as a resume's, "use an earlier one", NB1)."""
    reason = str(error).removesuffix("; use an earlier one").removesuffix(": its write was cut short")
    listed = ", ".join(map(str, sorted(others))) or "none"
    return CheckpointError(
        f"branch_from={branch_from}: the parent's {reason}. Branch from another step of the parent (steps with a "
        f"readable checkpoint file: {listed}), or mend the parent by resuming it"
    )


def _readable_steps(branch_from: str, parent: Path) -> dict[int, Path]:
    """checkpoint_steps, a torn last.ckpt named as the parent's."""
    try:
        return checkpoint_steps(parent)
    except CheckpointError as error:
        files = sorted((parent / "checkpoints").glob("step=*.ckpt"))
        raise _parents_checkpoint_refusal(branch_from, error, [int(m.group(1)) for p in files
                                                               if (m := STEP_FILE.match(p.name))]) from None


def refuse_a_decay_before_the_branch(config: TrainConfig, step: int) -> None:
    """A WSD branch's decay starts at the branch step or later. With scheduler.decay_steps unset, the decay is a
    fraction of the whole run (0.2 × 1400 = 280 steps from step 1120): a branch at step 1200 would take its first
    update at 0.465× the rate, without a word. Refused, naming the key that says where the decay starts."""
    scheduler = config.scheduler
    if scheduler.schedule != "wsd":
        return
    from degen_train.optim.schedule import factor_of
    from degen_train.optim.section import wsd_decay_steps

    total, warmup = scheduler.total_steps, scheduler.warmup_steps
    decay = wsd_decay_steps(total, warmup, scheduler.decay_steps, scheduler.decay_fraction)
    start = total - decay
    if start >= step:
        return
    rate = factor_of(scheduler.model_dump(), step)
    given = ("scheduler.decay_steps=" + str(scheduler.decay_steps)) if scheduler.decay_steps is not None else (
        f"scheduler.decay_fraction={scheduler.decay_fraction} of total_steps={total}")  # fmt: skip
    raise ValueError(
        f"branch_from={config.branch_from}: the WSD decay ({given}: {decay} steps) would start at step {start}, before "
        f"the branch step {step}, so the branch's first update would run at {rate:.3g}× the rate. Set "
        f"scheduler.decay_steps={total - step} to decay over the whole branch (steps {step}..{total}), or fewer for "
        f"a stable stretch first"
    )


def start_branch(config: TrainConfig, run_dir: Path) -> dict[str, Any] | None:
    """Point the typed ``config`` at the parent's checkpoint and tokenizer (or at the branch's own checkpoints when it
    is being resumed): what every later stage reads; returns what summary.json records, or None when ``branch_from``
    is not set."""
    if not config.branch_from:
        return None
    parent, step = parse_branch(config.branch_from)
    if config.ckpt_path not in (None, "", "null", "auto", "last"):  # last/auto: the branch's own, if any
        raise ValueError(f"branch_from={config.branch_from} and ckpt_path={config.ckpt_path}: give one of them")
    if not (parent / "checkpoints").is_dir():
        raise FileNotFoundError(f"branch_from={config.branch_from}: {parent} is not a run folder (no checkpoints/)")
    if parent == run_dir.resolve():
        raise ValueError(
            f"branch_from={config.branch_from} into the parent's own folder: give the branch another hydra.run.dir"
        )
    _refuse_links(config.branch_from, parent)
    steps = _readable_steps(config.branch_from, parent)
    if step not in steps:
        listed = ", ".join(map(str, sorted(steps))) or "none"
        raise FileNotFoundError(
            f"branch_from={config.branch_from}: {parent} has no checkpoint at step {step}; steps with one: {listed} "
            f"(a parent keeps them with callbacks.checkpoint.every_n_train_steps and save_top_k=-1)"
        )
    try:  # its header read now (its tensors are not): a torn step=N file is the parent's, named before any work
        checkpoint_header(steps[step])
    except CheckpointError as error:
        raise _parents_checkpoint_refusal(config.branch_from, error, [s for s in steps if s != step]) from None
    refuse_a_decay_before_the_branch(config, step)
    own = sorted((run_dir / "checkpoints").glob("*.ckpt")) if (run_dir / "checkpoints").is_dir() else []
    config.ckpt_path = "auto" if own else str(steps[step])
    if not config.data.tokenizer.path:  # the parent's tokenizer, read as it is (not trained again)
        config.data.tokenizer.path = str(parent / "tokenizer")
    log.info("branch_from: %s", "resuming the branch from its own checkpoints" if own else f"{parent} at step {step}")
    return {"run": str(parent), "step": step, "checkpoint": str(steps[step])}
