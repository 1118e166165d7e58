"""What a resumed run may change: a resume continues one run, so whatever shapes the weights it trains must stay.

Compared key by key with the config the checkpoint recorded. Refused: what breaks the exact-resume contract
(the seed, the data and its order, the model, the masking, the loss terms' settings, the optimizer and its
schedule — the learning rate among them, which a resume would otherwise silently keep from the checkpoint — and
the global batch). Warned about and recorded: what the run may legitimately change on the way (how long it
trains, how it logs, validates, checkpoints and evaluates, the precision, the process layout when the global
batch stays, a term's weight as a weight schedule). Anything not listed is refused, so a new key starts safe.
"""

from __future__ import annotations

from typing import Any

# Keys (or key prefixes ending in ".") a resume may change; the rest must equal the checkpoint's record.
MAY_CHANGE = (
    "run_dir",
    "ckpt_path",
    "trainer.",
    "strategy.",
    "callbacks.",
    "logger.",
    "eval.",
    "search.",
    "push_to_hub.",
    "export_hf",
    "final_validation",
    "allow_slow_precision",
    "threads",
    "data.num_workers",
    "data.cache_dir",
    "scheduler.total_steps",
)
# Keys every resume changes (it names the checkpoint; a copied run lives elsewhere): not worth a warning.
UNREMARKABLE = ("ckpt_path", "run_dir", "trainer.default_root_dir")
# Trainer keys that are part of the data's order and the optimisation, never changed by a resume.
MUST_STAY = ("trainer.accumulate_grad_batches", "trainer.gradient_clip_val", "trainer.gradient_clip_algorithm")
TERM_WEIGHT = ("objective.", "regularizer.")  # objective.NAME.weight / regularizer.NAME.weight: a weight schedule


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): tree}


def global_batch(config: dict[str, Any]) -> int | None:
    """data.batch_size × devices × nodes × accumulation, when every factor is a number."""
    trainer = config.get("trainer") or {}
    factors = [(config.get("data") or {}).get("batch_size"), trainer.get("devices", 1), trainer.get("num_nodes", 1),
               trainer.get("accumulate_grad_batches", 1)]  # fmt: skip
    if not all(isinstance(f, int) for f in factors):
        return None
    product = 1
    for factor in factors:
        product *= factor
    return product


def resume_changes(
    before: dict[str, Any], after: dict[str, Any], *, also_free: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """(refused, allowed): one 'key: before -> after' line per changed key; ``also_free``: more keys or prefixes
    that may change (a branch's schedule)."""
    old, new = flatten(before), flatten(after)
    refused, allowed = [], []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key) or key in UNREMARKABLE:
            continue
        line = f"{key}: {old.get(key)!r} -> {new.get(key)!r}"
        weight = key.startswith(TERM_WEIGHT) and key.endswith(".weight")
        free = any(key == k or (k.endswith(".") and key.startswith(k)) for k in (*MAY_CHANGE, *also_free))
        if key == "data.batch_size":  # another process layout with the same global batch is a supported resume
            free = global_batch(before) is not None and global_batch(before) == global_batch(after)
        (allowed if (free or weight) and key not in MUST_STAY else refused).append(line)
    if None not in (global_batch(before), global_batch(after)) and global_batch(before) != global_batch(after):
        refused.append(
            f"the global batch (data.batch_size × trainer.devices × trainer.num_nodes × accumulation): "
            f"{global_batch(before)} -> {global_batch(after)}"
        )
    return refused, allowed


def check_resume(
    recorded: dict[str, Any] | None, current: dict[str, Any], checkpoint: Any, *, also_free: tuple[str, ...] = ()
) -> list[str]:
    """Raise naming every refused change; return the allowed ones (to warn about and record)."""
    if not recorded:  # a checkpoint from before configs were recorded in it
        return []
    refused, allowed = resume_changes(recorded, current, also_free=also_free)
    if refused:
        raise ValueError(
            f"resuming from {checkpoint} with settings that change what the run trains:\n  "
            + "\n  ".join(refused)
            + "\nA resume continues one run: resume with the checkpoint's settings, or start a new run from its "
            "export (model.init_from=RUN/hf) into another folder"
        )
    return allowed
