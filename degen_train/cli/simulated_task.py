"""One task of the simulated cluster's ``srun degen-train ...`` (degen_train/cluster/simulated.py): the fault its
drill asks for (``SIMULATED_FAULT=usr1_mid_step=N`` or ``usr1_mid_checkpoint=N``, injected on rank 0), then
degen-train itself, as the installed command runs it. Started by the stand-in srun, never by a user."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> None:
    from degen_train.cluster.simulated import inject

    fault = os.environ.get("SIMULATED_FAULT")
    if fault and os.environ.get("SLURM_PROCID") == "0":
        inject(fault)
    from degen_train.cli.train import main as train

    sys.argv = ["degen-train", *argv]
    train()


if __name__ == "__main__":
    main(sys.argv[1:])
