"""Files a run reads and writes: disk full, a crafted pickle, bad checkpoints, one run per folder, finished runs."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from degen_train.storage.checkpoints import CheckpointError, load_checkpoint_file, verified_step
from degen_train.storage.runlock import RunDirBusy, run_dir_lock
from tests.conftest import REPO
from tests.helpers import degen_train, run


@contextmanager
def tmpfs(where: Path, *options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``where`` for the block, or the test skips saying why."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_disk_full_leaves_nothing_torn_and_the_run_resumes(tmp_path: Path, drill: list[str]) -> None:
    with tmpfs(tmp_path / "small", "size=10m") as disk:
        with pytest.raises(OSError, match=r"could not write checkpoint .*last\.ckpt: No space left on device; nothing "
                                          r"was written under that name\. Whole checkpoints in \S+: step=00000002\."
                                          r"ckpt \(step 2\)"):  # fmt: skip
            run(disk / "run", *drill)
        folder = disk / "run" / "checkpoints"
        assert sorted(p.name for p in folder.iterdir()) == ["step=00000002.ckpt", "step=00000002.ckpt.meta.json"]
        assert verified_step(folder / "step=00000002.ckpt") == 2
        subprocess.run(["mount", "-o", "remount,size=256m", str(disk)], check=True)  # the operator frees space
        summary = run(disk / "run", *drill, "ckpt_path=last")
        assert summary["final_step"] == 8


def test_a_failed_background_write_stops_the_run_naming_it_and_the_whole_ones(tmp_path: Path, drill: list[str]) -> None:
    """Issue 43 drill 6: a failed write on the writer thread was reported only at the next checkpoint, whose message
    said "earlier checkpoints are untouched" while the earlier one had also failed. Now the run stops at the next
    step, naming the file, its step and the checkpoints that are whole; nothing older is rotated away for it."""
    from degen_train.storage.checkpoints import CheckpointWriteFailed

    with tmpfs(tmp_path / "small", "size=10m") as disk:
        failed = r"the checkpoint \S+last\.ckpt \(step 2\) could not be written on the writer thread: .*No space"
        whole = r"Whole checkpoints in \S+checkpoints: step=00000002\.ckpt \(step 2\); ckpt_path=auto resumes"
        with pytest.raises(CheckpointWriteFailed, match=rf"{failed}.*{whole}"):
            run(disk / "run", *drill, "callbacks.checkpoint.background=true")
        folder = disk / "run" / "checkpoints"
        assert verified_step(folder / "step=00000002.ckpt") == 2 and not (folder / "last.ckpt").exists()


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path: Path, drill: list[str]) -> None:
    marker, crafted = tmp_path / "code-ran", tmp_path / "crafted.ckpt"
    torch.save({"state_dict": {}, "degen_train": _RunsCode(marker)}, crafted)
    with pytest.raises(CheckpointError, match=r"refused to load .*crafted\.ckpt: .*not a tensor.*\(posix\.system\)"):
        run(tmp_path / "run", *drill, f"ckpt_path={crafted}")
    assert not marker.exists()
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", r"is empty \(0 bytes\)"), (random.Random(0).randbytes(4096), r"is not a readable PyTorch checkpoint")],
    ids=["empty", "random-bytes"],
)
def test_a_broken_checkpoint_is_named(tmp_path: Path, drill: list[str], content: bytes, message: str) -> None:
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        run(tmp_path / "run", *drill, f"ckpt_path={broken}")
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint_file(broken)


def test_a_second_run_into_a_busy_folder_is_refused_naming_the_holder(tmp_path: Path, drill: list[str]) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match=rf"in use by pid {holder.pid} on host {socket.gethostname()}"):
            run(tmp_path, *drill, "trainer.max_steps=2")
        assert not (tmp_path / "config.yaml").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # a holder killed by -9 leaves no stale lock
        holder.wait()
    assert run(tmp_path, *drill, "trainer.max_steps=2")["final_step"] == 2


HOLD_LOCK = """
import sys, time
from degen_train.storage.runlock import run_dir_lock
with run_dir_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_the_lock_is_exclusive_within_one_process_too(tmp_path: Path) -> None:
    with run_dir_lock(tmp_path), pytest.raises(RunDirBusy, match=f"in use by pid {os.getpid()}"):
        with run_dir_lock(tmp_path):
            pass


def test_a_finished_run_is_left_untouched(tmp_path: Path, drill: list[str], reference: Path) -> None:
    shutil.copytree(reference, tmp_path / "run")
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file() and p.name != ".lock"}
    summary = run(tmp_path / "run", *drill, "ckpt_path=last")
    assert summary["final_step"] == 8 and summary["train_loss"] is not None
    after = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before
    with pytest.raises(FileExistsError, match=r"already holds checkpoints .*Resume it with ckpt_path=last"):
        run(tmp_path / "run", *drill)  # a fresh run would overwrite it


def test_ckpt_path_auto_starts_fresh_then_resumes(tmp_path: Path, drill: list[str]) -> None:
    assert run(tmp_path, *drill, "trainer.max_steps=2", "ckpt_path=auto")["final_step"] == 2
    assert run(tmp_path, *drill, "trainer.max_steps=4", "ckpt_path=auto")["final_step"] == 4


def test_a_sweep_whose_runs_failed_exits_non_zero_with_the_count(tmp_path: Path) -> None:
    result = degen_train(
        "-m", "data=text", "data.path=/nonexistent/a.txt,/nonexistent/b.txt", f"hydra.sweep.dir={tmp_path}"
    )
    assert result.returncode == 1, result.stderr[-2000:]
    outcome = f"sweep of 2 runs in {tmp_path}: 0 trained, 0 finished before (skipped), 2 failed (see RUN/failed.json"
    assert outcome in result.stdout
    assert len(list(tmp_path.glob("*/failed.json"))) == 2


def test_a_cache_entry_finished_by_another_process_meanwhile_is_kept(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The check-then-rename race (two builds at once, or a stale NFS view): the other process's entry appears
    after the existence check; before, the rename failed with 'Directory not empty' and left a staging folder."""
    import degen_train.core.io as io_module

    target = tmp_path / "cache" / "entry"
    real_replace = os.replace

    def someone_else_finishes_first(source, destination):  # noqa: ANN001, ANN202
        if Path(destination) == target and not target.exists():
            target.mkdir()
            (target / "theirs.txt").write_text("built by the other process")
        return real_replace(source, destination)

    monkeypatch.setattr(io_module.os, "replace", someone_else_finishes_first)
    with io_module.atomic_directory(target) as staging:
        (staging / "ours.txt").write_text("built here")
    assert [p.name for p in target.iterdir()] == ["theirs.txt"]
    assert [p.name for p in target.parent.iterdir()] == ["entry"]  # no .entry.tmp-* left behind


def test_disk_full_while_preparing_data_names_the_cache_folder_and_a_rerun_recovers(
    tmp_path: Path, drill: list[str]
) -> None:
    """Before: "No space left on device (os error 28)" from the tokenizer library, no folder named."""
    with tmpfs(tmp_path / "cache", "size=12k") as cache:
        with pytest.raises(OSError, match=rf"no space left on device writing {cache}/\S+ \(.* MiB free there\); "
                                          r"nothing half-written was kept: free space \(or point data\.cache_dir at "
                                          r"a larger disk\) and run the same command again"):  # fmt: skip
            run(tmp_path / "run", *drill, f"data.cache_dir={cache}")
        assert not [p for p in cache.rglob("*") if ".tmp-" in p.name]  # no staging folder left behind
        subprocess.run(["mount", "-o", "remount,size=64m", str(cache)], check=True)
        assert run(tmp_path / "run", *drill, f"data.cache_dir={cache}", "ckpt_path=auto")["final_step"] == 8


def test_disk_full_during_the_export_names_the_folder_and_keeps_the_old_export(tmp_path: Path) -> None:
    from transformers import BertConfig, BertForMaskedLM

    from degen_train.run.export import export_pretrained

    model = BertForMaskedLM(BertConfig(vocab_size=8000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=128))  # fmt: skip
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        (disk / "hf").mkdir()
        (disk / "hf" / "config.json").write_text("{}")  # the previous export
        with pytest.raises(OSError, match=rf"no space left on device writing {disk}/hf \(.*MiB free there\)"):
            export_pretrained(model, None, disk / "hf")
        assert sorted(p.name for p in disk.iterdir()) == ["hf"] and (disk / "hf" / "config.json").read_text() == "{}"


def test_a_busy_folder_is_one_line_from_the_command(
    tmp_path: Path, drill: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Issue 43 drill 6: two runs on one folder gave the right refusal inside a 4-frame traceback."""
    from degen_train.cli.train import main

    monkeypatch.setattr(sys, "argv", ["degen-train", *drill, "trainer.max_steps=2", f"hydra.run.dir={tmp_path}"])
    with run_dir_lock(tmp_path), pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    said = capsys.readouterr().err
    assert f"degen-train: error: the run folder {tmp_path} is in use by pid {os.getpid()}" in said
    assert "Traceback" not in said
