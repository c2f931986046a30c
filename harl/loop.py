"""harl's tuning loop: one place that wires tasks, strategy, builder, runner and database."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from harl.config import MeasureConfig, RpcConfig
from harl.frontend.tasks import TuningTask
from harl.measure.builder import PersistentBuilder
from harl.measure.clock import StageClock
from harl.measure.runner import ClockedRunner, make_runner
from harl.report.history import TaskStats, TrialRecorder
from harl.report.progress import Progress
from harl.search import SearchPlan

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


@dataclass
class LoopSettings:
    """Budget and batching of one tuning loop."""

    trials: int
    trials_per_batch: int
    seed: int
    num_cores: int


def default_batch_size(trials: int, n_tasks: int) -> int:
    """Enough batches for every task to be visited a few times, at most TVM's 64 per batch."""
    return max(2, min(64, trials // max(1, 3 * n_tasks)))


def open_database(work_dir: Path):
    """The work dir's MetaSchedule JSON database (created if absent)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(
        path_workload=str(work_dir / WORKLOAD_FILE),
        path_tuning_record=str(work_dir / RECORD_FILE),
        module_equality="structural",
    )


def _task_logger(work_dir: Path, index: int, name: str) -> logging.Logger:
    logger = logging.getLogger(f"harl.tvm.task_{index:03d}_{name[:80]}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.handlers.clear()
    handler = logging.FileHandler(work_dir / "logs" / f"task_{index:03d}_{name[:80]}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger


def tune_tasks(tasks: list[TuningTask], target, plan: SearchPlan, work_dir: Path,
               settings: LoopSettings, measure: MeasureConfig,
               progress: Progress | None = None,
               rpc: RpcConfig | None = None) -> tuple[object, list[TaskStats]]:
    """Tune `tasks` under one global trial budget; returns the database and per-task stats."""
    from tvm.s_tir import meta_schedule as ms

    (work_dir / "logs").mkdir(parents=True, exist_ok=True)
    database = open_database(work_dir)
    seeds = ms.utils.fork_seed(settings.seed, n=len(tasks))
    contexts = [
        ms.TuneContext(
            mod=task.mod,
            target=target,
            space_generator=plan.space_generator,
            search_strategy=plan.make_search_strategy(index),
            task_name=task.name,
            logger=_task_logger(work_dir, index, task.name),
            rand_state=seed,
            num_threads=settings.num_cores,
        ).clone()
        for index, (task, seed) in enumerate(zip(tasks, seeds, strict=True))
    ]
    stats = [TaskStats(task.name, task.weight, task.flop) for task in tasks]
    clock = StageClock()
    # Started before the recorder's clock: its worker's start-up is not a trial's cost.
    measuring = make_runner(measure, rpc)
    runner = ClockedRunner(measuring, clock)
    recorder = TrialRecorder(stats, work_dir / "history.csv", progress, clock)
    builder = PersistentBuilder(max_workers=measure.builder_workers or settings.num_cores,
                                timeout_s=measure.build_timeout_s, clock=clock)
    if plan.on_start is not None:
        plan.on_start(work_dir)
    try:
        plan.task_scheduler.tune(
            tasks=contexts,
            task_weights=[task.weight for task in tasks],
            max_trials_global=settings.trials,
            max_trials_per_task=settings.trials,
            num_trials_per_iter=settings.trials_per_batch,
            builder=builder,
            runner=runner,
            measure_callbacks=[*ms.MeasureCallback.create("default"), recorder,
                               *plan.measure_callbacks],
            database=database,
            cost_model=plan.cost_model,
        )
    except Exception:
        if getattr(measuring, "lost", None) is not None:  # the farm died: say so, keep records
            raise measuring.lost from None
        raise
    finally:
        recorder.close()
        builder.shutdown()
        if hasattr(measuring, "shutdown"):
            measuring.shutdown()
        if plan.on_finish is not None:
            plan.on_finish(work_dir)
    return database, stats
