"""Issue 72.2–72.3: "your own run" vouches for every file a door reads (config.yaml, overrides.json) and for the
folder itself (a random token written once at its creation), and the question is asked through the one reader of
handed-over files, so a FIFO or a link to /dev/zero is refused at once instead of hanging a branch, --reproduce,
degen-report or degen-analyze."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from degen_train.core.own_runs import TOKEN, is_own, new_run_id, remember


def own_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("seed: 0\ncallbacks:\n  checkpoint:\n    save_last: true\n")
    (folder / "overrides.json").write_text(json.dumps(["trainer.max_steps=20"]))
    remember(folder, new_run_id())
    return folder


def test_a_listed_run_is_own_and_holds_its_token(tmp_path: Path) -> None:
    run = own_run(tmp_path / "run")
    assert is_own(run) and len((run / TOKEN).read_text().strip()) == 32


def test_a_folder_recreated_where_the_users_run_was_is_a_strangers(tmp_path: Path) -> None:
    """TR1: a stranger's folder put where the user's deleted run was, the same config.yaml and overrides.json byte
    for byte (anyone can write them), was taken as "your own run (listed in your runs)"."""
    run = own_run(tmp_path / "run")
    kept = {name: (run / name).read_bytes() for name in ("config.yaml", "overrides.json")}
    shutil.rmtree(run)
    run.mkdir()
    for name, data in kept.items():
        (run / name).write_bytes(data)
    assert not is_own(run)  # no token
    (run / TOKEN).write_text("0" * 32 + "\n")
    assert not is_own(run)  # another token


def test_an_edited_overrides_file_is_no_longer_vouched_for(tmp_path: Path) -> None:
    """TR3: an own run whose overrides.json was edited afterwards carried a divergence guard set to skip a million
    times; the registry held only config.yaml's digest."""
    run = own_run(tmp_path / "run")
    (run / "overrides.json").write_text(json.dumps(["callbacks.divergence.on_nonfinite=skip"]))
    assert not is_own(run)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "link_to_dev_zero", "link"])
def test_a_config_that_is_no_plain_file_is_never_opened_to_hash(tmp_path: Path, kind: str) -> None:
    """TR10–TR14: is_own hashed RUN/config.yaml with a plain open() before the reader looked at it: a FIFO hung every
    door, a link to /dev/zero read forever. Now the reader refuses it (a stranger's folder), at once."""
    run = own_run(tmp_path / "run")
    (run / "config.yaml").unlink()
    if kind == "fifo":
        os.mkfifo(run / "config.yaml")
    elif kind == "link_to_dev_zero":
        (run / "config.yaml").symlink_to("/dev/zero")
    else:
        (tmp_path / "elsewhere.yaml").write_text("seed: 0\n")
        (run / "config.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    assert not is_own(run)
