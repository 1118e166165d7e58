"""One task of the simulated cluster's ``srun degen-train ...`` (degen_train/cluster/simulated.py): the fault its
drill asks for (``SIMULATED_FAULT=usr1_mid_step=N`` or ``usr1_mid_checkpoint=N``, injected on rank 0), the script's
words made tiny where `degen-cluster check` asks so (cluster/tiny_job.py; the words each task ran written beside
its log), then degen-train itself, as the installed command runs it. Started by the stand-in srun, never by a user."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str]) -> None:
    from degen_train.cluster.simulated import inject
    from degen_train.cluster.tiny_job import CHECK_VARIABLE, rewritten

    arguments = list(argv)
    asked = os.environ.get(CHECK_VARIABLE)
    if asked:
        check = json.loads(asked)
        arguments = rewritten(arguments, user=list(check["user"]), own_data=bool(check["own_data"]))
        folder = os.environ.get("SIMULATED_SLURM_DIR")
        if folder:  # what this task ran: the check's one-process reference is built from the same words
            step, rank = os.environ.get("SLURM_STEP_ID", "0"), os.environ.get("SLURM_PROCID", "0")
            (Path(folder) / f"step{step}.task{rank}.argv.json").write_text(json.dumps(arguments))
    fault = os.environ.get("SIMULATED_FAULT")
    if fault and os.environ.get("SLURM_PROCID") == "0":
        inject(fault)
    from degen_train.cli.train import main as train

    sys.argv = ["degen-train", *arguments]
    train()


if __name__ == "__main__":
    main(sys.argv[1:])
