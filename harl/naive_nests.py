"""TVM's unscheduled loop nest, measured for small tasks before tuning and tiny ones after.

Every schedule of MetaSchedule's CPU design space parallelises its outer loops, and on a small
operator (a softmax, a layer norm, a sum over a few hundred numbers) waking the thread pool costs
more than the work: such kernels tune to a floor of several microseconds, while the serial loop
nest TVM compiles without a schedule runs in well under one. The nest of each small task (at
most `NaiveNestConfig.first_max_flop`) is measured before tuning, with the run's own builder and
runner, and the task allocator starts from its latency, so tasks the nest already serves well
get no trials until the large ones have had theirs. After tuning, each other task whose best
kernel is below `NaiveNestConfig.below_s` gets its nest measured too. A nest faster than the
task's tuned kernels goes into the tuning log like any measured schedule, so compiles and plain
TVM builds use it. Measuring nests costs no trials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harl.measure.artifacts import remove_build_dir
from harl.report.history import TaskStats, trial_latency_s


@dataclass(frozen=True)
class NaiveNestConfig:
    """When the unscheduled loop nest is measured."""

    measure: bool = True
    """measure nests at all (off: an ablation arm; tasks then start from their first batch)"""
    first_max_flop: float = 2e6
    """tasks of at most this many floating-point operations (TVM's estimate; data movement, and
    a task it cannot count, count none) have their nest measured before tuning: even a serial
    nest at a few hundred MFLOP/s runs them in a few ms (a copy of a large tensor may take tens;
    a run is cut at the runner's timeout), so each costs about one trial's measurement, and the
    allocator learns their latency without spending a batch on them"""

    below_s: float = 1e-4
    """tasks whose best measured kernel is faster than this: where the thread pool's start-up is
    a large share (a few microseconds on a small CPU, tens on a large one); above it a serial
    nest loses to a tuned one by far, and measuring it would cost time for nothing"""


def naive_schedule(mod):
    """`mod` unscheduled, its trace one block lookup that changes nothing: MetaSchedule's
    databases never return a record whose trace is empty."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    sch.get_sblock("root")
    return sch


def is_naive_trace(trace) -> bool:
    """Whether a record's trace is the unscheduled nest: the root block's lookup and nothing
    else (a searched CPU schedule always annotates the root block at least)."""
    insts = list(trace.insts)
    return (len(insts) == 1 and insts[0].kind.name == "GetSBlock"
            and str(insts[0].attrs[0]) == "root")


def tasks_to_check_first(stats: list[TaskStats], config: NaiveNestConfig) -> list[int]:
    """Before tuning: tasks of at most `first_max_flop` whose nest was not measured yet."""
    return [index for index, task in enumerate(stats)
            if task.flop <= config.first_max_flop and not math.isfinite(task.naive_s)]


def tasks_to_check(stats: list[TaskStats], config: NaiveNestConfig) -> list[int]:
    """After tuning: tasks with a kernel below `below_s` whose nest was not measured yet."""
    return [index for index, task in enumerate(stats)
            if task.best_s < config.below_s and not math.isfinite(task.naive_s)]


def measure_naive_nests(tasks, indices: list[int], target, *, builder, runner, database,
                        stats: list[TaskStats]) -> int:
    """Measure the unscheduled nest of `tasks[indices]`; commit the ones faster than the tuned.

    Returns how many nests won. A nest that fails to build or run is skipped (inf), and so is a
    task whose function has no root block to schedule (TVM's top-k: one block calling a sort).
    """
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.schedule import ScheduleError

    schedules, schedulable = [], []
    for index in indices:
        try:
            schedules.append(naive_schedule(tasks[index].mod))
        except ScheduleError:  # no root block to look up: one opaque block, e.g. a library call
            continue
        schedulable.append(index)
    indices = schedulable  # a task without a nest of its own keeps its tuned kernels
    if not indices:
        return 0
    built = builder.build([ms.builder.BuilderInput(sch.mod, target) for sch in schedules])
    args = [ArgInfo.from_entry_func(sch.mod, remove_preproc=True) for sch in schedules]
    runnable = [k for k, result in enumerate(built) if not result.error_msg]
    results = {}
    try:
        if runnable:
            futures = runner.run([ms.runner.RunnerInput(built[k].artifact_path, "cpu", args[k])
                                  for k in runnable])
            # A runner that returns fewer results leaves the rest unmeasured.
            results = {k: future.result() for k, future in zip(runnable, futures, strict=False)}
    finally:
        for k in runnable:  # MetaSchedule's clean-up callback only sees trials
            remove_build_dir(built[k].artifact_path)
    won = 0
    for k, index in enumerate(indices):
        if k not in results:
            continue
        latency, _ = trial_latency_s(built[k], results[k])
        stats[index].naive_s = latency
        if latency < stats[index].best_s:
            database.commit_tuning_record(ms.database.TuningRecord(
                schedules[k].trace, database.commit_workload(tasks[index].mod),
                [float(s) for s in results[k].run_secs], target, args[k]))
            won += 1
    return won
