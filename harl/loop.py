"""harl's tuning loop: one place that wires tasks, strategy, builder, runner and database."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

from harl.config import MeasureConfig, RpcConfig
from harl.database import open_database
from harl.database.durable import Durably
from harl.frontend.tasks import TuningTask
from harl.interrupt import (
    InterruptibleCostModel,
    InterruptibleRunner,
    UnlessInterrupted,
    interrupt_flag,
)
from harl.measure import cpu_load
from harl.measure.builder import PersistentBuilder
from harl.measure.clock import StageClock
from harl.measure.runner import ClockedRunner, make_runner, shutdown_runner
from harl.midway import Midway, MidwayCallback
from harl.naive_nests import measure_naive_nests, tasks_to_check, tasks_to_check_first
from harl.report.history import TaskStats, TrialRecorder
from harl.report.progress import Progress
from harl.resume import PriorRun, warm_start_cost_model
from harl.search.plan import SearchPlan
from harl.stoppable_search import StoppableSearch, TrialBudget
from harl.target import is_gpu
from harl.tvm_adapter import pinned_statements

logger = logging.getLogger(__name__)


@dataclass
class LoopSettings:
    """Budget and batching of one tuning loop."""

    trials: int
    trials_per_batch: int
    seed: int
    num_cores: int


@dataclass
class LoopResume:
    """Where a loop starts: the database, per-task stats, and an earlier run's records if any."""

    database: object  # ms.Database
    stats: list[TaskStats]
    prior: PriorRun | None = None
    time_offset_s: float = 0.0  # the earlier run's last history.csv time


def default_batch_size(trials: int, n_tasks: int) -> int:
    """Enough batches for every task to be visited about twice, and for three batches in all;
    from 2 to TVM's 64 per batch.

    Each batch of a task costs a fixed search per sketch it fills, so small batches pay it
    often; a lone task's search and cost model learn only between its batches."""
    return max(2, min(64, trials // max(1, 2 * n_tasks), trials // 3))


def _task_logger(work_dir: Path, index: int, name: str) -> logging.Logger:
    logger = logging.getLogger(f"harl.tvm.task_{index:03d}_{name[:80]}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.handlers.clear()
    handler = logging.FileHandler(work_dir / "logs" / f"task_{index:03d}_{name[:80]}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger


def _default_callbacks(interrupt) -> list:
    """MetaSchedule's (commit to the database, remove artifacts, update the cost model)."""
    from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback, UpdateCostModel

    return [UnlessInterrupted(callback, interrupt) if isinstance(callback, UpdateCostModel)
            else callback for callback in MeasureCallback.create("default")]


def _join_in_flight(task_scheduler) -> None:
    """After Ctrl-C, wait for the batches still being measured (a farm's, when builds overlap
    measurement), so that their trials are recorded like every other measured one."""
    for task_id, record in enumerate(task_scheduler.tasks_):
        if record.runner_futures is not None and not record.is_terminated:
            try:
                task_scheduler.join_running_task(task_id)
            except Exception as err:  # the interrupt is what the user must see
                logger.warning("task %d's batch in flight is lost: %s", task_id, err)


def _say_if_measured_beside_others(clock: StageClock) -> None:
    """A tuning whose candidates were timed while other processes took CPU time chose among
    timings that may be off; say so once, at the end of tuning."""
    others = clock.others_while_measuring()
    if cpu_load.worth_saying(others):
        logger.warning("harl: " + cpu_load.describe_other_load(others, "candidates were measured")
                       + ": the tuning's timings, and so its choices, may be off (tune on a quiet "
                       "machine)")


def _measure_naive_nests(tasks, target, check: list[int], *, builder, runner, database,
                         recorder: TrialRecorder, when: str) -> None:
    """harl.naive_nests for the tasks in `check`, into the database and history.csv; a failure
    there costs the nests, never the run (`when`: before or after tuning, for the messages)."""
    try:
        won = measure_naive_nests(tasks, check, target, builder=builder, runner=runner,
                                  database=database, stats=recorder.stats)
        recorder.record_nests(check)
    except Exception as err:  # noqa: BLE001  (a nest is a bonus; the trials are what counts)
        logger.warning(f"harl: warning: TVM's unscheduled loop nests not measured {when} ({err})")
        return
    measured = sum(math.isfinite(recorder.stats[index].naive_s) for index in check)
    if measured:
        logger.info(f"harl: TVM's unscheduled loop nest of {measured} small task(s) measured "
                    f"{when}: " + (f"{won} kept, no trials spent" if when == "before tuning"
                                   else f"faster than the tuned kernel in {won}"))


def tune_tasks(tasks: list[TuningTask], target, plan: SearchPlan, work_dir: Path,
               *, settings: LoopSettings, measure: MeasureConfig,
               progress: Progress | None = None, resume: LoopResume | None = None,
               rpc: RpcConfig | None = None,
               builder=None, runner=None,
               clock: StageClock | None = None,
               midway: Midway | None = None) -> tuple[object, list[TaskStats]]:
    """Tune `tasks` for `settings.trials` more trials; returns the database and per-task stats.

    `resume` carries an earlier run's database, stats and records (see harl.resume); `rpc`
    measures on a device farm; `builder` and `runner` replace harl's own (tests inject failing
    ones); `clock`, where given, gathers the seconds and load of the measuring stages;
    `midway`, a decision taken inside the loop that may end it early (harl.midway).
    """
    from tvm.s_tir import meta_schedule as ms

    (work_dir / "logs").mkdir(parents=True, exist_ok=True)
    if resume is None:
        resume = LoopResume(open_database(work_dir),
                            [TaskStats(task.name, task.weight, task.flop) for task in tasks])
    database, stats = resume.database, resume.stats
    own_builder, own_runner = builder is None, runner is None
    clock = StageClock() if clock is None else clock
    # Started before the recorder's clock: its worker's start-up is not a trial's cost.
    runner = make_runner(measure, rpc) if own_runner else runner
    recorder = TrialRecorder(stats, work_dir / "history.csv", progress=progress, clock=clock,
                             max_failed_batches=measure.max_failed_batches,
                             time_offset_s=resume.time_offset_s)
    seeds = ms.utils.fork_seed(settings.seed, n=len(tasks))
    budget = TrialBudget(settings.trials)
    durable = Durably(recorder, work_dir, recorder.history_path)  # each batch on the disk
    started = False  # plan.on_start ran
    pinned = [pinned_statements(task.mod) for task in tasks]  # TVM's own search writes too
    try:
        with interrupt_flag() as interrupt:
            if own_builder:
                builder = PersistentBuilder(
                    max_workers=measure.builder_workers or settings.num_cores,
                    timeout_s=measure.build_timeout_s, clock=clock, interrupt=interrupt,
                    cutoff=measure.straggler_cutoff(), warm_workers=settings.trials_per_batch)
            contexts = [
                ms.TuneContext(
                    mod=task.mod,
                    target=target,
                    space_generator=plan.space_generator,
                    search_strategy=StoppableSearch(plan.make_search_strategy(index), index,
                                                    should_stop=recorder.should_stop,
                                                    interrupt=interrupt, budget=budget),
                    task_name=task.name,
                    logger=_task_logger(work_dir, index, task.name),
                    rand_state=seed,
                    num_threads=settings.num_cores,
                ).clone()
                for index, (task, seed) in enumerate(zip(tasks, seeds, strict=True))
            ]
            if resume.prior is not None and resume.prior.trials:
                warm_start_cost_model(plan.cost_model, contexts, resume.prior)
            if plan.on_start is not None:
                plan.on_start(work_dir)
            started = True
            nests = plan.naive_nests is not None and not is_gpu(target)  # GPUs: thread bindings
            if nests:
                _measure_naive_nests(tasks, target, tasks_to_check_first(stats, plan.naive_nests),
                                     builder=builder, runner=runner, database=database,
                                     recorder=recorder, when="before tuning")
            if plan.allocator is not None:
                for task_id, task in enumerate(stats):
                    plan.allocator.know_trials(task_id, task.trials, task.best_s)
                    plan.allocator.know_latency(task_id, task.naive_s)
            try:
                plan.task_scheduler.tune(
                    tasks=contexts,
                    task_weights=[task.weight for task in tasks],
                    max_trials_global=settings.trials,
                    max_trials_per_task=settings.trials,
                    num_trials_per_iter=settings.trials_per_batch,
                    builder=builder,
                    runner=ClockedRunner(InterruptibleRunner(runner, interrupt), clock,
                                         watch_load=rpc is None),
                    measure_callbacks=[*_default_callbacks(interrupt), durable,
                                       *plan.measure_callbacks,
                                       *([MidwayCallback(midway, budget, interrupt)]
                                         if midway is not None else [])],
                    database=database,
                    cost_model=InterruptibleCostModel(plan.cost_model, interrupt),
                )
            except BaseException:
                if interrupt.requested:  # keep what the farm is still measuring
                    _join_in_flight(plan.task_scheduler)
                raise
            if nests and not interrupt.requested:
                _measure_naive_nests(tasks, target, tasks_to_check(stats, plan.naive_nests),
                                     builder=builder, runner=runner, database=database,
                                     recorder=recorder, when="after tuning")
            _say_if_measured_beside_others(clock)
    except Exception:
        if getattr(runner, "lost", None) is not None:  # the farm died: say so, keep the records
            raise runner.lost from None
        if durable.failure is not None:  # a write failed (disk full): the OSError, not TVM's
            raise durable.failure from None
        raise
    finally:
        pinned.clear()
        recorder.close()
        if own_builder and builder is not None:
            builder.shutdown()
        if own_runner and runner is not None:
            shutdown_runner(runner)
        if plan.on_finish is not None and started:  # saves the agents: only those it restored
            plan.on_finish(work_dir)
    return database, stats
