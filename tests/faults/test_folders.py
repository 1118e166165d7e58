"""Run folders: two runs started together get their own; a branch never lands in (or writes to) its parent's
folder; a checkpoint's sidecar cannot make an older checkpoint win over a verified newer one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST
from tests.helpers import command, run


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory, drill: list[str]) -> Path:
    folder = tmp_path_factory.mktemp("parent") / "run"
    keep = ["callbacks.checkpoint.every_n_train_steps=2", "callbacks.checkpoint.save_top_k=-1", "export_hf=false"]
    result = command("degen-train", *FAST, *drill, "trainer.max_steps=4", *keep, f"hydra.run.dir={folder}")
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


def test_two_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path: Path) -> None:
    """Issue drill: without hydra.run.dir both picked outputs/DATE/TIME and one died with a traceback."""
    command = [str(Path(sys.executable).parent / "degen-train"), *FAST, "trainer.max_steps=1", "export_hf=false",
               "final_validation=false"]  # fmt: skip
    started = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]  # fmt: skip
    results = [(p.wait(timeout=600), p.stderr.read()) for p in started]
    assert all(code == 0 for code, _ in results), [err[-2000:] for _, err in results]
    folders = sorted((tmp_path / "outputs").glob("*/*"))
    assert len(folders) == 2 and all((f / "summary.json").is_file() for f in folders)


@pytest.mark.parametrize("inside", ["sub", "checkpoints"])
def test_a_branch_inside_its_parents_folder_is_refused(tmp_path: Path, parent: Path, drill: list[str],
                                                      inside: str) -> None:  # fmt: skip
    """Issue drill: a branch into PARENT/sub or PARENT/checkpoints wrote a whole run inside the parent."""
    before = sorted(p.relative_to(parent) for p in parent.rglob("*"))
    with pytest.raises(ValueError, match=rf"the run folder {parent / inside} lies inside the run folder {parent}"):
        run(parent / inside, *drill, f"branch_from={parent}@2", "trainer.max_steps=6", "export_hf=false")
    assert sorted(p.relative_to(parent) for p in parent.rglob("*")) == before


def test_a_refused_branch_appends_nothing_to_its_parents_log(parent: Path, drill: list[str]) -> None:
    """Issue drill: a branch into the parent's own folder was refused, but only after a line went to the parent's
    train.log (Hydra had opened it)."""
    log = (parent / "train.log").read_bytes()
    for folder in (parent, parent / "sub"):
        result = command("degen-train", *FAST, *drill, f"branch_from={parent}@2", "trainer.max_steps=6",
                         f"hydra.run.dir={folder}")  # fmt: skip
        assert result.returncode != 0 and "degen-train: error:" in result.stderr
    assert (parent / "train.log").read_bytes() == log and not (parent / "sub").exists()


def test_an_edited_sidecar_cannot_win_over_a_verified_newer_checkpoint(
    tmp_path: Path, parent: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue drill: step=00000002.ckpt's sidecar edited to claim step 99 was chosen over the verified last.ckpt
    (step 4), silently. Its own header says 2: it is passed over, and the reason logged."""
    import shutil

    from degen_train.storage.checkpoints import newest_checkpoint, sidecar_of

    folder = tmp_path / "run"
    shutil.copytree(parent, folder)
    sidecar = sidecar_of(folder / "checkpoints" / "step=00000002.ckpt")
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "global_step": 99}))
    chosen, notes = newest_checkpoint(folder / "checkpoints")
    assert chosen == folder / "checkpoints" / "last.ckpt"
    assert "step=00000002.ckpt: its sidecar claims step 99, the file holds step 2" in " ".join(notes)

