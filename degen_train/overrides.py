"""Command-line overrides made to mean what the README says before Hydra reads them."""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Sequence

TRAINER_KEY = re.compile(r"^trainer\.([A-Za-z]\w*)=")


def trainer_arguments() -> list[str]:
    import lightning.pytorch as pl

    return [name for name in inspect.signature(pl.Trainer.__init__).parameters if name != "self"]


def open_trainer_keys(overrides: Sequence[str]) -> list[str]:
    """``trainer.KEY=VALUE`` works for every ``lightning.pytorch.Trainer`` argument, in the yaml or not.

    Hydra refuses a key its yaml lacks unless written ``+trainer.KEY``; a Trainer argument is rewritten to
    ``++trainer.KEY=VALUE`` (add or override). A key that is no Trainer argument is refused here, naming
    the closest ones, instead of Hydra's "not in struct".
    """
    known = trainer_arguments()
    rewritten = []
    for override in overrides:
        match = TRAINER_KEY.match(override)
        if match is None:
            rewritten.append(override)
            continue
        key = match.group(1)
        if key not in known:
            close = difflib.get_close_matches(key, known, n=3) or known[:8]
            raise SystemExit(
                f"trainer.{key} is not a lightning.pytorch.Trainer argument; did you mean: {', '.join(close)}?"
            )
        rewritten.append("++" + override)
    return rewritten
