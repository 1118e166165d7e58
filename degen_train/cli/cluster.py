"""degen-cluster: check a SLURM batch script before it waits in the queue, and compare two runs.

    degen-cluster check SCRIPT [--nodes N] [--ntasks-per-node M] [--work DIR] [--limit S] [--own-data] [KEY=VALUE ...]
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
LIMIT = 600.0  # cluster/check.LIMIT, here so that --help imports nothing heavy


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
    check.add_argument("--nodes", type=int, help="simulated nodes (default: the script's #SBATCH --nodes, at most 2)")
    check.add_argument("--ntasks-per-node", type=int, help="tasks per node (default: the script's "
                       "#SBATCH --ntasks-per-node, at most 2)")  # fmt: skip
    check.add_argument("--work", type=Path, help="a new or empty folder of the check's own for the jobs' folders "
                       "(default: a new temporary folder)")  # fmt: skip
    check.add_argument("--limit", type=float, default=LIMIT, metavar="SECONDS", help=f"the first job's time limit "
                       f"(default {LIMIT:.0f}); each later one 3 × the first's time, at least 120 s")  # fmt: skip
    check.add_argument("--own-data", action="store_true", help="train the tiny job on the script's own corpus "
                       "(default: the builtin one, which needs no download or preparation)")  # fmt: skip
    check.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="passed to degen-train after the check's "
                       "own, in any order with the options (a bigger model, more steps)")  # fmt: skip
    compare = commands.add_parser("compare", help="two runs' or exports' weights, settings and final loss")
    compare.add_argument("first", type=Path, help="a run folder, a checkpoint, or an export (RUN/hf)")
    compare.add_argument("second", type=Path)
    top.set_defaults(check_parser=check)
    return top


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = parser()
    if argv[:1] == ["check"]:  # options and overrides in any order, as the usage line shows them
        args = top.get_default("check_parser").parse_intermixed_args(argv[1:])
        args.command = "check"
    else:
        args = top.parse_args(argv)
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
    if (args.nodes is not None and args.nodes < 1) or (args.ntasks_per_node is not None and args.ntasks_per_node < 1):
        sys.exit("degen-cluster check: error: --nodes and --ntasks-per-node are each at least 1")
    if not 10 <= args.limit <= 86_400:
        sys.exit(f"degen-cluster check: error: --limit {args.limit:g}: seconds from 10 to 86400")
    work = own_folder(args.work) if args.work is not None else None
    from degen_train.cluster.check import check, plan
    from degen_train.cluster.sbatch_script import ScriptError

    try:
        planned = plan(args.script.resolve(), nodes=args.nodes, per_node=args.ntasks_per_node,
                       overrides=list(args.overrides), limit=args.limit, own_data=args.own_data)  # fmt: skip
    except (ScriptError, ValueError, OSError) as error:
        sys.exit(f"degen-cluster check: error: {error}")
    start = time.perf_counter()
    print(f"degen-cluster check {args.script}: signalled, requeued, left alone, and one process (a few minutes on a "
          f"CPU)", *planned.said(), sep="\n  ", flush=True)  # fmt: skip
    lines = check(planned, work=work)
    print("\n".join(str(line) for line in lines))
    held = sum(line.ok for line in lines)
    print(f"{held} of {len(lines)} checks hold ({time.perf_counter() - start:.0f} s)")
    sys.exit(0 if held == len(lines) else 1)


def own_folder(given: Path) -> Path:
    """``--work``: absolute, no link at any depth of the path given, and new or an empty folder (the check deletes
    nothing and reads no earlier check's logs); else one line naming it, exit 2."""
    import os

    path = Path(os.path.abspath(given.expanduser()))
    for candidate in (path, *path.parents):
        if candidate.is_symlink():
            sys.exit(f"degen-cluster check: error: --work {given}: {candidate} is a link; the check writes only into "
                     f"a folder of its own, never through a link: give a plain path")  # fmt: skip
    if os.path.lexists(path):
        if not path.is_dir():
            sys.exit(f"degen-cluster check: error: --work {given}: {path} exists and is not a folder; give a new "
                     f"or empty folder")  # fmt: skip
        held = sorted(p.name for p in path.iterdir())
        if held:
            sys.exit(f"degen-cluster check: error: --work {given}: {path} already holds {', '.join(held[:3])}"
                     f"{' ...' if len(held) > 3 else ''}; the check writes into a new or empty folder of its own, "
                     f"so nothing of yours is replaced and no earlier check's logs are read: give another")  # fmt: skip
    for candidate in path.parents:
        if os.path.lexists(candidate) and not candidate.is_dir():
            sys.exit(f"degen-cluster check: error: --work {given}: {candidate} is not a folder")
    return path


if __name__ == "__main__":
    main()
