"""What every typed section of the config shares: how open it is, and the two keys of a section Hydra builds.

A field that only some configs give (a Lightning Trainer argument, a callback's own setting, a recipe's input) is
declared with ``GIVEN_ONLY``: it carries its role like every field, and the config that runs holds it only where it
was given (null: absent), so declaring a setting never adds it to what a constructor receives.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from degen_train.config.roles import CODE

# Every number a config gives is finite: an inf or NaN (optimizer.lr=inf) would pass the range checks and fail
# after data preparation, in a linear-algebra routine.
Open = ConfigDict(extra="allow", allow_inf_nan=False)
# Closed sections: every key a component reads is listed with its type, so the section reaches the component as a
# typed object (data.prepare_data, models.build_hf_model) and a misspelt key is refused, naming the nearest one.
Closed = ConfigDict(extra="forbid", allow_inf_nan=False)
# The bounds of what a run measures (roles.py: a handed-over file's measure is held to them like the user's own):
# prompts to continue (SimCTG's WikiText-103 test set has 1,314 documents), tokens of a prefix or continuation, items
# of an evaluation.
MAX_PROMPTS = 10_000
MAX_TOKENS = 8192
MAX_ITEMS = 1_000_000


def _is_none(value: Any) -> bool:
    return value is None


def given_only(default: Any = None, **constraints: Any) -> Any:
    """A field the config that runs holds only where it was given (module docstring)."""
    return Field(default=default, exclude_if=_is_none, **constraints)


class Instantiated(BaseModel):
    """A section Hydra builds: its ``_target_`` (and ``_partial_``) name code, so only the house's own targets are
    carried from a handed-over file (config/handed_over.py)."""

    model_config = Open
    target: Annotated[str | None, CODE] = Field(default=None, alias="_target_", exclude_if=_is_none)
    partial: Annotated[bool | None, CODE] = Field(default=None, alias="_partial_", exclude_if=_is_none)
