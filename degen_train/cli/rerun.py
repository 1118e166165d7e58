"""``degen-train --reproduce RUN [KEY=VALUE ...]``: launch a new run from RUN's recorded config.

The recorded config (RUN/config.yaml, resolved) becomes the primary config of the new run, with the
house's Hydra settings; later overrides still apply. The new run goes to RUN-reproduced unless
hydra.run.dir says otherwise. A different code commit than the record's is warned about, not refused.

A run folder may come from someone else, so its config is data, read through the one reader of handed-over files
(config/handed_over.py), each key by the role it declares (core/roles.py): the house's keys, value types and
``_target_``s only, no interpolation; every output location (checkpoints, logs, profiles, the Trainer's root, the data
cache) is the house's own for the new folder, its loggers the house's default, its Hydra settings, launch and upload
left out (said in one line); an input (a corpus, tokenizer, teacher, starting weights, probe files) is read only at the
house's own value or from the user's command line (a run this user trained here passes its own on), and the inputs it
reads are printed before any work. So the reproduction reads what the user chose and writes nowhere but its own folder
and this user's cache.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from degen_train.config.handed_over import Door, HandedOverError, read_config_file, with_house_outputs
from degen_train.config.house_keys import house_value
from degen_train.config.inherited import given_keys
from degen_train.config.records import Summary, read_record
from degen_train.config.role_lookup import inputs_named, role_of
from degen_train.core.handed_files import HandedOverFileError
from degen_train.core.own_runs import is_own
from degen_train.core.package_dir import config_dir
from degen_train.core.paths import writable_folder
from degen_train.core.roles import TRAINS, Role
from degen_train.run.provenance import code_version

log = logging.getLogger("degen_train")

# Keys that describe where and how the old run was launched, not what it trained.
NOT_REPRODUCED = {"run_dir": "${hydra:runtime.output_dir}", "ckpt_path": None}


def reproduce_argv(run: str, overrides: list[str]) -> list[str]:
    """Hydra arguments that launch RUN's recorded config again (in a fresh run folder)."""
    run_dir = Path(run).expanduser()
    recorded = run_dir / "config.yaml"
    if not os.path.lexists(recorded):
        raise SystemExit(f"--reproduce {run}: {recorded} does not exist (is {run} a degen-train run folder?)")
    door = Door(given=given_keys(overrides), trusted=is_own(run_dir), advice=ADVICE)
    try:  # the one reader of handed-over settings (config/handed_over.py): each key by its declared role
        reading = read_config_file(recorded, door=door)
    except HandedOverError as error:
        raise SystemExit(f"--reproduce {run}: {error}") from None
    if reading.dropped_line():  # printed, as the inputs below: the command's own words before Hydra logs anything
        print(f"degen-train --reproduce {run}: {reading.dropped_line()}", file=sys.stderr, flush=True)
    tree = with_house_outputs(reading.tree, reading.dropped)
    tree["logger"] = {"csv": house_value("logger.csv")}  # the house's default; +logger=NAME adds another
    config = OmegaConf.create(tree)
    for key, value in NOT_REPRODUCED.items():
        config[key] = value
    inputs = inputs_named(tree)
    whose = " (your own run: its inputs are read)" if door.trusted and inputs else ""
    yours = [o.lstrip("+") for o in overrides if (role_of(o.split("=", 1)[0].lstrip("+~")) or TRAINS).role ==
             Role.INPUT]  # fmt: skip
    print(f"degen-train --reproduce {run}: the recorded config reads{whose} " + ("; ".join(inputs) if inputs else
          "nothing outside this package") + (f", and from your command line: {'; '.join(yours)}" if yours else ""),
          flush=True)  # fmt: skip
    primary = OmegaConf.merge({"defaults": [{"hydra": "default"}, "_self_"]}, config)
    primary.hydra = {"searchpath": [f"file://{config_dir()}"]}
    folder = Path(tempfile.mkdtemp(prefix="degen-reproduce-"))
    (folder / "reproduce.yaml").write_text(OmegaConf.to_yaml(primary))
    _warn_if_code_differs(run_dir)
    if not any(o.startswith("hydra.run.dir=") for o in overrides):
        default = Path(f"{run_dir.resolve()}-reproduced")
        try:
            writable_folder(default.parent, "hydra.run.dir", contents=False)
        except ValueError as error:
            raise SystemExit(f"--reproduce {run}: the reproduction goes beside it, to {default}, but {error}") from None
        overrides = [*overrides, f"hydra.run.dir={default}"]
    return ["--config-path", str(folder), "--config-name", "reproduce", *overrides]


ADVICE = ". If you wrote that config yourself, launch it with its overrides (RUN/overrides.json)"


def _warn_if_code_differs(run_dir: Path) -> None:
    summary = run_dir / "summary.json"
    if not os.path.lexists(summary):
        return
    try:
        then = read_record(summary, Summary, what="run summary").provenance.code.model_dump()
    except (HandedOverFileError, AttributeError) as error:
        log.warning("%s: the code that trained RUN is not known", error)
        return
    now = code_version()
    if then.get("git_sha") and then.get("git_sha") != now.get("git_sha"):
        log.warning(
            "RUN was trained by commit %s, this code is %s: results may differ", then["git_sha"], now["git_sha"]
        )
    if then.get("dirty"):
        log.warning("RUN was trained from a work tree with uncommitted changes: its exact code is not recorded")
