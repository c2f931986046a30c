"""harl's own strategy: task allocator, sketch chooser and tile tuner."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from harl.agents import checkpoint
from harl.agents.model_trust import TrustBoard
from harl.agents.task_allocator import AllocatorConfig
from harl.agents.tile_policy import TilePolicy
from harl.config import CostModelConfig
from harl.naive_nests import NaiveNestConfig
from harl.report.metrics import METRICS_FILE, MetricsLogger
from harl.search.cost_prior import CostPrior
from harl.search.harl_scheduler import AllocatorFeedback, HarlTaskScheduler, allocator_for
from harl.search.harl_search import HarlSearchStrategy
from harl.search.plan import SearchPlan
from harl.search.program_scorer import ProgramScorer
from harl.search.search_config import HarlSearchConfig
from harl.search.sibling_transfer import Offer, SiblingBoard, offers_from_json
from harl.tvm_adapter import python_instance, wrap_cost_model_update

logger = logging.getLogger(__name__)


def _time_updates(xgb, metrics: MetricsLogger, scorer: ProgramScorer) -> None:
    """Count the cost model's training time and tell the scorer what it trained on."""

    def timed_update(update, *args, **kwargs):
        with metrics.timing("cost_model/update_seconds"):
            update(*args, **kwargs)
        scorer.note_update()

    wrap_cost_model_update(xgb, timed_update)


def _task_scheduler(method: str, allocator, metrics: MetricsLogger, overlap: bool):
    """harl's allocator as a task scheduler, or MetaSchedule's gradient-based or round-robin
    one at TVM's defaults (`AllocatorConfig.method`)."""
    from tvm.s_tir import meta_schedule as ms

    if method == "gradient":
        return ms.task_scheduler.GradientBased()
    if method == "round-robin":
        return ms.task_scheduler.RoundRobin()
    return HarlTaskScheduler(allocator, metrics=metrics, max_in_flight=1 if overlap else 0)


def harl_plan(*, seed: int, num_cores: int, tasks, overlap: bool = False,
              cost_prior: CostPrior | None = None, search: HarlSearchConfig | None = None,
              allocator: AllocatorConfig | None = None, nests: NaiveNestConfig | None = None,
              cost_model: CostModelConfig | None = None,
              initial_policy: dict | None = None,
              stored_offers: Sequence[Offer] = ()) -> SearchPlan:
    """The three agents for `tasks`, set by `search` and `allocator`; an XGBoost cost model set
    by `cost_model`; TVM's unscheduled nests measured as `nests` says (each None: its defaults).
    The tile policy starts from the work dir's checkpoint, else from `initial_policy`'s arrays
    (another model's run, kept by harl.store), else afresh. The sibling board starts with
    `stored_offers` (other models' best states, harl.store) and, on a resume, the work dir's.

    `cost_prior` scores a task's candidates alone until the run's model has trained on the
    task, then blended with it (see ProgramScorer).

    Each agent can be swapped for a non-learning one or TVM's (the ablation arms:
    `allocator.method`, `search.sketch.method`, `search.tile.method`, `search.tile.adaptive`,
    `nests.measure`), so what an agent contributes is measured by a config value.

    One tile policy and one cost model serve every task, so what one task teaches the others use.
    With `overlap` (a runner that returns pending futures), one task's batch stays in measurement
    while the allocator chooses among the others and the next batch is built.
    """
    import torch
    from tvm.s_tir import meta_schedule as ms

    torch.set_num_threads(1)  # tiny networks; the cores go to trace replay and builds
    search = search if search is not None else HarlSearchConfig()
    nests = nests if nests is not None else NaiveNestConfig()
    model_config = cost_model if cost_model is not None else CostModelConfig()
    metrics = MetricsLogger()
    xgb = ms.cost_model.XGBModel(num_tuning_cores=num_cores,
                                 num_warmup_samples=model_config.warmup_samples)
    scorer = ProgramScorer(python_instance(xgb), cost_prior,
                           equal_weight_samples=model_config.equal_weight_samples,
                           min_task_samples=model_config.min_task_samples, metrics=metrics)
    _time_updates(python_instance(xgb), metrics, scorer)
    policy = TilePolicy(search.tile.policy, seed, metrics)
    trust_board = TrustBoard(search.trust_window)
    siblings = SiblingBoard(foreign=stored_offers)
    allocator_config = allocator if allocator is not None else AllocatorConfig()
    allocator = (allocator_for(tasks, allocator_config, seed)
                 if allocator_config.method == "harl" else None)
    scheduler = _task_scheduler(allocator_config.method, allocator, metrics, overlap)

    def on_start(work_dir: Path) -> None:
        metrics.open(work_dir / METRICS_FILE)
        agents = work_dir / checkpoint.AGENTS_DIR
        own = agents / checkpoint.POLICY_FILE
        if own.exists() or initial_policy is not None:
            initial = policy.state_arrays()
            try:
                policy.load_arrays(checkpoint.load_arrays(own) if own.exists()
                                   else initial_policy)
            except Exception as err:  # noqa: BLE001  (numpy's and torch's kinds)
                policy.load_arrays(initial)
                why = (str(err).strip() or type(err).__name__).splitlines()[0]
                which = "checkpoint does" if own.exists() else "arrays from the store do"
                logger.warning(f"harl: warning: the tile policy's {which} not fit it "
                               f"({why}): it starts afresh")
        if (agents / checkpoint.SIBLINGS_FILE).exists():
            try:
                siblings.add_foreign(offers_from_json(
                    checkpoint.load_json(agents / checkpoint.SIBLINGS_FILE)))
            except (OSError, ValueError) as err:
                logger.warning("harl: warning: the sibling board's checkpoint is damaged "
                               "(%s): it starts empty", err)
        if allocator is not None and (agents / checkpoint.ALLOCATOR_FILE).exists():
            initial_tasks = allocator.to_json()
            try:
                allocator.load_json(checkpoint.load_json(agents / checkpoint.ALLOCATOR_FILE))
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                allocator.load_json(initial_tasks)
                logger.warning("harl: warning: the task allocator's checkpoint is damaged "
                               "(%r): it starts afresh", err)

    def on_finish(work_dir: Path) -> None:
        agents = work_dir / checkpoint.AGENTS_DIR
        agents.mkdir(exist_ok=True)
        checkpoint.save_arrays(agents / checkpoint.POLICY_FILE, policy.state_arrays())
        checkpoint.save_json(agents / checkpoint.SIBLINGS_FILE, siblings.to_json())
        if allocator is not None:
            checkpoint.save_json(agents / checkpoint.ALLOCATOR_FILE, allocator.to_json())
        metrics.close()

    def make_search_strategy(index: int):
        if search.tile.method == "evolutionary":
            return ms.search_strategy.EvolutionarySearch()  # TVM's defaults, as the baseline's
        return HarlSearchStrategy(search, seed=seed * 7919 + index, policy=policy,
                                  scorer=scorer, metrics=metrics, task_id=index,
                                  trust_board=trust_board, siblings=siblings)

    return SearchPlan(
        task_scheduler=scheduler,
        cost_model=xgb,
        make_search_strategy=make_search_strategy,
        measure_callbacks=[AllocatorFeedback(scheduler)] if allocator is not None else [],
        on_start=on_start,
        on_finish=on_finish,
        metrics=metrics,
        naive_nests=nests if nests.measure else None,
        allocator=allocator,
    )
