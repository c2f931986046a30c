"""Search strategies: what each contributes to the tuning loop, and a factory by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harl.errors import HarlError

if TYPE_CHECKING:
    from harl.agents.task_allocator import AllocatorConfig
    from harl.config import CostModelConfig
    from harl.naive_nests import NaiveNestConfig
    from harl.search.cost_prior import CostPrior
    from harl.search.search_config import HarlSearchConfig

STRATEGIES = ("harl", "metaschedule")


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
    know_latencies: Callable[[list[float]], None] | None = None
    """per task, a latency measured before the trials (the unscheduled nest; inf: none)"""


def make_plan(name: str, *, seed: int, num_cores: int, overlap: bool = False,
              cost_prior: CostPrior | None = None, search: HarlSearchConfig | None = None,
              allocator: AllocatorConfig | None = None, nests: NaiveNestConfig | None = None,
              cost_model: CostModelConfig | None = None) -> SearchPlan:
    """The search plan registered under `name`.

    `cost_prior`: a harl.search.cost_prior.CostPrior for harl's search (the baseline takes none).
    `search`, `allocator`, `nests`, `cost_model`: harl's settings (None: their defaults); the
    baseline runs at TVM's defaults and takes none of them.

    `overlap`: the runner's futures come back pending (an RPC farm), so a strategy may choose and
    build the next batch while one is measured (harl does; MetaSchedule's baseline does not).
    """
    if name == "metaschedule":
        from harl.search.metaschedule import metaschedule_plan

        return metaschedule_plan(seed=seed, num_cores=num_cores)
    if name == "harl":
        from harl.search.harl import harl_plan

        return harl_plan(seed=seed, num_cores=num_cores, overlap=overlap,
                         cost_prior=cost_prior, search=search, allocator=allocator, nests=nests,
                         cost_model=cost_model)
    raise HarlError(f"unknown strategy {name!r}; choose from: {', '.join(STRATEGIES)}")
