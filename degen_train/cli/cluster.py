"""degen-cluster: check a SLURM batch script before it waits in the queue, and compare two runs.

    degen-cluster check SCRIPT [--nodes N] [--ntasks-per-node M] [KEY=VALUE ...]
    degen-cluster compare RUN_OR_EXPORT_A RUN_OR_EXPORT_B
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

OVERRIDE = re.compile(r"^[+~]{0,2}[A-Za-z_][\w./@-]*(=.*)?$")


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line naming the bad word, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> Parser:
    top = Parser(prog="degen-cluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True, parser_class=Parser)
    check = commands.add_parser("check", help="run a batch script on simulated nodes, signal, requeue and compare",
                                description="Runs SCRIPT as SLURM would on N simulated nodes × M tasks of this CPU "
                                "(gloo), a tiny model for 6 updates with dropout 0 unless your overrides say "
                                "otherwise: SIGUSR1 mid-update, a requeue with the same job id, the same job left "
                                "alone, and one process holding the global batch. Prints one line per check; exit 0 "
                                "when every one holds. The simulated cluster's fault switch for your own drills: "
                                "SIMULATED_FAULT=usr1_mid_step=N or usr1_mid_checkpoint=N (docs/gpu-node.md).")
    check.add_argument("script", type=Path, help="your batch script (a copy of conf/cluster/degen-train.sbatch)")
    check.add_argument("--nodes", type=int, default=2, help="simulated nodes (default 2)")
    check.add_argument("--ntasks-per-node", type=int, default=2, help="tasks per node (default 2)")
    check.add_argument("--work", type=Path, help="where the jobs' folders go (default: a new temporary folder)")
    check.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="passed to degen-train after the check's "
                       "own (a bigger model, more steps)")  # fmt: skip
    compare = commands.add_parser("compare", help="two runs' or exports' weights, settings and final loss")
    compare.add_argument("first", type=Path, help="a run folder, a checkpoint, or an export (RUN/hf)")
    compare.add_argument("second", type=Path)
    return top


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "compare":
        from degen_train.cluster.compare import compare

        try:
            found = compare(args.first, args.second)
        except (ValueError, FileNotFoundError, OSError) as error:
            sys.exit(f"degen-cluster compare: error: {error}")
        print("\n".join(found.lines()))
        return
    words = [o for o in args.overrides if not OVERRIDE.match(o) or "=" not in o and not o.startswith("~")]
    if words:
        sys.exit(f"degen-cluster check: error: {words[0]!r} is not an override (KEY=VALUE): the check runs your "
                 f"script, never a default training run; see degen-cluster check --help")
    if not args.script.is_file():
        sys.exit(f"degen-cluster check: error: {args.script}: no such batch script")
    if args.nodes < 1 or args.ntasks_per_node < 1:
        sys.exit("degen-cluster check: error: --nodes and --ntasks-per-node are each at least 1")
    from degen_train.cluster.check import check

    start = time.perf_counter()
    print(f"degen-cluster check {args.script}: {args.nodes} simulated node(s) × {args.ntasks_per_node} task(s), "
          f"signalled, requeued, left alone, and one process (a few minutes on a CPU)", flush=True)  # fmt: skip
    lines = check(args.script.resolve(), nodes=args.nodes, per_node=args.ntasks_per_node,
                  overrides=list(args.overrides), work=args.work)  # fmt: skip
    print("\n".join(str(line) for line in lines))
    held = sum(line.ok for line in lines)
    print(f"{held} of {len(lines)} checks hold ({time.perf_counter() - start:.0f} s)")
    sys.exit(0 if held == len(lines) else 1)


if __name__ == "__main__":
    main()
