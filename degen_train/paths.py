"""Where the config folder is: inside the wheel, or at the top of a source checkout."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def config_dir() -> Path:
    for candidate in (PACKAGE_DIR / "conf", PACKAGE_DIR.parent / "conf"):
        if (candidate / "train.yaml").exists():
            return candidate
    raise FileNotFoundError(f"no conf/train.yaml found in {PACKAGE_DIR} or its parent")


def check_output_folder(path: str | Path, key: str) -> None:
    """Refuse an output folder that cannot be one: ``path`` or a parent is an existing file (one line, naming it)."""
    path = Path(path).expanduser()
    for candidate in (path, *path.parents):
        if candidate.exists():
            if not candidate.is_dir():
                what = "is" if candidate == path else f"lies inside {candidate}, which is"
                raise NotADirectoryError(
                    f"{key}={path}: it {what} a file, not a folder; "
                    f"give {key} a folder path (created if missing)"
                )
            return


def check_output_folders_in(arguments: list[str]) -> None:
    """check_output_folder for ``hydra.run.dir=`` / ``hydra.sweep.dir=`` on a command line (Hydra would fail later
    with a bare traceback); values that interpolate (``${now:...}``) are left to Hydra."""
    for argument in arguments:
        key, _, value = argument.partition("=")
        if key.lstrip("+") in ("hydra.run.dir", "hydra.sweep.dir") and value and "${" not in value:
            check_output_folder(value.strip("'\""), key.lstrip("+"))
