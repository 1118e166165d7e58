"""degen-train: pretraining from a Hydra config (``degen-train recipe=bert_mlm_nsp model=mini``); the run itself is
degen_train/run/pretrain.py's ``train``.

What the command line alone can tell is answered before torch, Lightning or transformers load (they take most of a
start-up): the overrides' form, the composition, the typed schema and the loss terms' options
(run/config_alone.py), ``--list`` and ``--help``. The frameworks are imported only for a config that passed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from degen_train.config.inherited import inherited_overrides  # noqa: E402
from degen_train.config.overrides import open_trainer_keys, refuse_unquoted_equals  # noqa: E402
from degen_train.core.exit_codes import PREEMPTED_EXIT  # noqa: E402
from degen_train.core.package_dir import config_dir  # noqa: E402
from degen_train.core.quiet import silence_known_noise  # noqa: E402
from degen_train.losses.declarations import refuse_unknown_term_options  # noqa: E402
from degen_train.run.sweep_stop import STOPPED, end_workers  # noqa: E402
from degen_train.storage.runlock import RunDirBusy, check_output_folders_in  # noqa: E402


def _refused(error: BaseException) -> None:
    """One line for bad input, a full disk, a busy folder or a diverged run (its message says what was kept and what
    to change), exit 1; HYDRA_FULL_ERROR=1 raises it whole."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    print(f"degen-train: error: {error}\n(HYDRA_FULL_ERROR=1 shows where it was raised)", file=sys.stderr)
    raise SystemExit(1) from None


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from degen_train.run.config_alone import check_config_alone

    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    if not multirun and OmegaConf.select(cfg, "plan.only", default=False) is True:  # debug=plan: nothing written
        from degen_train.core.io import leave_no_run_folder

        leave_no_run_folder(Path(HydraConfig.get().runtime.output_dir))
    alone = None
    if not multirun:  # a sweep member's bad config is that member's failure (run_in_sweep records it), not the sweep's
        try:
            alone = check_config_alone(cfg)  # the config alone, before the frameworks load
        except ValueError as error:
            _refused(error)
    from degen_train.callbacks.divergence import DivergenceError
    from degen_train.callbacks.preemption import PreparationStopped, RunPreempted
    from degen_train.run.pretrain import train
    from degen_train.run.sweep import run_in_sweep, search_objective

    if multirun:  # each member checked by its run, with its own resume (run_in_sweep sets ckpt_path=auto)
        return run_in_sweep(cfg, train)
    try:
        summary = train(cfg, alone=alone)
    except RunPreempted as preempted:
        print(f"degen-train: {preempted}. Resume with ckpt_path=auto (same command), exit code {PREEMPTED_EXIT}")
        raise SystemExit(PREEMPTED_EXIT) from None
    except PreparationStopped as stopped:
        print(f"degen-train: {stopped} (exit code {PREEMPTED_EXIT})", file=sys.stderr)
        raise SystemExit(PREEMPTED_EXIT) from None
    except (ValueError, OSError, RunDirBusy, DivergenceError) as error:
        _refused(error)
    return None if "prepared" in summary else search_objective(summary, cfg.search)


# Hydra's own flags (hydra/_internal/utils.py get_args_parser) that take a value: the value is the next argument.
FLAGS_WITH_VALUE = {"-c", "--cfg", "-p", "--package", "-cp", "--config-path", "-cn", "--config-name", "-cd",
                    "--config-dir", "--experimental-rerun", "-sc", "--shell-completion"}  # fmt: skip
INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}  # --info's optional value


def split_flags(arguments: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's flags with their values, the overrides), wherever a user put the flags: `-m` first or last."""
    flags: list[str] = []
    overrides: list[str] = []
    remaining = iter(arguments)
    for argument in remaining:
        if not argument.startswith("-"):  # an override (key=value, +key=value, ~key)
            overrides.append(argument)
            continue
        flags.append(argument)
        if argument in FLAGS_WITH_VALUE:
            flags.append(next(remaining, ""))
        elif argument in ("-i", "--info"):
            following = next(remaining, None)
            if following in INFO_TOPICS:
                flags.append(following)
            elif following is not None:
                overrides.append(following)
    return flags, overrides


def command_line(arguments: list[str]) -> list[str]:
    """The arguments Hydra reads for these of degen-train: a branch's parent's overrides first (read as data), then
    this command's, any Trainer argument open as trainer.KEY, Hydra's flags before them all. Raises ValueError or
    NotADirectoryError naming a bad setting, before Hydra composes anything."""
    flags, overrides = split_flags(arguments)
    overrides = inherited_overrides(overrides)  # a branch is its parent plus what this command changes
    overrides = open_trainer_keys(overrides)  # any Trainer argument as trainer.KEY=VALUE
    refuse_unknown_term_options(overrides)  # a loss option's typo named with the close ones, not "use +key"
    refuse_unquoted_equals(overrides)  # ckpt_path=RUN/checkpoints/step=00000002.ckpt: say how to quote it
    check_output_folders_in(overrides)
    return [*flags, *overrides]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("--list", "--reproduce"):
        if sys.argv[1] == "--list":
            from degen_train.cli.listing import print_listing

            print_listing()
            return
        if len(sys.argv) < 3:
            raise SystemExit("usage: degen-train --reproduce RUN_DIR [KEY=VALUE ...]")
        from degen_train.cli.rerun import reproduce_argv

        sys.argv = [sys.argv[0], *reproduce_argv(sys.argv[2], sys.argv[3:])]
    silence_known_noise()
    try:
        sys.argv = [sys.argv[0], *command_line(sys.argv[1:])]
    except (NotADirectoryError, ValueError) as error:
        sys.exit(f"degen-train: error: {error}")
    try:
        _hydra_main()
    finally:
        end_workers()  # a joblib sweep's worker processes end with it (run/sweep_stop.py)
    if "degen_train.run.sweep" not in sys.modules:  # no run started (--help, --cfg, a refused config)
        return
    from degen_train.run.sweep import FAILED_RUNS, sweep_summary_line

    summary_line = sweep_summary_line()
    if STOPPED["signal"] is not None:
        print(f"{summary_line or 'the sweep'}\ndegen-train: the sweep was stopped; run the same command again to "
              f"resume it (exit code {PREEMPTED_EXIT})", file=sys.stderr)  # fmt: skip
        sys.exit(PREEMPTED_EXIT)
    if summary_line:
        print(summary_line)
    if FAILED_RUNS:  # the other runs of the sweep ran; the command still says that some failed (summary_line has
        # read them from the sweep folder when the jobs ran in other processes)
        sys.exit(1)


if __name__ == "__main__":
    main()
