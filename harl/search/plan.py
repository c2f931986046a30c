"""What a search strategy contributes to the tuning loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SearchPlan:
    """The parts of the loop a strategy chooses; builder, runner and database stay harl's."""

    task_scheduler: object  # ms.TaskScheduler: which task gets the next batch
    cost_model: object  # ms.CostModel shared by all tasks
    make_search_strategy: Callable[[int], object]  # task index -> ms.SearchStrategy
    space_generator: Callable[[], object] | str = "post-order-apply"
    on_start: Callable[[Path], None] | None = None  # work dir -> restore agents, open metrics
    on_finish: Callable[[Path], None] | None = None  # work dir -> save agents, close metrics
    measure_callbacks: list = field(default_factory=list)  # extra ms.MeasureCallbacks
    metrics: object | None = None  # harl.report.metrics.MetricsLogger of the agents, if any
    naive_nests: object | None = None  # harl.naive_nests.NaiveNestConfig; None: not measured
    allocator: object | None = None
    """harl.agents.task_allocator.TaskAllocator of the task scheduler, if any: the loop hands it
    each task's latency measured before the trials (the unscheduled nest)"""
