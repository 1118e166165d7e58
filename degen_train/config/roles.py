"""What each setting is, declared where it is defined, and the one rule every door derives from it.

A setting of the typed schema carries its role in its annotation (``path: Annotated[str | None, INPUT]``); a key that
only conf/ holds gets it from CONF_ROLES below, beside the schema, and a loss term's option from its term (options are
what the run trains, except those the term names in ``reads``). ``tests/unit/test_roles.py`` fails for a schema field
or conf/ key without one, so a new capability cannot forget it.

The roles, and what a handed-over file (a branch's parent, a ``--reproduce`` record, a sweep's member) may do with a
setting of each (``Declared.door``):

- ``trains`` (model, data, objective, optimizer, seed, steps), ``measures`` (the evaluation's counts and switches, each
  bounded) and ``presentation`` (how it is shown): carried, as checked values.
- ``output`` (where it writes, logs, uploads) and ``launch`` (how and where this run starts: devices, launcher, the
  checkpoint it resumes): left out, this run decides them; said in one line.
- ``input`` (a file, folder, hub name or model the run reads) and ``code`` (a ``_target_``, a task folder or templates
  handed to a library): only the house's own value is carried; another value is refused in one line naming the file,
  the entry and the command-line form, unless the user's own command line gives that key (then it is left out).
- ``protection`` (checkpoints, preemption, divergence, validation and their cadences): carried when it keeps the
  house's protection or tightens it; a looser value is refused in one line.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Role(str, Enum):
    INPUT = "input"
    OUTPUT = "output"
    CODE = "code"
    PROTECTION = "protection"
    TRAINS = "trains"
    MEASURES = "measures"
    PRESENTATION = "presentation"
    LAUNCH = "launch"


# What a handed-over file may do with a setting of each role: carry it, leave it out (this run decides), carry only
# the house's own value, carry only a value no looser than the house's.
DOOR = {
    Role.TRAINS: "carried",
    Role.MEASURES: "carried",
    Role.PRESENTATION: "carried",
    Role.OUTPUT: "left out",
    Role.LAUNCH: "left out",
    Role.INPUT: "the user's own",
    Role.CODE: "the user's own",
    Role.PROTECTION: "no looser",
}
MEANING = {
    Role.INPUT: "a file, folder, hub name or model the run reads",
    Role.OUTPUT: "where the run writes, logs or uploads",
    Role.CODE: "code or templates handed to a library",
    Role.PROTECTION: "what keeps the run's work safe (checkpoints, preemption, the divergence guard, validation)",
    Role.TRAINS: "what the run trains",
    Role.MEASURES: "what the run measures",
    Role.PRESENTATION: "how the run is shown",
    Role.LAUNCH: "how and where this run starts",
}


@dataclass(frozen=True)
class Declared:
    """A setting's role, with the rule a handed-over value must meet where the role has one: a protection's values
    that keep it (``keeps``) or the bound of a cadence (``at_most``, ``at_least``, ``above``); a measure's count bound
    (``at_most``) where the schema states none."""

    role: Role
    keeps: tuple[Any, ...] = ()  # values that keep the house's protection (besides the bounds)
    at_most: float | None = None
    at_least: float | None = None
    above: float | None = None
    guards: str = ""  # a protection: what it guards, for the refusal's words
    whole: bool = False  # a count of updates: a float (Lightning's fraction of an epoch) is no such count

    def allows(self, value: Any) -> bool:
        """Whether a handed-over file may give ``value`` (a protection as tight as the house's or tighter, a measure
        within its bound); every other role: True."""
        if self.role not in (Role.PROTECTION, Role.MEASURES) or _same_value(value, self.keeps):
            return True
        bounds = (self.at_most, self.at_least, self.above)
        if bounds == (None, None, None):
            return not self.keeps
        number = len(value) if isinstance(value, list | tuple) else value  # a list of seeds: its length
        if not isinstance(number, int | float) or isinstance(number, bool) or not math.isfinite(number):
            return False
        if self.whole and not isinstance(number, int):
            return False
        return ((self.at_most is None or number <= self.at_most) and (self.at_least is None or number >= self.at_least)
                and (self.above is None or number > self.above))  # fmt: skip

    def rule(self) -> str:
        """What a handed-over file may give here: ``a number at most 100``, ``true``, ``'stop'``, ..."""
        parts = []
        if self.above is not None:
            parts.append(f"above {_number(self.above)}")
        if self.at_least is not None:
            parts.append(f"at least {_number(self.at_least)}")
        if self.at_most is not None:
            parts.append(f"at most {_number(self.at_most)}")
        text = ("a whole number " if self.whole else "a number ") + " and ".join(parts) if parts else ""
        if self.keeps:
            text = f"{text} or {_listed(self.keeps)}" if text else f"only {_listed(self.keeps)}"
        return text or "any value"


def _same_value(value: Any, allowed: tuple[Any, ...]) -> bool:
    """``value`` is one of ``allowed``, a bool only equal to a bool (``1 == True`` is not the same setting)."""
    return any(value is a or (type(value) is type(a) or {type(value), type(a)} <= {int, float}) and value == a
               and not isinstance(value, bool) for a in allowed)  # fmt: skip


def _listed(values: tuple[Any, ...]) -> str:
    return " or ".join("null" if v is None else str(v).lower() if isinstance(v, bool) else repr(v) for v in values)


def _number(value: float) -> str:
    return f"{value:g}"


INPUT = Declared(Role.INPUT)
OUTPUT = Declared(Role.OUTPUT)
CODE = Declared(Role.CODE)
TRAINS = Declared(Role.TRAINS)
MEASURES = Declared(Role.MEASURES)
PRESENTATION = Declared(Role.PRESENTATION)
LAUNCH = Declared(Role.LAUNCH)


def protection(guards: str, *, keeps: tuple[Any, ...] = (), at_most: float | None = None,
               at_least: float | None = None, above: float | None = None, whole: bool = False) -> Declared:  # fmt: skip
    """A protection's role: ``guards`` says what it protects; a handed-over value must be one of ``keeps`` or lie
    within the bounds (no bound and no ``keeps``: any value the schema allows); ``whole``: a count of updates."""
    return Declared(Role.PROTECTION, keeps=keeps, at_most=at_most, at_least=at_least, above=above, guards=guards,
                    whole=whole)  # fmt: skip


def measures(*, at_most: float, at_least: float | None = None) -> Declared:
    """A count the run measures with, bounded here where no schema field states the bound (null: off, or the
    house's default)."""
    return Declared(Role.MEASURES, keeps=(None,), at_most=at_most, at_least=at_least)


CHECKPOINTS = "the run's checkpoints"
VALIDATION = "the run's validation"
DIVERGENCE = "the divergence guard"
# A handed-over file's cadence may be as often as the house's or more: at most the house's updates or minutes.
HOUSE_CHECKPOINT_STEPS = 100  # conf/callbacks/default.yaml
HOUSE_VALIDATION_STEPS = 100  # trainer.val_check_interval=auto: every max_steps / 5 updates, at most every 100
CADENCE_MINUTES = 60  # a minute cadence from a handed-over file: at most an hour of work between two
# ... and at least a minute: a cadence of 0.001 minutes validates (or checkpoints, or probes) after every update, and
# a run that does nothing else is stopped as surely as one that is never checkpointed (issue 72.6)
FLOOR_MINUTES = 1

# The keys only conf/ holds (and Lightning Trainer arguments), declared beside the schema: exact keys first, then
# patterns (``*`` one part, ``**`` any depth), the most specific winning. A schema field is declared in schema.py. A
# section (a mapping of settings) has the role declared for it here (logger: every key below is an output), else
# none of its own: each setting below it has one, and removing it removes what they protect.
CONF_ROLES: dict[str, Declared] = {
    # Hydra's instantiation: what a section builds is code; only the house's own targets are carried.
    "**._target_": CODE,
    "**._partial_": CODE,
    "defaults": LAUNCH,
    "run_dir": OUTPUT,
    "hydra": LAUNCH,
    "hydra.**": LAUNCH,
    "cluster": LAUNCH,
    "logger": OUTPUT,
    "logger.**": OUTPUT,
    "strategy": LAUNCH,
    "strategy.**": LAUNCH,
    # A recipe's own inputs, interpolated into the keys that read them (recipes/tacl.yaml: teacher, simcse: start).
    "teacher": INPUT,
    "start": INPUT,
    # callbacks (conf/callbacks/default.yaml) not typed in the schema
    "callbacks.checkpoint.dirpath": OUTPUT,
    "callbacks.checkpoint.filename": OUTPUT,
    "callbacks.checkpoint.auto_insert_metric_name": OUTPUT,
    "callbacks.checkpoint.monitor": protection(CHECKPOINTS, keeps=("step",)),
    "callbacks.checkpoint.mode": protection(CHECKPOINTS, keeps=("max",)),
    "callbacks.checkpoint.save_last": protection(CHECKPOINTS, keeps=(True,)),
    "callbacks.preemption.requeue": protection("the requeue of a preempted cluster job", keeps=(True,)),
    "callbacks.preemption.requeue_signal": protection("the cluster's warning signal", keeps=("SIGUSR1", "SIGUSR2")),
    "callbacks.cadence.validation_minutes": protection(VALIDATION, keeps=(None,), at_least=FLOOR_MINUTES,
                                                      at_most=CADENCE_MINUTES),
    "callbacks.cadence.checkpoint_minutes": protection(CHECKPOINTS, keeps=(None,), at_least=FLOOR_MINUTES,
                                                      at_most=CADENCE_MINUTES),
    "callbacks.cadence.isotropy_minutes": measures(at_least=FLOOR_MINUTES, at_most=24 * 60),
    "callbacks.isotropy.at_end": MEASURES,
    "callbacks.throughput.window": measures(at_most=10_000),
    "callbacks.throughput.peak_flops": MEASURES,
    "callbacks.throughput.count_total_flops": MEASURES,
    "callbacks.progress_bar.refresh_rate": PRESENTATION,
    "callbacks.lr_monitor.logging_interval": PRESENTATION,
    "callbacks.best_by_sts.sts": INPUT,  # an STS file the run reads every few steps
    "callbacks.best_by_sts.*": TRAINS,  # the weights it keeps are the run's result
    "callbacks.weight_averaging.*": TRAINS,
    # eval.finetune (conf/finetune.yaml): the fine-tuning protocol of eval.glue, checked by finetune/settings.py
    "eval.finetune.**": MEASURES,
    "eval.finetune.seeds": measures(at_most=100),  # a count or a list of seeds: its length
    "eval.finetune.run_glue.seeds": measures(at_most=100),
    "eval.finetune.epochs": measures(at_most=100),
    "eval.finetune.learning_rates": measures(at_most=64),
    "eval.finetune.run_glue.learning_rates": measures(at_most=64),
    "eval.finetune.max_length": measures(at_most=8192),
    "eval.finetune.max_train_examples": measures(at_most=10_000_000),
    **{f"eval.finetune.{kind}": measures(at_most=65_536)
       for kind in ("batch_size", "eval_batch_size", "run_glue.batch_size", "run_glue.eval_batch_size")},
    # optimizer keys only conf/optimizer/ holds
    "optimizer.fused": TRAINS,
    "optimizer.muon_nesterov": TRAINS,
    "optimizer.muon_ns_coefficients": TRAINS,
    # loss terms: their options are what the run trains, except the files a term reads, which it names in ``reads``
    # (losses/tacl.py: teacher; tests/unit/test_roles.py holds each term's ``reads`` to an input here)
    "objective.*.*": TRAINS,
    "regularizer.*.*": TRAINS,
    "objective.*.teacher": INPUT,
    "regularizer.*.teacher": INPUT,
    # lightning.pytorch.Trainer's arguments (trainer.KEY=VALUE opens every one: config/overrides.py)
    "trainer.precision": TRAINS,
    "trainer.deterministic": TRAINS,
    "trainer.benchmark": TRAINS,
    "trainer.min_steps": TRAINS,
    "trainer.gradient_clip_algorithm": TRAINS,
    "trainer.use_distributed_sampler": TRAINS,
    "trainer.sync_batchnorm": TRAINS,
    "trainer.inference_mode": TRAINS,
    "trainer.detect_anomaly": TRAINS,
    "trainer.reload_dataloaders_every_n_epochs": TRAINS,
    "trainer.accelerator": LAUNCH,
    "trainer.devices": LAUNCH,
    "trainer.num_nodes": LAUNCH,
    "trainer.strategy": LAUNCH,
    "trainer.plugins": LAUNCH,
    "trainer.num_sanity_val_steps": LAUNCH,
    "trainer.barebones": LAUNCH,
    "trainer.default_root_dir": OUTPUT,
    "trainer.logger": OUTPUT,
    "trainer.profiler": OUTPUT,
    "trainer.profiler.**": OUTPUT,
    "trainer.model_registry": OUTPUT,
    "trainer.callbacks": CODE,
    "trainer.enable_progress_bar": PRESENTATION,
    "trainer.enable_model_summary": PRESENTATION,
    "trainer.limit_val_batches": protection(VALIDATION, above=0),
    "trainer.check_val_every_n_epoch": protection(VALIDATION, keeps=(None,)),
    "trainer.limit_test_batches": MEASURES,
    "trainer.limit_predict_batches": MEASURES,
    # Trainer switches that change what the run is: only the value that leaves the run as it is
    "trainer.fast_dev_run": protection("the run's steps and checkpoints", keeps=(False, 0)),
    "trainer.limit_train_batches": protection("the run's steps", keeps=(None, 1.0, 1)),
    "trainer.overfit_batches": protection("the run's data", keeps=(0, 0.0)),
    "trainer.enable_checkpointing": protection(CHECKPOINTS, keeps=(None, True)),
    "trainer.max_epochs": protection("the run's steps (degen-train counts steps: -1)", keeps=(None, -1)),
    "trainer.min_epochs": protection("the run's steps", keeps=(None,)),
    "trainer.max_time": protection("the run's steps (a clock would end it early)", keeps=(None,)),
}
# Config groups (a choice in a parent's overrides, ``recipe=tacl``): the role of what the choice decides.
GROUP_ROLES: dict[str, Declared] = {
    "recipe": TRAINS,
    "model": TRAINS,
    "model/family": TRAINS,
    "objective": TRAINS,
    "regularizer": TRAINS,
    "method": TRAINS,
    "data": TRAINS,
    "optimizer": TRAINS,
    "scheduler": TRAINS,
    "speed": TRAINS,
    "trainer": LAUNCH,
    "strategy": LAUNCH,
    "cluster": LAUNCH,
    "hydra": LAUNCH,
    "logger": OUTPUT,
    "callbacks": protection("every callback", keeps=("default",)),
    "debug": protection("the run's steps, checkpoints and validation", keeps=(None,)),  # no choice keeps them
}


def group_role(group: str) -> Declared | None:
    """The role of a config group's choice (``hydra/job_logging`` is Hydra's)."""
    return GROUP_ROLES.get(group) or GROUP_ROLES.get(group.split("/")[0])


@functools.cache
def role_of(key: str) -> Declared | None:
    """The role declared for the dotted ``key`` (a list's items as ``KEY[]``): the schema field's own marker, else
    CONF_ROLES (an exact key, else the most specific pattern); None when nothing declares one (refused by every
    door)."""
    from degen_train.config.house_keys import schema_fields

    field = schema_fields().get(key)
    if field is not None:
        return next((m for m in field.metadata if isinstance(m, Declared)), None)
    if key in CONF_ROLES:
        return CONF_ROLES[key]
    if key.endswith("[]"):  # a list's items: the list's role
        return role_of(key[:-2])
    matches = [(_specificity(p), p) for p in CONF_ROLES if "*" in p and _pattern(p).fullmatch(key)]
    return CONF_ROLES[max(matches)[1]] if matches else None


@functools.cache
def _pattern(pattern: str) -> re.Pattern[str]:
    """``*`` stands for one part of a dotted key, ``**`` for one or more."""
    parts = [r".+" if p == "**" else re.escape(p).replace(r"\*", r"[^.]+") for p in pattern.split(".")]
    return re.compile(r"\.".join(parts))


def _specificity(pattern: str) -> tuple[int, int]:
    """(literal parts, literal parts before the first wildcard): ``callbacks.checkpoint.*`` before ``**._target_``."""
    parts = pattern.split(".")
    literal = [p for p in parts if "*" not in p]
    prefix = next((i for i, p in enumerate(parts) if "*" in p), len(parts))
    return len(literal), prefix


def inputs_named(tree: Any, prefix: str = "") -> list[str]:
    """'KEY=VALUE' for every setting of ``tree`` (a resolved config) whose role is an input and that names one (not
    null, not empty): what a run with this config reads besides this package."""
    found: list[str] = []
    items = tree.items() if isinstance(tree, dict) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        declared = role_of(path)
        if declared is not None and declared.role == Role.INPUT and value not in (None, "", [], {}):
            found.append(f"{path}={value}")
        elif isinstance(value, dict):
            found.extend(inputs_named(value, path))
    return found


def declared_keys() -> list[str]:
    """Every setting the house names: each field of the schema and every key of conf/ that is not a section."""
    from degen_train.config.house_keys import house_keys, schema_fields

    keys = house_keys()
    return sorted(k for k in set(keys) | set(schema_fields()) if not (k in keys and keys[k].kinds == {"dict"}))


def role_counts() -> dict[Role, int]:
    """How many settings declare each role (docs/runs.md's table)."""
    counts = dict.fromkeys(Role, 0)
    for key in declared_keys():
        declared = role_of(key)
        if declared is not None:
            counts[declared.role] += 1
    return counts
