"""The task allocator plugged into MetaSchedule: a task scheduler that asks it for the next task,
and a measure callback that hands it every batch's results (the final batches included)."""

from __future__ import annotations

import math
import time

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

from harl.agents.task_allocator import AllocatorConfig, TaskAllocator
from harl.report.history import trial_latency_s
from harl.report.metrics import MetricsLogger


@derived_object
class HarlTaskScheduler(PyTaskScheduler):
    """Overrides only next_task_id (overriding join_running_task recurses into C++)."""

    def __init__(self, config: AllocatorConfig, seed: int = 0,
                 metrics: MetricsLogger | None = None) -> None:
        super().__init__()
        self.config = config
        self.seed = seed
        self.metrics = metrics if metrics is not None else MetricsLogger()
        self.allocator: TaskAllocator | None = None
        self.saved_state: list[dict] | None = None  # from a checkpoint, applied on first use

    def next_task_id(self) -> int:
        records = self._outer().tasks_
        self._ensure_allocator(records)
        for task_id, record in enumerate(records):
            if record.runner_futures is not None:
                self.join_running_task(task_id)  # results reach learn() via AllocatorFeedback
            if record.is_terminated:
                self.allocator.finish(task_id)
        start = time.perf_counter()
        choice = self.allocator.select()
        self.metrics.add("alloc/agent_seconds", time.perf_counter() - start)
        return -1 if choice is None else choice

    def _ensure_allocator(self, records) -> None:
        if self.allocator is None:
            self.allocator = TaskAllocator([float(r.task_weight) for r in records],
                                           [float(r.flop) for r in records],
                                           self.config, self.seed)
            if self.saved_state is not None:
                self.allocator.load_json(self.saved_state)

    def learn(self, task_id: int, builder_results, runner_results) -> None:
        """One measured batch of `task_id`: reward the allocator."""
        self._ensure_allocator(self._outer().tasks_)
        latencies = [trial_latency_s(b, r)[0]
                     for b, r in zip(builder_results, runner_results, strict=True)]
        best = min(latencies, default=math.inf)
        reward = self.allocator.update(task_id, len(latencies), best)
        task = self.allocator.tasks[task_id]
        self.metrics.record("alloc/task", task_id)
        self.metrics.record("alloc/reward", reward)
        self.metrics.record("alloc/gain", math.nan if task.gain is None else task.gain)
        self.metrics.record("alloc/e2e_estimate_ms", self.allocator.end_to_end_s() * 1e3)
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
