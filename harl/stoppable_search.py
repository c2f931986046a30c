"""Any search strategy, with a way for harl to end its task early.

MetaSchedule ends a task when its strategy has no more candidates; nothing else can end it
safely from Python (terminating a task from a measure callback can trip the task scheduler's
checks). This wrapper delegates everything to the strategy it holds and answers "no more
candidates" once the task keeps failing, and raises once Ctrl-C was pressed.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from harl.interrupt import InterruptFlag


@derived_object
class StoppableSearch(PySearchStrategy):
    """Delegates to `inner`; ends task `task_id` once `should_stop(task_id)` is true."""

    def __init__(self, inner, task_id: int, should_stop: Callable[[int], bool],
                 interrupt: InterruptFlag | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.task_id = task_id
        self.should_stop = should_stop
        self.interrupt = interrupt

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database,
                   cost_model) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database,
                              cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if self.interrupt is not None:
            self.interrupt.check()
        if self.should_stop(self.task_id):
            return None
        return self.inner.generate_measure_candidates()

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return StoppableSearch(self.inner.clone(), self.task_id, self.should_stop,
                               self.interrupt)
