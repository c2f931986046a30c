"""Each measured batch on the disk before the next one starts, or the run stops.

TVM's JSONDatabase appends a record line by opening the file, writing and closing it: the line
reaches the operating system, not the disk, and a write that fails (a full disk) is dropped
without a word by its C++ stream. After each batch, `Durably` forces the database's files and
history.csv onto the disk (fsync), checks that the batch's records reached the file, and turns
a failed write into an OSError that stops the run (TVM's loop would turn it into a plain
RuntimeError on its way out: `failure` keeps the original).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from harl.database import RECORD_FILE, WORKLOAD_FILE


def fsync_path(path: Path) -> None:
    """Force `path`'s written data onto the disk (any descriptor of a file syncs the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _no_space(path: Path) -> bool:
    try:
        stats = os.statvfs(path.parent)
    except OSError:
        return False
    return stats.f_bavail == 0


@derived_object
class Durably(PyMeasureCallback):
    """Runs `inner` (the callback that appends history.csv), then syncs the work dir's
    database and history.csv to the disk; placed after MetaSchedule's AddToDatabase."""

    def __init__(self, inner, work_dir: Path, history: Path) -> None:
        super().__init__()
        self.inner = inner
        self.paths = [Path(work_dir) / WORKLOAD_FILE, Path(work_dir) / RECORD_FILE, Path(history)]
        self.record_file = Path(work_dir) / RECORD_FILE
        self.record_size = _size(self.record_file)
        self.failure: OSError | None = None

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        try:
            self.inner.apply(task_scheduler, task_id, measure_candidates, builder_results,
                             runner_results)
            size = _size(self.record_file)
            if len(runner_results) and size <= self.record_size:
                lost = errno.ENOSPC if _no_space(self.record_file) else errno.EIO
                raise OSError(lost, f"{os.strerror(lost)}: a batch's tuning records did not "
                                    "reach the database", str(self.record_file))
            self.record_size = size
            for path in self.paths:
                if path.exists():
                    fsync_path(path)
        except OSError as err:
            self.failure = err
            raise
