"""The script's own job, made tiny: what `degen-cluster check` changes in each ``srun degen-train`` step's arguments.

The check never asks a script to forward its arguments: each task of the simulated ``srun`` rewrites the words the
script gave degen-train (cli/simulated_task.py reads the check's choice from CHECK_VARIABLE). The script's recipe,
objective, regularizers, strategy and run folder stay; its model becomes the tiny one of the same family (a decoder
recipe gets a tiny decoder: ``gpt2_small`` → ``gpt2_tiny``, ``llama_base`` → ``llama_tiny``, else ``tiny`` or
``gpt2_tiny`` by family), its corpus the builtin one unless the user asks for the script's (``--own-data``), and TINY
makes the job exact and short. Later words win: the script's, then TINY, then the user's own overrides; a script word
under a group the check replaces (``model.init_from=gpt2`` under ``model``) goes with it, so nothing downloads."""

from __future__ import annotations

import re
from pathlib import Path

CHECK_VARIABLE = "DEGEN_CLUSTER_CHECK"  # JSON: {"user": [the user's overrides], "own_data": bool}
# What makes the job tiny and exact here: the CPU and float32 instead of trainer=gpu's bf16, dropout 0 (each rank draws
# its own dropout: with it, 2 × 2 differs from one process by 4e-3), six updates, a checkpoint every three, every
# validation batch (a partial validation would split unevenly over four tasks), no accumulation (the recipe's
# authors' 4 would make six updates 24 micro-batches).
TINY = ["trainer.accelerator=cpu", "trainer.precision=32-true", "model.dropout=0", "model.attention_dropout=0",
        "data.block_size=128", "data.batch_size=2", "trainer.max_steps=6", "scheduler.total_steps=6",
        "trainer.accumulate_grad_batches=1", "trainer.val_check_interval=3",
        "callbacks.checkpoint.every_n_train_steps=3", "trainer.limit_val_batches=1.0", "export_hf=false",
        "callbacks.isotropy.at_end=false", "callbacks.throughput.count_total_flops=false",
        "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
        "trainer.log_every_n_steps=1"]  # fmt: skip
TINY_BY_FAMILY = {"encoder": "tiny", "decoder": "gpt2_tiny"}


def key_of(word: str) -> str | None:
    """``KEY`` of an override ``[+|++|~]KEY[=VALUE]``; None for a word that is no override."""
    found = re.match(r"^(?:\+\+|\+|~)?([A-Za-z_][\w./@-]*)(=|$)", word)
    return found.group(1) if found else None


def conf_root() -> Path:
    from degen_train.core.package_dir import config_dir

    return config_dir()


def chosen_model(arguments: list[str], conf: Path | None = None) -> tuple[str, str]:
    """(the model the arguments select, where that choice comes from): ``model=X``, else the recipe's, else the
    root config's default."""
    conf = conf or conf_root()
    given = {key_of(w): w.partition("=")[2] for w in arguments if "=" in w and key_of(w)}
    if given.get("model"):
        return given["model"], f"model={given['model']}"
    recipe = given.get("recipe")
    if recipe and (conf / "recipe" / f"{recipe}.yaml").is_file():
        found = re.search(r"override /model:\s*([\w-]+)", (conf / "recipe" / f"{recipe}.yaml").read_text())
        if found:
            return found.group(1), f"recipe={recipe}'s model {found.group(1)}"
    found = re.search(r"^\s*- model:\s*([\w-]+)", (conf / "train.yaml").read_text(), re.MULTILINE)
    name = found.group(1) if found else "tiny"
    return name, f"the default model {name}"


def family_of(model: str, conf: Path | None = None) -> str:
    """``encoder`` or ``decoder``: what conf/model/MODEL.yaml's family is (an unknown model: encoder, the default)."""
    path = (conf or conf_root()) / "model" / f"{model}.yaml"
    text = path.read_text() if path.is_file() else ""
    found = re.search(r"family/(encoder|decoder)", text) or re.search(r"^family:\s*(encoder|decoder)", text, re.M)
    return found.group(1) if found else "encoder"


def tiny_model(arguments: list[str], conf: Path | None = None) -> tuple[str, str]:
    """(the tiny model of the same family as the arguments' model, one line on why)."""
    conf = conf or conf_root()
    model, source = chosen_model(arguments, conf)
    family = family_of(model, conf)
    prefix = model.split("_")[0]
    same_kind = f"{prefix}_tiny"
    if model.endswith("_tiny") or model == "tiny":
        tiny = model
    elif (conf / "model" / f"{same_kind}.yaml").is_file() and family_of(same_kind, conf) == family:
        tiny = same_kind
    else:
        tiny = TINY_BY_FAMILY[family]
    return tiny, f"model={tiny} (a tiny {family}: {source})"


def rewritten(arguments: list[str], *, user: list[str], own_data: bool = False,
              conf: Path | None = None) -> list[str]:  # fmt: skip
    """The step's words made tiny (module doc): the script's, less what the check replaces, then TINY, the tiny
    model (and the builtin corpus), then the user's overrides, each replacing an earlier word of the same key."""
    model, _ = tiny_model(arguments, conf)
    ours = [f"model={model}", *([] if own_data else ["data=builtin"]), *TINY]
    groups = {"model", *([] if own_data else ["data"])}
    replaced = {key_of(w) for w in ours}
    kept = [w for w in arguments if key_of(w) is None or
            (key_of(w) not in replaced and key_of(w).split(".")[0] not in groups)]  # fmt: skip
    words = [*kept, *ours]
    users = {key_of(w) for w in user}
    return [w for w in words if key_of(w) not in users] + list(user)
