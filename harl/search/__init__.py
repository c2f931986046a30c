"""Search strategies: what each contributes to the tuning loop, and a factory by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harl.errors import HarlError
from harl.search.plan import SearchPlan

if TYPE_CHECKING:
    from harl.agents.task_allocator import AllocatorConfig
    from harl.config import CostModelConfig
    from harl.naive_nests import NaiveNestConfig
    from harl.search.cost_prior import CostPrior
    from harl.search.search_config import HarlSearchConfig

__all__ = ["STRATEGIES", "SearchPlan", "make_plan"]

STRATEGIES = ("harl", "metaschedule")


def make_plan(name: str, *, seed: int, num_cores: int, tasks, overlap: bool = False,
              cost_prior: CostPrior | None = None, search: HarlSearchConfig | None = None,
              allocator: AllocatorConfig | None = None, nests: NaiveNestConfig | None = None,
              cost_model: CostModelConfig | None = None,
              initial_policy: dict | None = None, stored_offers=()) -> SearchPlan:
    """The search plan registered under `name` for `tasks` (harl.frontend.tasks.TuningTask).

    `cost_prior`: a harl.search.cost_prior.CostPrior for harl's search (the baseline takes none).
    `initial_policy`: the tile policy's arrays harl's search starts from where the work dir
    holds no checkpoint of its own (the store's, harl.store). `stored_offers`: other models'
    best states (harl.search.sibling_transfer.Offer, from harl.store) for harl's sibling board.
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

        return harl_plan(seed=seed, num_cores=num_cores, tasks=tasks, overlap=overlap,
                         cost_prior=cost_prior, search=search, allocator=allocator, nests=nests,
                         cost_model=cost_model, initial_policy=initial_policy,
                         stored_offers=stored_offers)
    raise HarlError(f"unknown strategy {name!r}; choose from: {', '.join(STRATEGIES)}")
