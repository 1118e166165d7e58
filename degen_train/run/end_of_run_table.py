"""What a finished run prints: where everything is, the numbers that matter, and what to type next."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

from torch import nn


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Total, embedding (lookup tables: tokens, positions, segments) and non-embedding parameter counts."""
    unique = {id(p): p for p in model.parameters()}
    lookups = {id(m.weight): m.weight for m in model.modules() if isinstance(m, nn.Embedding)}
    total = sum(p.numel() for p in unique.values())
    embeddings = sum(p.numel() for p in lookups.values())
    return {"total": total, "embeddings": embeddings, "non_embedding": total - embeddings}


def human(count: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(count) >= size:
            return f"{count / size:.2f}{unit}"
    return f"{count:.0f}"


def _number(value: Any, spec: str = ".4g") -> str:
    return "n/a" if value is None else format(value, spec)


def hydra_quoted(value: str) -> str:
    """``value`` as Hydra's override grammar reads it back: quoted when it holds anything but plain path characters
    (a sweep run's folder name has '=' and ',', which Hydra would split; non-ASCII letters it does not accept)."""
    if re.fullmatch(r"[A-Za-z0-9_./:+-]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def processes_row(summary: dict[str, Any]) -> str:
    """Where the run computed: processes (nodes × devices per node), the strategy, the precision and the device kind
    (the first thing to check on a new node: debug=smoke)."""
    config = summary.get("config") or {}
    trainer, strategy = config.get("trainer") or {}, config.get("strategy") or {}
    world = (summary.get("provenance") or {}).get("world_size", 1)
    name = strategy.get("name") or str(strategy.get("_target_", "auto")).rsplit(".", 1)[-1]
    layout = f"{trainer.get('num_nodes', 1)} node(s) × {trainer.get('devices', 1)} device(s)"
    return (f"{world} ({layout}), strategy {name}, precision {trainer.get('precision')}, accelerator "
            f"{trainer.get('accelerator')}")  # fmt: skip


def end_of_run_table(summary: dict[str, Any], run_dir: Path, overrides: list[str]) -> str:
    """A short two-column table; the commands are copy-pasteable (shell-quoted)."""
    run = run_dir.resolve()
    iso = summary.get("isotropy") or {}
    params = summary.get("parameters") or {}
    steps = int(summary.get("final_step") or 0)
    plain = [o[2:] if o.startswith("++trainer.") else o for o in overrides]  # as typed (overrides.py adds ++)
    kept = [o for o in plain if not o.startswith(("ckpt_path=", "trainer.max_steps=", "hydra.run.dir="))]
    scheduler = (summary.get("config") or {}).get("scheduler") or {}
    total = scheduler.get("total_steps")
    if total is not None and not any(o.startswith("scheduler.total_steps=") for o in kept):
        kept.append(f"scheduler.total_steps={total}")  # the schedule goes on where it was, no jump at the resume
    next_step = next_command(run, steps, total, scheduler.get("schedule"), kept)
    mfu = summary.get("mfu")
    speed = (f"{_number(summary.get('tokens_per_s'), ',.0f')} tokens/s" if summary.get("tokens_per_s") is not None
             else f"not measured ({summary.get('tokens_per_s_unmeasured') or 'no step was timed'})")  # fmt: skip
    if mfu is not None:
        all_flops = summary.get("mfu_total")  # null with callbacks.throughput.count_total_flops=false
        counted = f"total {all_flops:.1%}; " if all_flops is not None else ""
        speed += f", MFU {mfu:.1%} ({counted}peak: {summary.get('peak_flops_source')})"
    rows = [
        ("run", str(run)),
        ("steps", str(steps)),
        ("train loss", _number(summary.get("train_loss"))),
        ("val loss", f"{_number(summary.get('val_loss'))} (= {summary.get('val_loss_is') or 'n/a'})"),
        ("perplexity", f"{_number(summary.get('val_perplexity'))} (exp of {summary.get('val_perplexity_of')})"),
        *average_row(summary.get("weight_averaging") or {}),
        ("speed", speed),
        ("processes", processes_row(summary)),
        (
            "geometry",
            f"embedding mean cosine {_number(iso.get('isotropy/embedding/mean_cosine'))}, "
            f"IsoScore {_number(iso.get('isotropy/embedding/isoscore'))}",
        ),
        (
            "parameters",
            f"{human(params.get('total', 0))} ({human(params.get('embeddings', 0))} embedding, "
            f"{human(params.get('non_embedding', 0))} other)",
        ),
        ("export", str(run / "hf") if (run / "hf").exists() else "none (export_hf=false)"),
        ("logs", f"{run / 'logs' / 'metrics.csv'}, {run / 'train.log'}"),
        ("checkpoints", str(run / "checkpoints") if (run / "checkpoints").is_dir() else "none written"),
        next_step,
        ("analyse", shlex.join(["degen-analyze", str(run)])),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)


def average_row(averaging: dict) -> list[tuple[str, str]]:
    """The weight average's validation beside the trained model's (callbacks.weight_averaging, validate: both)."""
    if averaging.get("val_loss") is None:
        return []
    return [
        (
            f"{averaging['kind']} average",
            f"val loss {_number(averaging['val_loss'])}, perplexity "
            f"{_number(averaging.get('val_perplexity'))} ({averaging['validated']})",
        )
    ]


def launched_as(environ: dict[str, str] | None = None) -> list[str]:
    """How the printed command starts: ``degen-train``, or under torchrun (its environment: TORCHELASTIC_RUN_ID and
    LOCAL_WORLD_SIZE) the same torchrun line, so that a multi-process run's follow-up command starts as many
    processes again (issue 56.6: it printed plain degen-train)."""
    env = os.environ if environ is None else environ
    if not env.get("TORCHELASTIC_RUN_ID") or int(env.get("LOCAL_WORLD_SIZE", "1")) < 1:
        return ["degen-train"]
    nodes = int(env.get("WORLD_SIZE", "1")) // max(int(env.get("LOCAL_WORLD_SIZE", "1")), 1)
    line = ["torchrun", f"--nproc-per-node={env['LOCAL_WORLD_SIZE']}"]
    line += [f"--nnodes={nodes}", "--rdzv-backend=c10d", "--rdzv-endpoint=HOST:29500"] if nodes > 1 else []
    return [*line, shutil.which("degen-train") or "degen-train"]  # torchrun takes the script's path


def next_command(run: Path, steps: int, total: int | None, schedule: str | None, kept: list[str]) -> tuple[str, str]:
    """The table's row for going on: the resume command while the schedule has steps left (or never decays), else
    that the run is finished and how to train it longer. A resume past a decayed schedule trains at rate 0."""
    folder = f"hydra.run.dir={hydra_quoted(str(run))}"
    launcher = launched_as()
    if schedule == "constant" or (total is not None and steps < total):
        end = 2 * steps if schedule == "constant" else total
        return "resume", shlex.join([*launcher, *kept, folder, "ckpt_path=last", f"trainer.max_steps={end}"])
    longer = 2 * steps
    branch = [*launcher, *[o for o in kept if not o.startswith("scheduler.total_steps=")],
              f"branch_from={hydra_quoted(str(run))}@{steps}", f"trainer.max_steps={longer}",
              f"scheduler.total_steps={longer}", f"hydra.run.dir={hydra_quoted(str(run) + '-longer')}"]  # fmt: skip
    return "finished", (
        f"its schedule ended at step {steps} (the rate has decayed); to train longer, branch with a longer schedule "
        f"(the rate goes back to that schedule's value at step {steps}): {shlex.join(branch)}"
    )
