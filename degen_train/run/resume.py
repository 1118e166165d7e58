"""Resuming a run, and whether it has finished, in one room.

- Which checkpoint a run starts from (``ckpt_path=last|auto|PATH``), and whether it fits this run: the model
  keys, the loss terms, the built model's shape and the tokenizer.
- What a resume may change. A resume continues one run, so whatever shapes the weights it trains must stay. The
  config is compared key by key with the one the checkpoint recorded. Refused: what breaks the exact-resume
  contract (the seed, the data and its order, the model, the masking, the loss terms' settings, the optimizer and
  its schedule — the learning rate among them, which a resume would otherwise silently keep from the checkpoint
  — and the global batch). Warned about and recorded: what a run may legitimately change on the way (how long it
  trains, how it logs, validates, checkpoints and evaluates, the precision, the process layout when the global
  batch stays, a term's weight as a weight schedule). Anything not listed is refused, so a new key starts safe.
- Whether a finished run is reused as it is (a rerun, a sweep's job): only when nothing that shapes its result
  changed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from degen_train.config.renamed import current_targets
from degen_train.config.result_keys import has_no_effect_on_result
from degen_train.config.role_lookup import role_of
from degen_train.core.handed_files import HandedOverFileError, json_record
from degen_train.core.trees import flatten
from degen_train.models.section import DEFAULT_ARCH, ModelConfig
from degen_train.storage.checkpoints import CheckpointError, checkpoint_header, newest_checkpoint, recorded_step

log = logging.getLogger("degen_train")

RESUME_CHOICES = ("last", "auto")


def resolve_checkpoint(ckpt_path: str | None, run_dir: Path) -> Path | None:
    """The checkpoint a run starts from.

    ``last``: the newest checkpoint of RUN that verifies (or, lacking a sidecar, loads), an error if none;
    ``auto``: the same, or a fresh start when RUN has none (for requeued cluster jobs); a path: that file;
    null: a fresh run, refused if RUN already holds checkpoints (they would be overwritten).
    """
    folder = run_dir / "checkpoints"
    if ckpt_path in (None, "", "null"):
        existing = sorted(p.name for p in folder.glob("*.ckpt")) if folder.is_dir() else []
        if existing:
            raise FileExistsError(
                f"{run_dir} already holds checkpoints ({', '.join(existing)}): a fresh run would overwrite them. "
                f"Resume it with ckpt_path=last (or auto), or give this run another hydra.run.dir"
            )
        return None
    if ckpt_path in RESUME_CHOICES:
        path, notes = newest_checkpoint(folder)
        for note in notes:
            log.warning("passed over %s", note)
        if path is None:
            if ckpt_path == "auto":
                log.info("ckpt_path=auto: no checkpoint in %s, starting a fresh run", folder)
                return None
            found = sorted(p.name for p in folder.glob("*.ckpt")) if folder.is_dir() else []
            raise FileNotFoundError(
                f"ckpt_path=last but {folder} holds no checkpoint that loads (files there: "
                f"{', '.join(found) or 'none'}); check that hydra.run.dir names the run to continue, or use "
                f"ckpt_path=auto to start afresh when there is none"
            )
        # the update is in the line: degen-cluster check reads it as the proof a requeued job resumed (issue 74.5)
        log.info("ckpt_path=%s: resuming from %s at update %s", ckpt_path, path, recorded_step(path))
        return path
    path = Path(ckpt_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"ckpt_path={ckpt_path} does not exist (or use ckpt_path=last / auto)")
    return path


class Refusal:
    """How a refusal of the start checkpoint is worded: a resume of this run, or a new branch from its parent's
    checkpoint (``branch_from``), which names the parent's file and says what a branch may change (issue 72.8)."""

    def __init__(self, path: Path, branch_from: str | None) -> None:
        self.branch_from = branch_from
        if branch_from is None:
            self.subject, self.this = f"checkpoint {path}", "this run"
            self.export = "its export (model.init_from=RUN/hf)"
        else:
            self.parent = branch_from.rpartition("@")[0]  # RUN of RUN@STEP (branching.parse_branch checked it)
            self.subject = f"branch_from={branch_from}: the parent's checkpoint {path}"
            self.this, self.export = "this branch", f"the parent's export (model.init_from={self.parent}/hf)"

    def keep(self, what: str, resume_advice: str) -> str:
        """What to do: a resume's own advice, or what a branch may change and that it keeps its parent's WHAT."""
        if self.branch_from is None:
            return f"{resume_advice}, or start a new run from {self.export}"
        return f"{BRANCH_MAY}: keep the parent's {what}, or start a new run from {self.export}"


# What a branch may change (branching.BRANCH_MAY_CHANGE with what any resume may), in a refusal's words.
BRANCH_MAY = ("a branch may change only its schedule (scheduler.*), its length (trainer.max_steps), a term's weight "
              "and how it logs, checkpoints and evaluates")  # fmt: skip


def check_checkpoint_matches(
    path: Path, model: ModelConfig, term_names: list[str], *, branch_from: str | None = None
) -> dict[str, Any]:
    """Refuse a checkpoint written by another model shape or another set of loss terms; returns it (weights only).
    ``branch_from``: the checkpoint is a new branch's parent's, and the refusal says so."""
    loaded = checkpoint_header(path)
    saved = loaded.get("degen_train")
    if saved is None:
        raise CheckpointError(f"{path} is not a degen_train checkpoint (no 'degen_train' entry)")
    says = Refusal(path, branch_from)
    current = model.model_dump(by_alias=True, mode="json")
    for key, now in current.items():  # each model setting that shapes the result, by its declared role
        declared = role_of(f"model.{key}")
        if declared is None or declared.leaves_the_result or (key not in saved["model"] and key != "arch"):
            continue  # a key added since the checkpoint was written: the recorded config's comparison holds it
        before = saved["model"].get(key)
        if key == "arch" and before is None:  # written before model.arch existed: the family's architecture
            before = DEFAULT_ARCH.get(saved["model"].get("family"))
        if before != now:
            raise ValueError(
                f"{says.subject} was written with model.{key}={before}, {says.this} has model.{key}={now}: "
                + says.keep(f"model.{key}", "use the run's model settings")
            )
    if sorted(saved["terms"]) != sorted(term_names):
        raise ValueError(
            f"{says.subject} was trained with loss terms {sorted(saved['terms'])}, {says.this} has "
            f"{sorted(term_names)}: " + says.keep("loss terms", "resume with the same terms")
        )
    return loaded


def check_signature(
    path: Path, saved: dict[str, Any] | None, current: dict[str, Any], *, branch_from: str | None = None
) -> None:
    """Refuse a checkpoint whose model shape (vocabulary size, widths, class) differs from the model just built.

    The config keys are checked before any data is read; this catches what only the built model shows,
    e.g. a tokenizer retrained with another vocabulary size.
    """
    if saved is None:
        raise CheckpointError(f"{path} has no model signature: it was not written by degen_train")
    differing = [f"{k}: checkpoint {saved.get(k)!r}, this run {v!r}" for k, v in current.items() if saved.get(k) != v]
    if differing:
        says = Refusal(path, branch_from)
        raise ValueError(
            f"{says.subject} does not fit {says.this}'s model ({'; '.join(differing)}): "
            + says.keep("data and tokenizer settings", "resume with the run's own data and tokenizer settings")
        )


def check_tokenizer(path: Path, saved: dict[str, Any], tokenizer: Any, *, branch_from: str | None = None) -> None:
    """Refuse to resume (or branch) with another tokenizer than the checkpoint was trained with (its recorded hash)."""
    from degen_train.data.tokenizer import tokenizer_identity

    recorded = (saved.get("provenance") or {}).get("tokenizer_sha")
    now = tokenizer_identity(tokenizer)
    if recorded and recorded != now:
        says = Refusal(path, branch_from)
        advice = "resume with the run's own tokenizer (RUN/tokenizer/, or data.tokenizer.path=RUN/tokenizer)"
        if branch_from is not None:
            advice = (f"branch with the parent's own tokenizer ({says.parent}/tokenizer/, which a branch reads when "
                      f"data.tokenizer.path is unset)")  # fmt: skip
        raise ValueError(
            f"{says.subject} was trained with tokenizer {recorded}, {says.this} has {now} (the same vocabulary size, "
            f"other tokens): {advice}"
        )


# Keys (or key prefixes ending in ".") a resume may change besides those whose role allows it (_changes_no_result):
# the Trainer's, the callbacks', what is evaluated at the end, and how long the schedule runs; the rest must equal the
# checkpoint's record.
MAY_CHANGE = ("trainer.", "strategy.", "callbacks.", "eval.", "export_hf", "final_validation", "scheduler.total_steps")


# Keys every resume changes (it names the checkpoint; a copied run lives elsewhere): not worth a warning.
UNREMARKABLE = ("ckpt_path", "run_dir", "trainer.default_root_dir")


# Trainer keys that are part of the data's order and the optimisation, never changed by a resume.
MUST_STAY = ("trainer.accumulate_grad_batches", "trainer.gradient_clip_val", "trainer.gradient_clip_algorithm")


# Keys added since checkpoints were first written, with the value that behaves as the code did before them: a record
# without the key is read with it (a checkpoint of 2026-11-27 resumes; one asking for padding now is refused).
BEFORE_THE_KEY = {"model.pad_vocab_to_multiple_of": 1, "model.activation_checkpointing": "none"}


TERM_WEIGHT = ("objective.", "regularizer.")  # objective.NAME.weight / regularizer.NAME.weight: a weight schedule


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
    old = {**{k: v for k, v in BEFORE_THE_KEY.items() if k in new}, **old}  # a key added since: as the code before
    refused, allowed = [], []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key) or key in UNREMARKABLE:
            continue
        line = f"{key}: {old.get(key)!r} -> {new.get(key)!r}"
        weight = key.startswith(TERM_WEIGHT) and key.endswith(".weight")
        free = any(key == k or (k.endswith(".") and key.startswith(k)) for k in (*MAY_CHANGE, *also_free))
        free = free or _changes_no_result(key)
        if key == "data.batch_size":  # another process layout with the same global batch is a supported resume
            free = global_batch(before) is not None and global_batch(before) == global_batch(after)
        (allowed if (free or weight) and key not in MUST_STAY else refused).append(line)
    if None not in (global_batch(before), global_batch(after)) and global_batch(before) != global_batch(after):
        refused.append(
            f"the global batch (data.batch_size × trainer.devices × trainer.num_nodes × accumulation): "
            f"{global_batch(before)} -> {global_batch(after)}"
        )
    return refused, allowed


def _changes_no_result(key: str) -> bool:
    """A setting whose declared role is where the run writes, how it is launched or shown, or that declares it
    leaves the result as it is (core/roles.py): a resume or a branch may change it, as a branch leaves its parent's
    out."""
    from degen_train.config.role_lookup import role_of
    from degen_train.core.roles import Role

    declared = role_of(key)
    return declared is not None and (declared.role == Role.LAUNCH or declared.leaves_the_result)


def check_resume(
    recorded: dict[str, Any] | None, current: dict[str, Any], checkpoint: Any, *, also_free: tuple[str, ...] = (),
    branch_from: str | None = None,
) -> list[str]:
    """Raise naming every refused change; return the allowed ones (to warn about and record). ``branch_from``: the
    checkpoint is a new branch's parent's, and the refusal says what a branch may change."""
    if not recorded:  # a checkpoint from before configs were recorded in it
        return []
    recorded = current_targets(recorded)  # a run recorded before a module moved names its old path
    refused, allowed = resume_changes(recorded, current, also_free=also_free)
    if refused and branch_from is not None:
        says = Refusal(checkpoint, branch_from)
        raise ValueError(
            f"{says.subject} was trained with other settings than this branch has:\n  " + "\n  ".join(refused)
            + f"\n{BRANCH_MAY[0].upper()}{BRANCH_MAY[1:]}: keep the parent's values above (drop them from the "
            f"branch's command line), or start a new run from {says.export} into another folder"
        )
    if refused:
        raise ValueError(
            f"resuming from {checkpoint} with settings that change what the run trains:\n  "
            + "\n  ".join(refused)
            + "\nA resume continues one run: resume with the checkpoint's settings, or start a new run from its "
            "export (model.init_from=RUN/hf) into another folder"
        )
    return allowed


def finished_summary(run_dir: Path, settings: Mapping[str, Any]) -> dict | None:
    """RUN's summary when it finished with these settings' steps and values (the config as plain values); None when
    it did not finish (or ran fewer steps: it resumes). A finished run whose recorded config differs in a key that
    changes the result is refused, naming each key and both values. Keys only one side has (added by a later
    version) are not compared."""
    path = run_dir / "summary.json"
    if not os.path.lexists(path):
        return None
    summary = json_record(path, what="run summary")  # a plain file, bounded: the folder may be handed over
    if not isinstance(summary, dict):
        raise HandedOverFileError(f"{path} is not a JSON mapping, as degen-train writes a run summary; remove it")
    if summary.get("final_step") != int(settings["trainer"]["max_steps"]):
        return None
    before = flatten(current_targets(summary.get("config") or {}))
    after = flatten(dict(settings))
    changed = [f"{key}: {before[key]!r} -> {after[key]!r}" for key in sorted(set(before) & set(after))
               if before[key] != after[key] and not has_no_effect_on_result(key)]  # fmt: skip
    if changed:
        raise ValueError(
            f"{run_dir} finished before with other settings ({'; '.join(changed)}); its results would be reported "
            f"for this config. Sweep into a new folder (hydra.sweep.dir=...) or run into another hydra.run.dir"
        )
    return summary
