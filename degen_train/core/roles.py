"""What each setting is, declared where it is defined, and the one rule every door derives from it.

Every setting carries its role in the annotation of the typed section's field that declares it (``path:
Annotated[str | None, INPUT]``; each component's section.py, composed by config/schema.py), conf/-only keys
included: a Lightning Trainer argument in run/sections.py, a callback's in callbacks/sections.py, a loss
term's option in its own constructor's annotation (what the run trains, unless it says otherwise; read through
losses/section.TermSection). A config group's choice has its role on the field the group fills (``group(...)``).
config/role_lookup.py reads them; ``tests/unit/test_roles.py`` fails for a field or conf/ key without one, so a new
capability cannot forget it. This module defines the roles and imports nothing of the config.

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

import math
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
    same_result: bool = False  # changing it leaves what the run trains and measures as it is (``leaves_the_result``)

    @property
    def leaves_the_result(self) -> bool:
        """Whether a rerun or a report may ignore a change of this setting: where the run writes and how it is shown
        never change what it trains and measures; any other setting only where it declares so (``same_result``:
        loader workers, threads, the checkpoint it resumes, how its checkpoints are kept)."""
        return self.same_result or self.role in (Role.OUTPUT, Role.PRESENTATION)

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
# how and where it starts, and nothing it computes (loader workers, threads, the checkpoint it resumes): a rerun that
# differs only in these is the same run; devices, nodes and the strategy are LAUNCH alone (they change the batch)
LAUNCH_ALONE = Declared(Role.LAUNCH, same_result=True)


def protection(guards: str, *, keeps: tuple[Any, ...] = (), at_most: float | None = None,
               at_least: float | None = None, above: float | None = None, whole: bool = False,
               same_result: bool = False) -> Declared:  # fmt: skip
    """A protection's role: ``guards`` says what it protects; a handed-over value must be one of ``keeps`` or lie
    within the bounds (no bound and no ``keeps``: any value the schema allows); ``whole``: a count of updates;
    ``same_result``: it keeps the run's work safe without changing what it trains or measures."""
    return Declared(Role.PROTECTION, keeps=keeps, at_most=at_most, at_least=at_least, above=above, guards=guards,
                    whole=whole, same_result=same_result)  # fmt: skip


def checkpoints(**rule: Any) -> Declared:
    """A protection of the run's checkpoints (``rule``: protection's keeps and bounds): how they are kept never
    changes what the run trains or measures."""
    return protection(CHECKPOINTS, same_result=True, **rule)


@dataclass(frozen=True)
class GroupRole:
    """The role of a config group's choice (``recipe=tacl``, ``callbacks=default``, in a parent's overrides): what
    choosing one of the group's files decides, declared on the field the group fills (config/schema.py)."""

    declared: Declared


def group(declared: Declared) -> GroupRole:
    return GroupRole(declared)


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
