"""Ctrl-C during tuning: stop within seconds, at a point where TVM's C++ loop can unwind.

Python's default SIGINT handler raises KeyboardInterrupt in whatever Python code runs next, which
during tuning is often a callback deep inside TVM's C++ loop: seen here, it was turned into a plain
RuntimeError, dropped (the run went on), or it crashed the process (std::terminate). So SIGINT only
sets a flag, and harl's own hooks raise KeyboardInterrupt where the loop calls them: the cost
model's predictions (many times per search round), the search strategy (each batch), the builder
(while a batch builds) and the runner (before each candidate).
Results already measured are still committed (without the slow cost model update). Workers
ignore SIGINT (harl.measure.worker_lifetime), so a terminal's Ctrl-C does not turn the batch in
flight into failures. A second Ctrl-C exits at once: the records on disk are complete lines, and
a cut last line is repaired on resume. SIGTERM and SIGHUP are handled as Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import PyRunner

from harl.measure.artifacts import remove_build_dir


class InterruptFlag:
    """Set by SIGINT while tuning; `check()` raises KeyboardInterrupt once it is set."""

    def __init__(self) -> None:
        self.requested = False

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Ctrl-C, a polite kill (a service manager's, a batch system's) and a closed terminal all stop
tuning the same way"""
_active: InterruptFlag | None = None  # the flag of the tuning loop running now, if any


def check_interrupt() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed during the running tuning loop.

    For long Python work called from inside TVM's loop (harl's search scores hundreds of states
    per batch without going through the cost model's `predict`).
    """
    if _active is not None:
        _active.check()


@contextmanager
def interrupt_flag() -> Iterator[InterruptFlag]:
    """A flag that SIGINT, SIGTERM and SIGHUP set for the duration of the block (main thread
    only).

    Whatever the loop raised after Ctrl-C leaves the block as KeyboardInterrupt.
    """
    flag = InterruptFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def on_stop_signal(_signum, _frame):
        if flag.requested:
            sys.stderr.write("\nharl: interrupted twice: exiting at once; run the same command "
                             "again to resume\n")
            os._exit(130)
        flag.requested = True

    global _active
    previous = {signum: signal.signal(signum, on_stop_signal) for signum in STOP_SIGNALS}
    watcher = _SecondSignalWatcher()
    outer, _active = _active, flag
    try:
        yield flag
    except BaseException:
        if flag.requested:
            raise KeyboardInterrupt from None
        raise
    finally:
        watcher.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _active = outer
    flag.check()


class _SecondSignalWatcher:
    """Exits on a second stop signal even while the main thread is inside TVM's C++ code.

    Python runs a signal's handler only when the main thread next runs Python code; a C++ search
    that never calls back (MetaSchedule's evolutionary search on a huge fused task) would hold
    off both Ctrl-Cs. The interpreter's C handler also writes each signal's number to a wakeup
    fd: a thread reading it counts them (TVM's calls release the GIL).
    """

    def __init__(self) -> None:
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        self._write = write
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="harl-stop-watcher",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        stops = {int(s) for s in STOP_SIGNALS}
        seen = 0
        while chunk := os.read(self._read, 64):  # b"" once the write end is closed
            seen += sum(1 for signum in chunk if signum in stops)
            if seen >= 2:
                sys.stderr.write("\nharl: interrupted twice: exiting at once; run the same "
                                 "command again to resume\n")
                os._exit(130)

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._write)
        self._thread.join(timeout=5)
        os.close(self._read)


@derived_object
class InterruptibleRunner(PyRunner):
    """Hands candidates to `inner` one at a time, so Ctrl-C does not wait for a whole batch.

    A runner whose `run` only submits (`returns_pending_futures`, the RPC farm's) gets the whole
    batch at once: splitting it would only repeat its per-batch work.
    """

    def __init__(self, inner, flag: InterruptFlag) -> None:
        super().__init__()
        self.inner = inner
        self.flag = flag

    def run(self, runner_inputs):
        if getattr(self.inner, "returns_pending_futures", False):
            self._check(runner_inputs)
            return self.inner.run(runner_inputs)
        futures = []
        for runner_input in runner_inputs:
            self._check(runner_inputs)
            futures.extend(self.inner.run([runner_input]))
        return futures

    def _check(self, batch) -> None:
        """Raise after Ctrl-C, removing the batch's build folders first: MetaSchedule removes
        a candidate's once its result is in, which none of this batch's reach once `run`
        raises (the results of those already timed go with it)."""
        if self.flag.requested:
            for runner_input in batch:
                remove_build_dir(str(runner_input.artifact_path))
            self.flag.check()


@derived_object
class UnlessInterrupted(PyMeasureCallback):
    """Runs `inner` (the cost model update) only until Ctrl-C: results measured after it are
    still committed to the database, but nothing slow is done with them."""

    def __init__(self, inner, flag: InterruptFlag) -> None:
        super().__init__()
        self.inner = inner
        self.flag = flag

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        if not self.flag.requested:
            self.inner.apply(task_scheduler, task_id, measure_candidates, builder_results,
                             runner_results)


@derived_object
class InterruptibleCostModel(PyCostModel):
    """Delegates to `inner`; its predictions, called throughout the search, raise after Ctrl-C."""

    def __init__(self, inner, flag: InterruptFlag) -> None:
        super().__init__()
        self.inner = inner
        self.flag = flag

    def load(self, path: str) -> None:
        self.inner.load(path)

    def save(self, path: str) -> None:
        self.inner.save(path)

    def update(self, context, candidates, results) -> None:
        self.inner.update(context, candidates, results)

    def predict(self, context, candidates):
        self.flag.check()
        return self.inner.predict(context, candidates)
