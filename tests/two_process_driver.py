"""One rank of a two-process job that trains several runs in a row: ``python -m tests.two_process_driver SPEC``.

Started twice by ``tests.helpers.on_two_processes`` with the launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), as torchrun would start ``degen-train``: Lightning reads it and starts no process of its
own. Each run of SPEC (a JSON list of {"run_dir", "overrides"}, and optionally "seconds_per_update": {rank: s}, the
clock callbacks.cadence reads) is ``train(load_config(...))``, the same call as
``degen-train``'s, with RUN/train.log written as the command writes it. Paying the imports once for every run is
what makes the two-process tests affordable; a failing run ends the process at once (its partner is then stopped
by the harness) so that no rank waits in a collective for a partner that is gone.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from degen_train.config import load_config
from degen_train.core.io import RunLogFileHandler
from degen_train.run.pretrain import train


def main(spec: Path) -> None:
    logging.getLogger().setLevel(logging.INFO)  # as Hydra's job logging sets it for degen-train
    for case in json.loads(spec.read_text()):
        run_dir = Path(case["run_dir"])
        run_dir.mkdir(parents=True, exist_ok=True)  # as Hydra makes hydra.run.dir before the run starts
        handler = RunLogFileHandler(str(run_dir / "train.log"))
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        logging.getLogger().addHandler(handler)
        if "seconds_per_update" in case:  # a clock of the test's own, per rank (tests/test_cadence.py)
            from degen_train.callbacks import cadence

            cadence.CLOCK = fake_clock(float(case["seconds_per_update"][os.environ["RANK"]]))
        try:
            train(load_config(case["overrides"], run_dir=run_dir))
        except BaseException:  # noqa: BLE001 - any failure ends this rank, loudly
            print(f"two_process_driver: {run_dir} failed", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()


def fake_clock(seconds_per_call: float) -> Callable[[], float]:
    """A clock that moves ``seconds_per_call`` at each reading."""
    ticks = iter(range(10**9))
    return lambda: seconds_per_call * next(ticks)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
