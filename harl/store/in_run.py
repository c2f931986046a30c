"""How a tuning run uses the store: what it starts from (the cost-model prior that ranks its
first samples, the tile policy, other models' schedules), and keeping its measurements once it
has tuned."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from harl.agents.checkpoint import AGENTS_DIR, POLICY_FILE, SIBLINGS_FILE, load_arrays, load_json
from harl.config import StoreConfig
from harl.search.cost_prior import CostPrior
from harl.search.sibling_transfer import Offer
from harl.store.store import KnowledgeStore, default_store_path, model_id

logger = logging.getLogger(__name__)


def open_store(config: StoreConfig, target) -> KnowledgeStore | None:
    """The store folder of `target`, or None with the store turned off."""
    if not config.enabled:
        return None
    root = config.path if config.path is not None else default_store_path()
    return KnowledgeStore(root, target, min_records=config.min_records,
                          max_records=config.max_records, folds=config.folds)


def choose_prior(store: KnowledgeStore | None, shipped: CostPrior | None, use: str
                 ) -> tuple[CostPrior | None, str | None]:
    """The prior that ranks the run's first samples and where it comes from ("store" or
    "shipped"): the store's cost model where `use` is "always", or "better" and it ranked the
    models left out of its training better than the shipped prior; else the shipped prior
    (None: neither applies)."""
    if store is None or use == "never":
        return shipped, "shipped" if shipped is not None else None
    try:
        trained = store.prior(shipped)
    except Exception as err:  # noqa: BLE001  (a store problem must not stop the run)
        from harl.report.history import one_line_error

        logger.warning(f"harl: warning: the store in {store.folder} did not train a cost model "
                       f"({one_line_error(err)}); going on without it")
        trained = None
    if trained is None:
        return shipped, "shipped" if shipped is not None else None
    rhos = ("too few records per task to judge it on held-out ones"
            if trained.held_out_rho is None else
            f"held-out rank correlation {trained.held_out_rho}"
            + (f", shipped prior's {trained.shipped_rho}" if trained.shipped_rho is not None
               else ""))
    if use == "better" and not trained.better:
        logger.info(f"harl: the store's cost model ({trained.models} models, "
                    f"{trained.records} records) is not used: {rhos}")
        return shipped, "shipped" if shipped is not None else None
    logger.info(f"harl: a cost model trained on {trained.models} models tuned here before "
                f"({trained.records} records in {store.folder}; {rhos}) ranks new samples "
                "(--no-store: without it)")
    return trained.prior, "store"


def run_prior(store: KnowledgeStore | None, target, tasks, use: str
              ) -> tuple[CostPrior | None, str | None]:
    """The prior that ranks a harl run's first samples on `target` and where it comes from (see
    `choose_prior`); None where every task of `tasks` is too small for it."""
    from harl.search.cost_prior import load_cost_prior

    prior, source = choose_prior(store, load_cost_prior(target), use)
    if prior is None or not any(prior.applies_to(task.mod) for task in tasks):
        return None, None
    logger.info("harl: a cost model trained on other workloads ranks the samples of tasks of "
                f"{prior.min_flop / 1e6:g} MFLOP or more, alone until the run's model has "
                "learned the task (--no-prior: the run's model only)")
    return prior, source


def start_policy(store: KnowledgeStore | None, config: StoreConfig) -> dict | None:
    """The tile policy's arrays a run starts from: the store's, where it is asked for."""
    if store is None or not config.tile_policy:
        return None
    arrays = store.policy()
    if arrays is not None:
        logger.info(f"harl: the tile policy starts from the one a run left in {store.folder}")
    return arrays


def stored_schedules(store: KnowledgeStore | None, config: StoreConfig) -> list[Offer]:
    """The best states of earlier runs a run's sibling board starts with, where asked for."""
    if store is None or not config.schedules:
        return []
    offers = store.schedules()
    if offers:
        logger.info(f"harl: {len(offers)} schedules earlier runs found in {store.folder} are "
                    "offered to tasks with the same loops")
    return offers


@dataclass(frozen=True)
class StartingKnowledge:
    """What a run's search starts from besides its own measurements."""

    cost_prior: CostPrior | None = None
    """the cost model trained on other workloads that ranks new tasks' samples"""
    prior_source: str | None = None
    """where `cost_prior` came from: "shipped", "store" or None"""
    tile_policy: dict | None = None
    """the tile policy's arrays a run left in the store"""
    offers: list[Offer] = field(default_factory=list)
    """earlier runs' best states, measured among the first candidates of tasks with their loops"""


def starting_knowledge(store: KnowledgeStore | None, target, tasks, *, strategy: str,
                       cost_prior: bool, config: StoreConfig) -> StartingKnowledge:
    """What a `strategy` run on `target` starts from: the prior where `cost_prior` asks for it,
    and, for harl's own search, the store's tile policy and schedules where `config` asks."""
    prior, source = (run_prior(store, target, tasks, config.use) if cost_prior
                     else (None, None))
    if strategy != "harl":
        return StartingKnowledge(prior, source)
    return StartingKnowledge(prior, source, start_policy(store, config),
                             stored_schedules(store, config))


def keep_run(store: KnowledgeStore | None, work_dir: Path, *, model: Path,
             input_shapes: dict, model_name: str, policy_trained: bool) -> None:
    """Add the run's measurements, its best states per sketch signature, and its tile policy
    where the run trained one (`policy_trained`), to the store (a failure is warned about,
    never raised)."""
    if store is None:
        return
    try:
        agents = work_dir / AGENTS_DIR
        if policy_trained and (agents / POLICY_FILE).is_file():
            store.add_policy(load_arrays(agents / POLICY_FILE))
        identity = model_id(model, input_shapes)
        if (agents / SIBLINGS_FILE).is_file():
            store.add_schedules(load_json(agents / SIBLINGS_FILE), model_id=identity)
        kept = store.add_run(work_dir, model_id=identity, model_name=model_name)
    except Exception as err:  # noqa: BLE001  (a store problem must not stop the run)
        from harl.report.history import one_line_error

        logger.warning(f"harl: warning: this run's measurements were not kept in the store "
                       f"({one_line_error(err)})")
        return
    if kept:
        logger.info(f"harl: {kept} measured records kept in {store.folder} for later runs")
