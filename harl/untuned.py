"""Schedules for the tasks the budget never reached, chosen by the cost model, not measured.

A task without a measured record compiles to TVM's naive loop nest (one thread, no vectors); with a
budget short of the task count (DenseNet-121 has 191 tasks) those tasks dominate the model's
latency. Each gets instead the best of 64 random samples of its design space as a cost model ranks
them (the run's once it has learned, or the cost-model prior where it applies), since a random
sample alone is often slower than the naive nest. They live in an in-memory database used for this
compile only, never in the tuning log, so plain TVM builds from the log do not see them.

Each pick is built first, as a measured candidate is: a sample can be a kernel LLVM takes minutes to
compile, and the model's compile would pay it. The build timeout is the candidates', and the
straggler cutoff compares a pick with every pick built before it (all tasks' picks, not one task's
batch). A pick that fails gives way to the task's next best.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from harl.config import CostModelConfig
from harl.measure.artifacts import remove_build_dir
from harl.resume import PriorRun, warm_start_cost_model
from harl.search.trace_sites import schedules_of, with_state
from harl.target import local_cpu_count
from harl.tvm_adapter import python_instance

if TYPE_CHECKING:
    from harl.config import TuneConfig
    from harl.report.phases import PhaseClock
    from harl.report.summary import RunReport
    from harl.search.cost_prior import CostPrior

logger = logging.getLogger(__name__)

SAMPLES_PER_TASK = 64
"""random samples of a task's design space the cost model chooses among: as many as the pool
whose top a task's first measured batch is"""
BUILD_TRIES = 3
"""a task's best-ranked samples tried in turn until one builds within the limits; where none
does, the task keeps TVM's naive nest"""
PREDICTED_RUN_S = 1e9
"""run time recorded for an unmeasured pick: any measured record of its workload wins over it"""


@dataclass
class PredictedSchedules:
    database: object  # ms.database.MemoryDatabase holding one record per task picked
    task_indices: list[int]  # the tasks that got one
    failed_builds: int = 0  # samples whose build failed or was cut off (then the next best)
    unbuilt_tasks: int = 0  # tasks none of whose top samples built: TVM's naive nest


def unmeasured_tasks(prior: PriorRun) -> list[int]:
    """Indices of the tasks `prior` holds no record of, not even a failed one (a task whose
    candidates failed keeps TVM's naive nest: a pick from its design space might fail too)."""
    return [index for index, records in enumerate(prior.records) if not records]


def _context(task, target):
    from tvm.s_tir import meta_schedule as ms

    return ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                          task_name=task.name, num_threads=local_cpu_count()).clone()


def predicted_schedules(tasks, wanted: list[int], target, scorer,
                        *, samples: int = SAMPLES_PER_TASK, seed: int = 0,
                        builder=None) -> PredictedSchedules:
    """For each task of `tasks` indexed in `wanted`, the sample of its design space that
    `scorer` (a ProgramScorer that ranks those tasks) rates best among `samples` random ones;
    with a `builder`, the best that it builds (of the top `BUILD_TRIES`)."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    rng = np.random.default_rng(seed)
    ranked: dict[int, tuple[list, object]] = {}  # task index -> (best samples first, args)
    for index in wanted:
        task = tasks[index]
        context = _context(task, target)
        sketches = [with_state(space.trace.simplified(remove_postproc=True), None)
                    for space in context.generate_design_space()]
        postprocs = list(context.space_generator.postprocs)
        seeds = [int(rng.integers(1 << 30)) for _ in range(samples)]
        drawn = schedules_of(task.mod, [sketches[i % len(sketches)] for i in range(samples)],
                             postprocs, seeds, workers=context.num_threads)
        # one of each program: a copy of a sample that failed to build would fail again
        legal = list({tvm_ffi.structural_hash(sch.mod): sch
                      for sch in drawn if sch is not None}.values())
        if not legal:
            continue
        args = ArgInfo.from_entry_func(legal[0].mod, remove_preproc=True)
        scores = scorer(context, [MeasureCandidate(sch, args) for sch in legal]).scores
        order = np.argsort(-np.asarray(scores), kind="stable")[:BUILD_TRIES]
        ranked[index] = ([legal[i] for i in order], args)
    chosen, failed_builds = {index: 0 for index in ranked}, 0
    if builder is not None:
        chosen, failed_builds = _first_built(ranked, target, builder)
    memory = ms.database.MemoryDatabase()
    for index, rank in chosen.items():
        samples_ranked, args = ranked[index]
        memory.commit_tuning_record(ms.database.TuningRecord(
            samples_ranked[rank].trace, memory.commit_workload(tasks[index].mod),
            [PREDICTED_RUN_S], target, args))
    return PredictedSchedules(memory, sorted(chosen), failed_builds, len(ranked) - len(chosen))


def _first_built(ranked: dict[int, tuple[list, object]], target,
                 builder) -> tuple[dict[int, int], int]:
    """Per task, the rank of its first sample that `builder` builds (tasks none of whose
    samples build are left out), and how many builds failed. A round builds every task's
    next sample at once."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    chosen: dict[int, int] = {}
    failed = 0
    for rank in range(BUILD_TRIES):
        pending = [index for index, (samples, _) in ranked.items()
                   if index not in chosen and rank < len(samples)]
        if not pending:
            break
        results = builder.build([BuilderInput(ranked[index][0][rank].mod, target)
                                 for index in pending])
        for index, result in zip(pending, results, strict=True):
            if result.error_msg is None:
                chosen[index] = rank
                remove_build_dir(result.artifact_path)
            else:
                failed += 1
    return chosen, failed


@contextlib.contextmanager
def pick_builder(measure):
    """A builder with the limits of `measure` (a MeasureConfig), for the picks' builds, whose
    straggler cutoff counts every pick built before (see the module's docstring); its worker
    processes start at the first build and stop on exit."""
    from harl.measure.builder import PersistentBuilder

    builder = PersistentBuilder(max_workers=measure.builder_workers or local_cpu_count(),
                                timeout_s=measure.build_timeout_s,
                                cutoff=measure.straggler_cutoff(), pooled_cutoff=True)
    try:
        yield builder
    finally:
        builder.shutdown()


def with_predicted(database, tasks, wanted: list[int], target, scorer, *, seed: int = 0,
                   announce=None, builder=None) -> tuple[object, PredictedSchedules]:
    """`database`, joined with `scorer`'s picks for the tasks of `wanted` it ranks (each
    built first where a `builder` is given), and the picks. A task it cannot rank keeps TVM's
    naive nest: a random pick is often slower. `announce(count)` is called before the
    picking, when there is any."""
    from tvm.s_tir import meta_schedule as ms

    wanted = [index for index in wanted if scorer.ranks(tasks[index].mod)]
    if not wanted:
        return database, PredictedSchedules(ms.database.MemoryDatabase(), [])
    if announce is not None:
        announce(len(wanted))
    picks = predicted_schedules(tasks, wanted, target, scorer, seed=seed, builder=builder)
    return ms.database.UnionDatabase(database, picks.database), picks


def scorer_from_records(prior: PriorRun, tasks, target, *, cost_prior=None,
                        cost_model: CostModelConfig | None = None):
    """A ProgramScorer whose XGBoost model learned from the records in `prior` (per task of
    `tasks`), as a resumed run's model does: the cost model of a run that measured nothing this
    time (its budget was spent), or of a work dir compiled afterwards
    (tools/compare_work_dirs.py --with-picks). `cost_prior` (a CostPrior) takes part where it
    applies, as in the run; `cost_model` sets both as the run's did (None: the defaults)."""
    from tvm.s_tir import meta_schedule as ms

    from harl.search.program_scorer import ProgramScorer

    config = cost_model if cost_model is not None else CostModelConfig()
    xgb = ms.cost_model.XGBModel(num_warmup_samples=config.warmup_samples)
    warm_start_cost_model(xgb, [_context(task, target) for task in tasks], prior)
    return ProgramScorer(python_instance(xgb), cost_prior,
                         equal_weight_samples=config.equal_weight_samples,
                         min_task_samples=config.min_task_samples)


def schedule_untuned(report: RunReport, tasks, target, database, *, plan, prior: PriorRun,
                     cost_prior: CostPrior | None, config: TuneConfig, clock: PhaseClock):
    """The database to compile with: `database`, plus the cost model's unmeasured picks for the
    tasks the budget never reached (marked `predicted` in the report).
    `prior`: the records the work dir held before this run, all of them when `plan` is None;
    `cost_prior`: the run's CostPrior or None (it ranks the samples of a task never measured);
    `clock` laps the picks where there are tasks to pick for."""
    from harl.search.program_scorer import ProgramScorer

    # A task with no trials has no record, not even a failed one, unless its nest was kept.
    untuned = [index for index, task in enumerate(report.tasks)
               if task.trials == 0 and not task.naive]
    if not untuned:
        return database
    if plan is None:  # nothing measured this time (the budget was spent): learn from the log
        scorer = scorer_from_records(prior, tasks, target, cost_prior=cost_prior,
                                     cost_model=config.cost_model)
    else:
        xgb = python_instance(plan.cost_model)
        scorer = ProgramScorer(xgb if hasattr(xgb, "booster") else None, cost_prior,
                               equal_weight_samples=config.cost_model.equal_weight_samples,
                               min_task_samples=config.cost_model.min_task_samples)
    with pick_builder(config.measure) as builder:
        database, picks = with_predicted(
            database, tasks, untuned, target, scorer, seed=config.seed, builder=builder,
            announce=lambda count: logger.info(
                f"harl: {count} task(s) were never measured; the cost model picks one of "
                f"{SAMPLES_PER_TASK} samples for each, built to check (not measured, not in the "
                "tuning log) ..."))
    if picks.failed_builds:
        logger.info(f"harl: {picks.failed_builds} sampled pick(s) failed to build or were cut "
                    "off; the task's next best took each one's place"
                    + (f" ({picks.unbuilt_tasks} task(s) keep TVM's naive nest: none of their "
                       "top samples built)" if picks.unbuilt_tasks else ""))
    for index in picks.task_indices:
        report.tasks[index].predicted = True
    clock.lap("picks")
    return database
