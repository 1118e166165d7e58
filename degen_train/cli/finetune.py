"""degen-finetune MODEL_OR_RUN --task rte [--task sst2 ...] --data GLUE_DIR --out DIR: GLUE dev scores after
fine-tuning, the way papers report them (best learning rate by median over seeds, mean ± std over seeds).

A task of your own: --train FILE --dev FILE --text-columns premise,hypothesis --label-column label [--regression]
(CSV, TSV or JSON lines). Defaults: conf/finetune.yaml. A rerun into the same --out skips every finished cell.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import signal
import sys
from collections.abc import Sequence
from typing import get_args, get_type_hints

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from omegaconf import OmegaConf  # noqa: E402

from degen_train.core.arguments import whole  # noqa: E402
from degen_train.core.package_dir import config_dir  # noqa: E402
from degen_train.core.paths import writable_folder  # noqa: E402
from degen_train.finetune.section import PROTOCOL_KEYS, Protocol, ProtocolName  # noqa: E402

log = logging.getLogger("degen_train.finetune")
DEFAULT_TASKS = ["rte", "sst2", "stsb"]  # the three tasks the seed papers' small-compute tables share


def parser() -> argparse.ArgumentParser:
    defaults = OmegaConf.to_container(OmegaConf.load(config_dir() / "finetune.yaml"))
    p = argparse.ArgumentParser(prog="degen-finetune", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("model", help="a degen-train run folder (its hf/ export) or any HF model folder")
    p.add_argument("--task", action="append", dest="tasks", help=f"a GLUE task (default: {DEFAULT_TASKS})")
    p.add_argument("--data", help="the GLUE folder (holding RTE/, SST-2/, ...)")
    p.add_argument("--out", required=True, help="results: OUT/TASK/lr=LR/seed=S/result.json, OUT/glue.{json,md}")
    p.add_argument("--protocol", choices=get_args(ProtocolName),
                   help="papers (default: conf/finetune.yaml's grid, the BERT/RoBERTa papers' GLUE dev protocol) or "
                        "run_glue (HF run_glue.py with TrainingArguments' defaults: lr 5e-5, seed 42, batch 8, no "
                        "warm-up or weight decay, rows padded to --max-length); flags given win over both")  # fmt: skip
    p.add_argument("--lr", action="append", type=float, dest="learning_rates",
                   help=f"a learning rate of the grid, repeated (default: {defaults['learning_rates']})")  # fmt: skip
    p.add_argument("--seeds", type=whole(1, 1000), help=f"seeds 1..N per learning rate (default: "
                   f"{defaults['seeds']})")  # fmt: skip
    p.add_argument("--seed", action="append", type=whole(0, 2**32 - 1), dest="seed_list",
                   help="a seed of the grid, repeated (--seed 42: run_glue's); wins over --seeds")  # fmt: skip
    for key, hint in get_type_hints(Protocol).items():  # a flag each, typed as the protocol's field
        kinds = get_args(hint) or (hint,)
        if bool not in kinds:  # fused_adamw: --no-fused-adamw below
            kind = float if float in kinds else int if int in kinds else str
            p.add_argument(f"--{key.replace('_', '-')}", type=kind, dest=key, help=f"default: {defaults[key]}")
    p.add_argument("--no-fused-adamw", dest="fused_adamw", action="store_false", default=None,
                   help="torch's for-loop AdamW instead of its fused kernel")  # fmt: skip
    p.add_argument("--save-models", action="store_true",
                   help="keep each cell's fine-tuned model in OUT/TASK/lr=LR/seed=S/model/ (degen-analyze reads it)")
    p.add_argument("--devices", type=whole(1, 64), default=1,
                   help="processes per cell (DDP, one global batch of --batch-size rows): degen-finetune starts them "
                        "through torchrun; under a launcher of your own, leave it out")  # fmt: skip
    own = p.add_argument_group("a task of your own")
    own.add_argument("--train", help="its training file (.csv, .tsv or .jsonl)")
    own.add_argument("--dev", help="its dev file, scored after training")
    own.add_argument("--text-columns", help="one or two column names, comma-separated")
    own.add_argument("--label-column", default="label")
    own.add_argument("--regression", action="store_true", help="the label is a number (scored by Pearson/Spearman)")
    own.add_argument("--task-name", default="custom")
    p.set_defaults(default_tasks=DEFAULT_TASKS)
    return p


def finetune(args: argparse.Namespace) -> dict:
    from degen_train.finetune.grid import run_grid
    from degen_train.finetune.settings import resolve
    from degen_train.finetune.tasks import load_custom_task, load_glue_task
    from degen_train.metrics.encode import model_folder

    # Everything that can be checked is checked before a model is loaded.
    model_dir = model_folder(args.model)
    given = {k: getattr(args, k, None) for k in (*PROTOCOL_KEYS, "protocol", "learning_rates")}
    given["seeds"] = args.seed_list or args.seeds
    protocol, rates, seeds, name = resolve(given, where="degen-finetune")
    if args.train or args.dev:
        if not (args.train and args.dev and args.text_columns):
            raise ValueError("a task of your own needs --train FILE, --dev FILE and --text-columns A[,B]")
        tasks = [load_custom_task(args.task_name, args.train, args.dev, text_columns=args.text_columns.split(","),
                                  label_column=args.label_column, regression=args.regression)]  # fmt: skip
    else:
        if not args.data:
            raise ValueError("no GLUE folder: give --data DIR (the folder holding RTE/, SST-2/, ...)")
        tasks = [load_glue_task(name, args.data) for name in (args.tasks or args.default_tasks)]
    log.info("protocol %s: %d rate(s) %s x seeds %s per task", name, len(rates), rates, seeds)
    out = writable_folder(args.out, "--out")  # a handed-over OUT with a link in it is refused (core/paths.py)
    return run_grid(model_dir, tasks, learning_rates=rates, seeds=seeds, protocol=protocol, out=out,
                    save_models=args.save_models)  # fmt: skip


def torchrun_command(devices: int, argv: Sequence[str]) -> list[str]:
    """This command again under torchrun with ``devices`` processes on this machine (--devices left out)."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--devices":
            skip = True
        elif not arg.startswith("--devices="):
            rest.append(arg)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={devices}",
            sys.argv[0], *rest]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    args = parser().parse_args(argv)
    if args.devices > 1 and "WORLD_SIZE" not in os.environ:  # not yet under a launcher: start one
        os.execv(sys.executable, torchrun_command(args.devices, sys.argv[1:] if argv is None else argv))
    from degen_train.core.quiet import silence_known_noise

    silence_known_noise()
    from degen_train.callbacks.preemption import PREEMPTED_EXIT
    from degen_train.finetune.cell import STOP_ASKED, CellsInterrupted

    def asked_to_stop(signum: int, frame: object) -> None:
        STOP_ASKED.set()
        log.warning("%s received: the grid stops at the cell in progress's next step", signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, asked_to_stop)
    try:
        summary = finetune(args)
    except CellsInterrupted as stopped:
        print(f"degen-finetune: {stopped}. Every finished cell is in {args.out}; the same command goes on with the "
              f"rest (exit code {PREEMPTED_EXIT}, 'resume me')", file=sys.stderr)  # fmt: skip
        sys.exit(PREEMPTED_EXIT)
    except (ValueError, OSError) as error:
        from degen_train.core.io import as_write_limit

        if isinstance(error, OSError):
            error = as_write_limit(error, pathlib.Path(args.out), "give --out a folder on another disk") or error
        sys.exit(f"degen-finetune: error: {error}")
    from degen_train.finetune.grid import format_summary

    if int(os.environ.get("RANK", 0)) == 0:
        print(format_summary(summary), end="")


if __name__ == "__main__":
    main()
