"""Every measured trial, as it arrives: per-task bests, the end-to-end estimate, history.csv."""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from harl.measure.clock import StageClock
from harl.report.progress import Progress

logger = logging.getLogger(__name__)

# The last four describe the whole batch and are filled on its first row only (empty on the
# others), so that summing a column gives the run's total: the batch's number, and the wall,
# build and run seconds since the previous batch was recorded (the rest of the wall time is the
# search strategy, cost model and scheduler).
HISTORY_COLUMNS = ("time_s", "task_id", "task", "trial", "latency_ms", "error",
                   "best_task_ms", "e2e_estimate_ms", "batch", "batch_wall_s", "build_s", "run_s")


@dataclass
class TaskStats:
    """What has been learned about one task so far."""

    name: str
    weight: float
    flop: float
    trials: int = 0
    failures: int = 0
    best_s: float = math.inf
    failed_batches_in_a_row: int = 0
    """measured batches in a row where every candidate failed (build, run or timeout)"""
    last_error: str = ""
    stopped: bool = False
    """harl gave up on this task: its candidates kept failing"""
    naive_s: float = math.inf
    """TVM's unscheduled loop nest, when measured (see harl.naive_nests)"""

    @property
    def measured(self) -> bool:
        """Whether the task's latency is known (from a trial or its unscheduled nest)."""
        return math.isfinite(self.best_known_s)

    @property
    def best_known_s(self) -> float:
        """The faster of the best trial and the unscheduled nest: what a compile would use."""
        return min(self.best_s, self.naive_s)


def trial_latency_s(builder_result, runner_result) -> tuple[float, str]:
    """Mean measured seconds of one trial, or (inf, error message) when it failed.

    `builder_result` may be None where only the runner's result is known (search strategies).
    """
    if builder_result is not None and builder_result.error_msg:
        return math.inf, one_line_error(builder_result.error_msg)
    if runner_result is None:
        return math.inf, "not run"
    if runner_result.error_msg:
        return math.inf, one_line_error(runner_result.error_msg)
    secs = [float(s) for s in (runner_result.run_secs or [])]
    if not secs:
        return math.inf, "no timing returned"
    return sum(secs) / len(secs), ""


def one_line_error(message) -> str:
    """First and last line of an error (TVM's say where, a traceback's last says what)."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= 300 else text[:297] + "..."


def end_to_end_estimate_s(stats: list[TaskStats]) -> float | None:
    """Weighted sum of each measured task's best latency, nests included (None before any)."""
    measured = [s for s in stats if s.measured]
    if not measured:
        return None
    return sum(s.weight * s.best_known_s for s in measured)


@derived_object
class TrialRecorder(PyMeasureCallback):
    """Sees every measurement batch; keeps per-task stats and appends history.csv at once.

    `stats` may already count trials of an earlier run (resume); `time_offset_s` continues that
    run's clock in history.csv. A task whose last `max_failed_batches` batches failed entirely is
    marked stopped (`should_stop`), with one warning.
    """

    def __init__(self, stats: list[TaskStats], history_path: Path,
                 *, progress: Progress | None = None, clock: StageClock | None = None,
                 max_failed_batches: int = 3,
                 time_offset_s: float = 0.0) -> None:
        super().__init__()
        self.stats = stats
        self.history_path = Path(history_path)
        self.progress = progress
        self.clock = clock
        self.max_failed_batches = max_failed_batches
        self.start = time.monotonic() - time_offset_s
        self.trials_done = sum(s.trials for s in stats)
        self.batches = 0
        # wall, build and run seconds at the last batch
        self._last_mark = (time.monotonic(), 0.0, 0.0)
        new_file = not self.history_path.exists() or self.history_path.stat().st_size == 0
        self._file = open(self.history_path, "a", newline="")  # noqa: SIM115  (closed in close())
        self._writer = csv.writer(self._file)
        if new_file:
            self._writer.writerow(HISTORY_COLUMNS)
            self._file.flush()

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        self.record(task_id, builder_results, runner_results)

    def record(self, task_id: int, builder_results, runner_results) -> None:
        """Account for one measured batch of task `task_id`."""
        task = self.stats[task_id]
        batch_columns = self._batch_columns()
        batch_failed = len(runner_results) > 0
        for index, (builder_result, runner_result) in enumerate(
                zip(builder_results, runner_results, strict=True)):
            latency_s, error = trial_latency_s(builder_result, runner_result)
            task.trials += 1
            self.trials_done += 1
            if math.isfinite(latency_s):
                task.best_s = min(task.best_s, latency_s)
                batch_failed = False
            else:
                task.failures += 1
                task.last_error = error
            self._write_row(task_id, task.trials, latency_s, error,
                            batch_columns if index == 0 else ["", "", "", ""])
        self._file.flush()
        self._track_failures(task_id, batch_failed)
        if self.progress is not None:
            estimate = end_to_end_estimate_s(self.stats)
            self.progress.update(self.trials_done, None if estimate is None else estimate * 1e3,
                                 sum(s.measured for s in self.stats), len(self.stats))

    def record_nests(self, task_ids: list[int]) -> None:
        """A row for each unscheduled nest of `task_ids` that was measured (harl.naive_nests).
        It is no trial: its trial and batch columns are empty."""
        for task_id in task_ids:
            naive_s = self.stats[task_id].naive_s
            if math.isfinite(naive_s):
                self._write_row(task_id, "", naive_s, "", ["", "", "", ""])
        self._file.flush()
        self._last_mark = self._mark()  # the next batch's seconds start here, without the nests'

    def _write_row(self, task_id: int, trial, latency_s: float, error: str,
                   batch_columns: list[str]) -> None:
        """One history.csv row of task `task_id`, with its best and the end-to-end estimate."""
        task = self.stats[task_id]
        self._writer.writerow([
            f"{time.monotonic() - self.start:.3f}", task_id, task.name, trial, _ms(latency_s),
            error, _ms(task.best_known_s), _ms(end_to_end_estimate_s(self.stats)),
            *batch_columns,
        ])

    def _mark(self) -> tuple[float, float, float]:
        """Now: the wall clock, and the build and run seconds counted so far."""
        if self.clock is None:
            return time.monotonic(), 0.0, 0.0
        return time.monotonic(), self.clock.build_s, self.clock.run_s

    def _batch_columns(self) -> list[str]:
        """Batch number and wall / build / run seconds since the previous batch."""
        self.batches += 1
        now, build_s, run_s = self._mark()
        last_wall, last_build, last_run = self._last_mark
        self._last_mark = (now, build_s, run_s)
        if self.clock is None:
            return [str(self.batches), f"{now - last_wall:.3f}", "", ""]
        return [str(self.batches), f"{now - last_wall:.3f}", f"{build_s - last_build:.3f}",
                f"{run_s - last_run:.3f}"]

    def _track_failures(self, task_id: int, batch_failed: bool) -> None:
        task = self.stats[task_id]
        task.failed_batches_in_a_row = task.failed_batches_in_a_row + 1 if batch_failed else 0
        if task.stopped or task.failed_batches_in_a_row < self.max_failed_batches:
            return
        task.stopped = True
        if self.progress is not None:
            self.progress.close()
        logger.warning(f"harl: stopped task {task_id} ({task.name}): every candidate of its "
                       f"last {task.failed_batches_in_a_row} batches failed; last error: "
                       f"{task.last_error}; the other tasks go on")

    def should_stop(self, task_id: int) -> bool:
        """Whether task `task_id` keeps failing and should get no more batches."""
        return self.stats[task_id].stopped

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a write that failed (a full disk) stops the run
            self._file.close()
        if self.progress is not None:
            self.progress.close()


def last_history_time_s(path: Path) -> float:
    """The time column of history.csv's last row (0 when there is none), to continue its clock."""
    try:
        with Path(path).open(newline="") as file:
            rows = list(csv.DictReader(file))
        return float(rows[-1]["time_s"]) if rows else 0.0
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def _ms(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return ""
    return f"{seconds * 1e3:.6g}"
