"""Command-line overrides made to mean what the README says before Hydra reads them."""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Sequence

from degen_train.core.source_reading import callable_keywords

TRAINER_KEY = re.compile(r"^\+{0,2}trainer\.([A-Za-z]\w*)=")  # with Hydra's + or ++, or without


def trainer_arguments() -> list[str]:
    """lightning.pytorch.Trainer's keyword arguments, read from its source (the command line is checked before
    Lightning loads), else from the class itself."""
    read = callable_keywords("lightning.pytorch.trainer.trainer.Trainer")
    if read is not None:
        return list(read)
    import lightning.pytorch as pl

    return [name for name in inspect.signature(pl.Trainer.__init__).parameters if name != "self"]


def open_trainer_keys(overrides: Sequence[str]) -> list[str]:
    """``trainer.KEY=VALUE`` works for every ``lightning.pytorch.Trainer`` argument, in the yaml or not.

    Hydra refuses a key its yaml lacks unless written ``+trainer.KEY``; a Trainer argument is rewritten to
    ``++trainer.KEY=VALUE`` (add or override). A key that is no Trainer argument, written with ``+`` or not, is
    refused here, naming the closest ones, instead of Hydra's "not in struct" or the Trainer's TypeError once the
    data and the model are built.
    """
    known = trainer_arguments() if any(TRAINER_KEY.match(o) for o in overrides) else []
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
        rewritten.append("++" + override.lstrip("+"))
    return rewritten


def refuse_unquoted_equals(overrides: Sequence[str]) -> None:
    """A value holding '=' (a checkpoint ``step=00000002.ckpt``, a sweep run's folder ``lr=0.001``) must be quoted for
    Hydra, whose grammar reads a second '=' as an error at any key and says only that. Refused here, showing the
    quoting."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or "=" not in value or value.startswith(("'", '"')):
            continue
        try:  # an '=' inside a quoted string of a list or mapping is Hydra's to read
            OverridesParser.create().parse_overrides([override])
        except OverrideParseException:
            raise SystemExit(
                f"degen-train: error: {key}={value}: the value holds '=', which Hydra's override grammar reads as "
                f"another assignment; quote it for Hydra inside the shell's quotes: \"{key}='{value}'\""
            ) from None
