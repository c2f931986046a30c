"""The task allocator plugged into MetaSchedule as a task scheduler."""

from __future__ import annotations

import math

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

from harl.agents.task_allocator import AllocatorConfig, TaskAllocator
from harl.report.history import trial_latency_s


@derived_object
class HarlTaskScheduler(PyTaskScheduler):
    """Overrides only next_task_id (overriding join_running_task recurses into C++)."""

    def __init__(self, config: AllocatorConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        self.seed = seed
        self.allocator: TaskAllocator | None = None

    def next_task_id(self) -> int:
        records = self._outer().tasks_
        if self.allocator is None:
            self.allocator = TaskAllocator([float(r.task_weight) for r in records],
                                           [float(r.flop) for r in records],
                                           self.config, self.seed)
        for task_id, record in enumerate(records):
            if record.runner_futures is not None:
                builder_results = list(record.builder_results)  # join clears them
                self._learn(task_id, self.join_running_task(task_id), builder_results)
            if record.is_terminated:
                self.allocator.finish(task_id)
        choice = self.allocator.select()
        return -1 if choice is None else choice

    def _learn(self, task_id: int, runner_results, builder_results) -> None:
        latencies = [trial_latency_s(b, r)[0]
                     for b, r in zip(builder_results, runner_results, strict=True)]
        best = min(latencies, default=math.inf)
        self.allocator.update(task_id, len(latencies), best)
