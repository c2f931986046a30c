"""Ctrl-C during tuning: stop within seconds, whatever TVM's C++ loop does with the signal.

Python raises KeyboardInterrupt in whichever Python callback TVM's C++ tuning loop runs next; the
loop may turn it into a plain RuntimeError, or catch and drop it. So the signal is also
remembered, and every harl hook the loop calls (measure callback, search strategy, builder)
raises again until the loop has unwound.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback


class InterruptFlag:
    """Set by SIGINT while tuning; `check()` raises KeyboardInterrupt once it is set."""

    def __init__(self) -> None:
        self.requested = False

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


@contextmanager
def interrupt_flag() -> Iterator[InterruptFlag]:
    """A flag that SIGINT sets for the duration of the block (main thread only)."""
    flag = InterruptFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def on_sigint(_signum, _frame):
        flag.requested = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield flag
    except BaseException:
        if flag.requested:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    flag.check()  # the loop swallowed the signal and finished anyway


@derived_object
class InterruptGuard(PyMeasureCallback):
    """First of the measure callbacks: after Ctrl-C nothing more is committed or counted."""

    def __init__(self, flag: InterruptFlag) -> None:
        super().__init__()
        self.flag = flag

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        self.flag.check()
