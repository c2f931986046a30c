"""A decision in the middle of a tuning loop: the graph level's second search runs once a share
of the trials is measured, and the loop goes on with every agent's state where the graph stands.

Stopping the loop and starting another on the same tasks, as a resumed run does, costs what the
search had learned beyond the database: each task's tile tuners, the sketch chooser's counts,
which candidates were measured, the trust in the cost model (a `--graph` run that rewrote
nothing measured 2-10% slower than `--graph off`). `Midway` avoids the second loop where the
graph does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from harl.interrupt import InterruptFlag
from harl.stoppable_search import TrialBudget


@dataclass
class Midway:
    """`decide()` runs once `after` trials of the loop are measured and on the disk; where it
    returns True the loop hands out no more trials and ends once the batches in flight are
    measured."""

    after: int
    decide: Callable[[], bool]
    decided: bool = False
    """whether `decide` ran (not where the loop ended before `after` trials, or on Ctrl-C)"""
    stopped: bool = False
    """what `decide` returned"""


@derived_object
class MidwayCallback(PyMeasureCallback):
    """Counts the loop's measured trials and runs `midway` when they reach its mark (placed
    after the callbacks that commit a batch to the database and the disk)."""

    def __init__(self, midway: Midway, budget: TrialBudget, interrupt: InterruptFlag) -> None:
        super().__init__()
        self.midway, self.budget, self.interrupt = midway, budget, interrupt
        self.measured = 0

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        self.measured += len(runner_results)
        if (self.midway.decided or self.interrupt.requested
                or self.measured < self.midway.after):
            return
        self.midway.decided = True
        self.midway.stopped = bool(self.midway.decide())
        if self.midway.stopped:
            self.budget.left = 0
