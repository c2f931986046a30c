"""One run per work dir: an OS file lock held for the whole run.

Two runs on one work dir would append to the same database and history.csv at once and overrun
the trial budget that resume honours. The lock is `flock` on a file in the work dir, which the
kernel releases when the process ends however it ends (`kill -9` included), so a crashed run
never leaves a stale lock. The file holds the holder's pid, for the message a second run gives.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harl.errors import HarlError

LOCK_FILE = ".harl.lock"
"""in the work dir; it stays there between runs (removing it could race a run taking it)"""


@contextmanager
def work_dir_lock(work_dir: Path) -> Iterator[Path]:
    """Hold `work_dir`'s lock inside the block; a HarlError naming the holder's pid at once if
    another process holds it."""
    path = Path(work_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise HarlError(f"cannot lock work dir {work_dir}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise HarlError(f"work dir {work_dir} is in use by another harl run"
                            + (f" (pid {holder})" if holder else "")
                            + "; wait for it to end, or use another --work-dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    """The pid written in the lock file, or "" if none is readable yet."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
