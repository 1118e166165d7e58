"""The fine-tuning settings of a grid: conf/finetune.yaml's defaults, the named protocol over them (``papers`` or
``run_glue``), then what the user gave; one function for degen-finetune's flags and eval.finetune's keys."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from degen_train.core.package_dir import config_dir
from degen_train.core.section import describe_errors
from degen_train.finetune.section import PROTOCOL_KEYS, FinetuneConfig, Protocol, protocol_problems


def file_defaults() -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(config_dir() / "finetune.yaml"))


def seed_list(seeds: Any, where: str) -> list[int]:
    """``seeds``: a count N (seeds 1..N) or a list of seeds (run_glue's [42])."""
    if isinstance(seeds, bool):
        raise ValueError(f"{where}={seeds!r}: give a count (3: seeds 1..3) or a list of seeds ([42])")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"{where}={seeds}: give 1 or more seeds (a count), or a list of seeds ([42])")
        return list(range(1, seeds + 1))
    chosen = [int(s) for s in seeds]
    if not chosen or len(set(chosen)) != len(chosen):
        raise ValueError(f"{where}={list(seeds)}: give one or more distinct seeds")
    return chosen


def resolve(given: dict[str, Any], *, where: str = "eval.finetune") -> tuple[Protocol, list[float], list[int], str]:
    """(protocol settings, learning rates, seeds, protocol name) for ``given`` (keys of conf/finetune.yaml; None
    values are not given), each checked by the section's rules (finetune/section.py), naming the known keys."""
    given = {k: v for k, v in given.items() if v is not None}
    try:
        FinetuneConfig.model_validate(given)
    except ValidationError as error:
        lines = describe_errors(error, given, FinetuneConfig, at=(where,))
        raise ValueError("; ".join(line.strip() for line in lines)) from None
    defaults = file_defaults()
    # eval.finetune composes the whole file, its run_glue block included: the block as composed is the preset
    presets = {"run_glue": given.pop("run_glue", None) or defaults.pop("run_glue")}
    defaults.pop("run_glue", None)
    name = given.get("protocol", defaults["protocol"])
    merged = {**defaults, **presets.get(name, {}), **given}
    problems = protocol_problems(merged, where)  # the file's own values too, as a cell takes them
    if problems:
        raise ValueError(problems)
    protocol = Protocol(**{k: merged[k] for k in PROTOCOL_KEYS})
    named = {**defaults, **presets.get(name, {})}
    rates, seeds = [float(x) for x in merged["learning_rates"]], seed_list(merged["seeds"], f"{where}.seeds")
    return protocol, rates, seeds, protocol_name(name, named, merged)


def protocol_name(name: str, named: dict[str, Any], ran: dict[str, Any]) -> str:
    """The protocol named by what ran: ``name`` alone when every setting is the named protocol's, else ``name``
    followed by each setting that departs from it ("papers, changed: learning_rates [5e-05, 0.0005], seeds 1"),
    so a page never calls a one-seed, capped grid by the papers' name."""
    changed = [f"{key} {ran[key]}" for key in named if key != "protocol" and ran[key] != named[key]]
    return f"{name}, changed: {', '.join(changed)}" if changed else name

