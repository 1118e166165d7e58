"""The settings that cannot change what a run measures: a rerun or a report may ignore a difference in them. Each
setting declares it where it is defined (core/roles.py: ``Declared.leaves_the_result``): where the run writes and how
it is shown, and what declares ``same_result`` (loader workers, threads, the checkpoint it resumes, how checkpoints are
kept, what a search compares by)."""

from __future__ import annotations

from degen_train.config.role_lookup import role_of


def has_no_effect_on_result(key: str) -> bool:
    """Whether changing ``key`` leaves the run's result as it was; a key without a declared role changes it."""
    declared = role_of(key)
    return declared is not None and declared.leaves_the_result
