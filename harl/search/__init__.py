"""Search strategies: what each contributes to the tuning loop, and a factory by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harl.errors import HarlError

STRATEGIES = ("harl", "metaschedule")


@dataclass
class SearchPlan:
    """The parts of the loop a strategy chooses; builder, runner and database stay harl's."""

    task_scheduler: object  # ms.TaskScheduler: which task gets the next batch
    cost_model: object  # ms.CostModel shared by all tasks
    make_search_strategy: Callable[[int], object]  # task index -> ms.SearchStrategy
    space_generator: Callable[[], object] | str = "post-order-apply"


def make_plan(name: str, seed: int, num_cores: int) -> SearchPlan:
    """The search plan registered under `name`."""
    if name == "metaschedule":
        from harl.search.metaschedule import metaschedule_plan

        return metaschedule_plan(seed=seed, num_cores=num_cores)
    if name == "harl":
        from harl.search.harl import harl_plan

        return harl_plan(seed=seed, num_cores=num_cores)
    raise HarlError(f"unknown strategy {name!r}; choose from: {', '.join(STRATEGIES)}")
