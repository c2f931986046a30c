"""Stock MetaSchedule, as TVM's tune_relax would run it: harl's baseline."""

from __future__ import annotations

from harl.search.plan import SearchPlan


def metaschedule_plan(seed: int, num_cores: int) -> SearchPlan:
    """Gradient-based task scheduler, evolutionary search and XGBoost, all at TVM's defaults.

    The gradient scheduler waits for every measurement before choosing the next task, so builds
    never overlap measurement, even on a farm; it stays as TVM ships it (it is the baseline).
    """
    from tvm.s_tir import meta_schedule as ms

    del seed  # TVM's components take their seed from each TuneContext's rand_state
    return SearchPlan(
        task_scheduler=ms.task_scheduler.GradientBased(),
        cost_model=ms.cost_model.XGBModel(num_tuning_cores=num_cores),
        make_search_strategy=lambda _task_index: ms.search_strategy.EvolutionarySearch(),
    )
