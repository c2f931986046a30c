"""harl's own strategy: task allocator, sketch chooser and tile tuner."""

from __future__ import annotations

from harl.agents.task_allocator import AllocatorConfig
from harl.search import SearchPlan
from harl.search.harl_scheduler import HarlTaskScheduler
from harl.search.harl_search import HarlSearchConfig, HarlSearchStrategy


def harl_plan(seed: int, num_cores: int, warmup_samples: int = 8) -> SearchPlan:
    """The three agents; an XGBoost cost model that trusts itself after `warmup_samples`."""
    from tvm.s_tir import meta_schedule as ms

    search = HarlSearchConfig()
    return SearchPlan(
        task_scheduler=HarlTaskScheduler(AllocatorConfig(), seed=seed),
        cost_model=ms.cost_model.XGBModel(num_tuning_cores=num_cores,
                                          num_warmup_samples=warmup_samples),
        make_search_strategy=lambda index: HarlSearchStrategy(search, seed=seed * 7919 + index),
    )
