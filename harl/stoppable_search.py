"""Any search strategy, with a way for harl to end its task early and keep the run's budget.

MetaSchedule ends a task when its strategy has no more candidates; nothing else can end it
safely from Python (terminating a task from a measure callback can trip the task scheduler's
checks). This wrapper delegates everything to the strategy it holds and answers "no more
candidates" once the task keeps failing, and raises once Ctrl-C was pressed.

TVM's loop checks its global trial budget before a batch and then measures the whole batch, so
the run's last batch overshot `--trials` (batches of 10 took the MLP to 70 of 64). A
`TrialBudget` shared by every task's wrapper cuts that batch to the trials left instead.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from harl.interrupt import InterruptFlag
from harl.tvm_adapter import initialize_search_strategy


class TrialBudget:
    """The trials a run may still hand out to measurement, shared by every task's search.

    Counted as TVM's loop counts its global budget: candidates handed out in this process
    (so batches still in flight on a farm count), not trials recorded.
    """

    def __init__(self, trials: int) -> None:
        self.left = trials

    def take(self, wanted: int) -> int:
        """How many of `wanted` candidates may be measured; they are counted as spent."""
        granted = max(0, min(wanted, self.left))
        self.left -= granted
        return granted


@derived_object
class StoppableSearch(PySearchStrategy):
    """Delegates to `inner`; ends task `task_id` once `should_stop(task_id)` is true, and cuts
    a batch to what is left of `budget`.

    A cut batch is a prefix of the one `inner` proposed: `inner` is told the results of the
    candidates that were measured, and must accept fewer results than it proposed.
    """

    def __init__(self, inner, task_id: int, *, should_stop: Callable[[int], bool],
                 interrupt: InterruptFlag | None = None,
                 budget: TrialBudget | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.task_id = task_id
        self.should_stop = should_stop
        self.interrupt = interrupt
        self.budget = budget

    def _initialize_with_tune_context(self, context) -> None:
        initialize_search_strategy(self.inner, context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database,
                   cost_model) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database,
                              cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if self.interrupt is not None:
            self.interrupt.check()
        if self.should_stop(self.task_id) or (self.budget is not None and self.budget.left <= 0):
            return None
        candidates = self.inner.generate_measure_candidates()
        if candidates is None or self.budget is None:
            return candidates
        granted = self.budget.take(len(candidates))  # >= 1 unless the batch is empty
        return candidates if granted == len(candidates) else list(candidates)[:granted]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return StoppableSearch(self.inner.clone(), self.task_id, should_stop=self.should_stop,
                               interrupt=self.interrupt, budget=self.budget)
