"""The task allocator plugged into MetaSchedule: a task scheduler that asks it for the next task,
and a measure callback that hands it every batch's results (the final batches included)."""

from __future__ import annotations

import logging
import math

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

from harl.agents.task_allocator import AllocatorConfig, TaskAllocator
from harl.report.history import trial_latency_s
from harl.report.metrics import MetricsLogger
from harl.tvm_adapter import scheduler_tasks


def allocator_for(tasks, config: AllocatorConfig, seed: int = 0) -> TaskAllocator:
    """An allocator for `tasks` (harl.frontend.tasks.TuningTask) with the weights and FLOPs
    TVM's task records give them (TVM counts at least one FLOP per task)."""
    return TaskAllocator([float(task.weight) for task in tasks],
                         [max(1.0, float(task.flop)) for task in tasks], config, seed)

logger = logging.getLogger(__name__)


@derived_object
class HarlTaskScheduler(PyTaskScheduler):
    """Overrides only next_task_id (overriding join_running_task recurses into C++).

    TVM's loop builds the chosen task's batch, then hands it to the runner. With a runner whose
    futures come back pending (an RPC farm), `max_in_flight` batches may stay in measurement
    while the next task is chosen and its batch built: the allocator chooses among the tasks not
    in flight. 0 (the default) waits for every measurement first, as a local runner needs: it
    times inside `run`, and building beside it would disturb the timings.
    """

    def __init__(self, allocator: TaskAllocator, *, metrics: MetricsLogger | None = None,
                 max_in_flight: int = 0) -> None:
        super().__init__()
        self.allocator = allocator
        self.metrics = metrics if metrics is not None else MetricsLogger()
        self.max_in_flight = max_in_flight
        self.overlapped_batches = 0
        """measured batches that were chosen while another task's batch was being measured"""
        self._in_flight: list[int] = []  # tasks handed to TVM and not joined yet, oldest first
        self._chosen_while_busy: set[int] = set()

    def next_task_id(self) -> int:
        records = scheduler_tasks(self)
        busy = self._join_measured(records)
        for task_id, record in enumerate(records):
            if record.is_terminated:
                self.allocator.finish(task_id)
        with self.metrics.timing("alloc/agent_seconds"):
            choice = self.allocator.select(busy=busy)
        while choice is None and busy:  # only tasks in flight are open: wait for the oldest
            self._join(busy.pop(0))
            choice = self.allocator.select(busy=busy)
        if choice is None:
            return -1
        if busy:
            self._chosen_while_busy.add(choice)
        self._in_flight.append(choice)
        return choice

    def _join_measured(self, records) -> list[int]:
        """Join every task whose batch is measured; the tasks left in flight, oldest first.

        The oldest are joined too while more than `max_in_flight` are left.
        """
        running = [i for i, record in enumerate(records) if record.runner_futures is not None]
        order = {task_id: n for n, task_id in enumerate(self._in_flight)}
        self._in_flight = sorted(running, key=lambda i: order.get(i, -1))
        busy = []
        for task_id in list(self._in_flight):
            futures = records[task_id].runner_futures
            if self.max_in_flight > 0 and not all(future.done() for future in futures):
                busy.append(task_id)
            else:
                self._join(task_id)
        while len(busy) > self.max_in_flight:
            self._join(busy.pop(0))
        return busy

    def _join(self, task_id: int) -> None:
        self.join_running_task(task_id)  # results reach learn() via AllocatorFeedback
        self._in_flight.remove(task_id)

    def learn(self, task_id: int, builder_results, runner_results) -> None:
        """One measured batch of `task_id`: reward the allocator."""
        latencies = [trial_latency_s(b, r)[0]
                     for b, r in zip(builder_results, runner_results, strict=True)]
        best = min(latencies, default=math.inf)
        reward = self.allocator.update(task_id, len(latencies), best)
        task = self.allocator.tasks[task_id]
        if task_id in self._chosen_while_busy:
            self._chosen_while_busy.discard(task_id)
            self.overlapped_batches += 1
        self.metrics.record("alloc/task", task_id)
        self.metrics.record("alloc/reward", reward)
        self.metrics.record("alloc/chosen_value",
                            self.allocator.chosen_value.pop(task_id, math.nan))
        self.metrics.record("alloc/gain", math.nan if task.gain is None else task.gain)
        self.metrics.record("alloc/e2e_estimate_ms", self.allocator.end_to_end_s() * 1e3)
        self.metrics.record("alloc/overlapped_batches", self.overlapped_batches)
        self.metrics.dump(task_id=task_id)


@derived_object
class AllocatorFeedback(PyMeasureCallback):
    """Passes every measured batch to the harl task scheduler's allocator."""

    def __init__(self, scheduler: HarlTaskScheduler) -> None:
        super().__init__()
        self.scheduler = scheduler

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        self.scheduler.learn(task_id, builder_results, runner_results)
