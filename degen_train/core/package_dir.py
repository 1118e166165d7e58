"""Where the package's own files are: the config folder inside the wheel, or at the top of a source checkout."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # degen_train/, where the wheel keeps conf/


def config_dir() -> Path:
    for candidate in (PACKAGE_DIR / "conf", PACKAGE_DIR.parent / "conf"):
        if (candidate / "train.yaml").exists():
            return candidate
    raise FileNotFoundError(f"no conf/train.yaml found in {PACKAGE_DIR} or its parent")
