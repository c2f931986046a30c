"""Schedules for the tasks the budget never reached, chosen by the cost model, not measured.

A task without a measured record compiles to TVM's naive loop nest (one thread, no vectors);
with a budget short of the task count (DenseNet-121 has 191 tasks) those tasks dominate the
model's latency. Each gets instead the best of 64 random samples of its design space as a
cost model ranks them (the run's once it has learned, or the cost-model prior where it applies):
a random sample alone is often slower than the naive nest (ResNet-50 at 40 trials: 1111 ms
against 831; the model's picks 642). They live in an in-memory database used for this compile
only, never in the tuning log, so plain TVM builds from the log do not see them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harl.resume import PriorRun, warm_start_cost_model
from harl.search.trace_sites import schedules_of, with_state
from harl.target import local_cpu_count

SAMPLES_PER_TASK = 64
"""random samples of a task's design space the cost model chooses among: as many as the pool
whose top a task's first measured batch is. Against 16, ResNet-50 at 24 trials (13 tasks
picked) built 0.71x as fast, Inception-v1 at 40 (31 picked) 0.90x; 256 no faster than 64
(docs/benchmarks.md, session 33)"""
PREDICTED_RUN_S = 1e9
"""run time recorded for an unmeasured pick: any measured record of its workload wins over it"""


@dataclass
class PredictedSchedules:
    database: object  # ms.database.MemoryDatabase holding one record per task picked
    task_indices: list[int]  # the tasks that got one


def unmeasured_tasks(prior: PriorRun) -> list[int]:
    """Indices of the tasks `prior` holds no record of, not even a failed one (a task whose
    candidates failed keeps TVM's naive nest: a pick from its design space might fail too)."""
    return [index for index, records in enumerate(prior.records) if not records]


def _context(task, target):
    from tvm.s_tir import meta_schedule as ms

    return ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                          task_name=task.name, num_threads=local_cpu_count()).clone()


def predicted_schedules(tasks, wanted: list[int], target, scorer,
                        samples: int = SAMPLES_PER_TASK, seed: int = 0) -> PredictedSchedules:
    """For each task of `tasks` indexed in `wanted`, the sample of its design space that
    `scorer` (a ProgramScorer that ranks those tasks) rates best among `samples` random ones."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    memory = ms.database.MemoryDatabase()
    rng = np.random.default_rng(seed)
    picked = []
    for index in wanted:
        task = tasks[index]
        context = _context(task, target)
        sketches = [with_state(space.trace.simplified(remove_postproc=True), None)
                    for space in context.generate_design_space()]
        postprocs = list(context.space_generator.postprocs)
        seeds = [int(rng.integers(1 << 30)) for _ in range(samples)]
        drawn = schedules_of(task.mod, [sketches[i % len(sketches)] for i in range(samples)],
                             postprocs, seeds, context.num_threads)
        legal = [sch for sch in drawn if sch is not None]
        if not legal:
            continue
        args = ArgInfo.from_entry_func(legal[0].mod, remove_preproc=True)
        scores = scorer(context, [MeasureCandidate(sch, args) for sch in legal]).scores
        best = legal[int(np.argmax(scores))]
        memory.commit_tuning_record(ms.database.TuningRecord(
            best.trace, memory.commit_workload(task.mod), [PREDICTED_RUN_S], target, args))
        picked.append(index)
    return PredictedSchedules(memory, picked)


def with_predicted(database, tasks, wanted: list[int], target, scorer, seed: int = 0,
                   announce=None) -> tuple[object, list[int]]:
    """`database`, joined with `scorer`'s picks for the tasks of `wanted` it ranks, and the
    indices picked. A task it cannot rank keeps TVM's naive nest: a random pick is often slower.
    `announce(count)` is called before the picking, when there is any."""
    from tvm.s_tir import meta_schedule as ms

    wanted = [index for index in wanted if scorer.ranks(tasks[index].mod)]
    if not wanted:
        return database, []
    if announce is not None:
        announce(len(wanted))
    picks = predicted_schedules(tasks, wanted, target, scorer, seed=seed)
    return ms.database.UnionDatabase(database, picks.database), picks.task_indices


def scorer_from_records(prior: PriorRun, tasks, target, cost_prior=None,
                        warmup_samples: int = 8):
    """A ProgramScorer whose XGBoost model learned from the records in `prior` (per task of
    `tasks`), as a resumed run's model does: the cost model of a run that measured nothing this
    time (its budget was spent), or of a work dir compiled afterwards
    (tools/compare_work_dirs.py --with-picks). `cost_prior` (a CostPrior) takes part where it
    applies, as in the run."""
    from tvm.s_tir import meta_schedule as ms

    from harl.search.program_scorer import ProgramScorer

    xgb = ms.cost_model.XGBModel(num_warmup_samples=warmup_samples)
    warm_start_cost_model(xgb, [_context(task, target) for task in tasks], prior)
    return ProgramScorer(xgb._inst, cost_prior)
