"""One builder per cache entry: runs started together (a sweep, the ranks of a node, the nodes of a job on a
shared filesystem) build a tokenizer or an example table once; the others wait, then read the finished entry.

The lock is an advisory ``flock`` on a hidden file beside the entry, dropped by the kernel when its holder ends
however it ends. The entry itself is still written to a staging folder and renamed in whole (io.atomic_directory),
so even without a lock no reader ever sees a half-built entry: on a filesystem that refuses locks, two runs may
both build it, and the first rename wins.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.lock"


@contextmanager
def building(target: Path) -> Iterator[None]:
    """Hold the exclusive build lock of cache entry ``target`` while the block runs (waiting for another holder)."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(lock_path(target), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:  # a read-only cache: the build below names the folder when it cannot write
        log.warning("cannot create the build lock for %s (%s): building without it", target, error.strerror)
        yield
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another process is building %s: waiting for it", target)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError as error:
            if error.errno not in NO_LOCKS:
                raise
            log.warning(
                "the filesystem of %s does not support locks (%s): runs started together may each build this "
                "entry; each writes a staging folder renamed in whole, so none reads a half-built one",
                target.parent,
                error.strerror,
            )
        yield
    finally:
        os.close(descriptor)  # closing releases the lock
