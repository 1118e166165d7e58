"""``degen-train --reproduce RUN [KEY=VALUE ...]``: launch a new run from RUN's recorded config.

The recorded config (RUN/config.yaml, resolved) becomes the primary config of the new run, with the
house's Hydra settings; later overrides still apply. The new run goes to RUN-reproduced unless
hydra.run.dir says otherwise. A different code commit than the record's is warned about, not refused.

A run folder may come from someone else, so its config is data, read through the one reader of handed-over files
(config/handed_over.py): the house's keys, value types and ``_target_``s only, no interpolation; every output
location (checkpoints, logs, profiles, the Trainer's root, the data cache) is the house's own for the new folder, its
loggers the house's default, its Hydra settings and upload left out (said in one line); the inputs it reads
(corpora, tokenizer, teacher, starting weights, probe files) are printed before any work. So the reproduction writes
nowhere but its own folder and this user's cache.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from degen_train.config.handed_over import HandedOverError, read_config_file, with_house_outputs
from degen_train.config.house_keys import house_value
from degen_train.config.records import Summary, read_record
from degen_train.core.handed_files import HandedOverFileError
from degen_train.core.paths import config_dir, writable_folder
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
    try:  # the one reader of handed-over settings (config/handed_over.py): data through the house's allow-list
        reading = read_config_file(recorded, advice=ADVICE)
    except HandedOverError as error:
        raise SystemExit(f"--reproduce {run}: {error}") from None
    if reading.dropped_line():  # printed, as the inputs below: the command's own words before Hydra logs anything
        print(f"degen-train --reproduce {run}: {reading.dropped_line()}", file=sys.stderr, flush=True)
    tree = with_house_outputs(reading.tree, reading.dropped)
    tree["logger"] = {"csv": house_value("logger.csv")}  # the house's default; +logger=NAME adds another
    config = OmegaConf.create(tree)
    for key, value in NOT_REPRODUCED.items():
        config[key] = value
    inputs = recorded_inputs(tree)
    print(f"degen-train --reproduce {run}: the recorded config reads " + ("; ".join(inputs) if inputs else
          "nothing outside this package (the builtin corpus)"), flush=True)  # fmt: skip
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
INPUT_KEYS = ("path", "validation_path", "name", "init_from", "teacher", "start", "sts", "wic", "wic_fit", "w8a8",
              "glue_dir", "branch_from")  # fmt: skip


def recorded_inputs(tree: Any, prefix: str = "") -> list[str]:
    """'KEY=VALUE' for every input the record names (a corpus, a tokenizer, a teacher, probe files, a parent run)."""
    found: list[str] = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        wanted = key in INPUT_KEYS and (key != "name" or path.startswith("data"))  # data.name: a hub dataset
        if wanted and value not in (None, "", []):
            found.append(f"{path}={value}")
        elif isinstance(value, dict | list):
            found.extend(recorded_inputs(value, path))
    return found


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
