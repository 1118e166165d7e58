"""What ``trainer.deterministic`` needs from the device before the first product runs."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("degen_train")


def deterministic_environment(deterministic: bool | str | None) -> None:
    """trainer.deterministic=true (or warn): cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8, torch's
    documented value), set before the first CUDA matmul. Lightning sets the same when the Trainer is made, but the
    precision check has run a matmul on the device by then, and cuBLAS reads the variable once, when its handle is
    made."""
    if deterministic in (True, "warn") and "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        log.info("trainer.deterministic: CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS's reproducible workspace)")
