"""Run ``degen-train`` with one fault injected, as an operator's kill -9 would hit it.

    python -m tests.faults.driver FAULT [overrides...]

FAULT is one of: ``kill_at_step=N`` (mid-step N, before its update), ``kill_after_file=NAME`` (just after
checkpoint NAME is renamed into place, before anything else is written), ``kill_mid_write=NAME`` (half of
NAME's bytes written to its staging file), ``kill_in_final_validation``, ``kill_in_export`` (export files
written, not yet renamed into place). The process dies by SIGKILL: no cleanup code runs.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def inject(fault: str) -> None:
    name, _, value = fault.partition("=")
    if name == "kill_at_step":
        from degen_train.run.module import PretrainModule

        step = int(value)
        original_step = PretrainModule.training_step

        def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN202
            loss = original_step(self, batch, batch_idx)
            if self.global_step == step:
                die()
            return loss

        PretrainModule.training_step = training_step
    elif name == "kill_after_file":
        import degen_train.storage.checkpoints as checkpoints

        original_save = checkpoints.save_checkpoint_file

        def save_checkpoint_file(checkpoint, path):  # noqa: ANN001, ANN202
            original_save(checkpoint, path)
            if Path(path).name == value:
                die()

        checkpoints.save_checkpoint_file = save_checkpoint_file
    elif name == "kill_mid_write":
        from degen_train.storage.checkpoints import _HashingWriter

        original_write = _HashingWriter.write

        def write(self, data):  # noqa: ANN001, ANN202
            staging = os.path.basename(os.readlink(f"/proc/self/fd/{self.stream.fileno()}"))
            if staging.startswith(f".{value}.") and self.size > 0:
                original_write(self, bytes(data)[: len(data) // 2])
                self.stream.flush()
                os.fsync(self.stream.fileno())
                die()
            return original_write(self, data)

        _HashingWriter.write = write
    elif name == "kill_in_final_validation":
        from degen_train.run.module import PretrainModule

        original_validation = PretrainModule.validation_step

        def validation_step(self, batch, batch_idx):  # noqa: ANN001, ANN202
            if self.trainer.state.fn == "validate":
                die()
            return original_validation(self, batch, batch_idx)

        PretrainModule.validation_step = validation_step
    elif name == "kill_in_export":
        import degen_train.run.export as export
        from degen_train.core.io import atomic_directory

        @contextmanager
        def dying_directory(target, **kwargs):  # noqa: ANN001, ANN202
            with atomic_directory(target, **kwargs) as staging:
                yield staging
                die()

        export.atomic_directory = dying_directory
    else:
        raise SystemExit(f"unknown fault {fault!r}")


if __name__ == "__main__":
    inject(sys.argv[1])
    from degen_train.cli.train import main

    sys.argv = ["degen-train", *sys.argv[2:]]
    main()
