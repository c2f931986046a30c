"""A decision inside the tuning loop (harl.midway, the graph level's second search): it runs
once, after its share of trials is measured and on the disk; the loop goes on where it says
so and ends early where it does not (real MetaSchedule loop, fake builder and runner)."""

import pytest
from conftest import FakeBuilder, matmul_module
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import PyRunner

from harl.config import MeasureConfig
from harl.frontend.tasks import TuningTask
from harl.loop import LoopSettings, tune_tasks
from harl.midway import Midway
from harl.search.plan import SearchPlan
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics

TRIALS, BATCH, MARK = 12, 2, 5


@derived_object
class FakeRunner(PyRunner):
    def run(self, runner_inputs):
        return [ms.runner.LocalRunnerFuture([1e-3], None) for _ in runner_inputs]


def _tune(tmp_path, stop: bool):
    target = parse_target(None)
    load_tensor_intrinsics(target)
    tasks = [TuningTask(f"matmul{n}", matmul_module(n), 1.0, 2 * n**3) for n in (32, 48)]
    plan = SearchPlan(task_scheduler=ms.task_scheduler.RoundRobin(),
                      cost_model=ms.cost_model.RandomModel(),
                      make_search_strategy=lambda _index: ms.search_strategy.ReplayTrace())
    records = tmp_path / "database_tuning_record.json"
    on_disk: list[int] = []

    def decide() -> bool:
        on_disk.append(len(records.read_text().splitlines()))
        return stop

    midway = Midway(after=MARK, decide=decide)
    _, stats = tune_tasks(tasks, target, plan, tmp_path,
                          settings=LoopSettings(trials=TRIALS, trials_per_batch=BATCH, seed=0,
                                                num_cores=1),
                          measure=MeasureConfig(), builder=FakeBuilder(), runner=FakeRunner(),
                          midway=midway)
    return midway, on_disk, sum(task.trials for task in stats)


@pytest.mark.parametrize("stop", [False, True])
def test_the_decision_runs_once_past_its_mark_and_ends_the_loop_only_where_it_says(tmp_path,
                                                                                  stop):
    midway, on_disk, trials = _tune(tmp_path, stop)
    assert midway.decided and midway.stopped == stop
    (seen,) = on_disk  # once, with the batches up to the mark already in the database
    assert MARK <= seen < MARK + BATCH
    assert trials == (seen if stop else TRIALS)  # no batch handed out after a stop


def test_a_new_graphs_loop_measures_the_tasks_no_loop_measured_first(tmp_path):
    """The loop after a graph switch (or a resume without the allocator's checkpoint) starts a
    fresh allocator: the larger tasks the first graph shared come with their trials, so the
    new small task gets the first batch instead of waiting behind them."""
    from harl.naive_nests import NaiveNestConfig
    from harl.search.harl import harl_plan
    from harl.tune import resume_state

    _tune(tmp_path, stop=False)  # the first graph: matmul32 and matmul48, 12 trials
    target = parse_target(None)
    tasks = [TuningTask(f"matmul{n}", matmul_module(n), 1.0, 2 * n**3) for n in (32, 48, 16)]
    resume = resume_state(tmp_path, tasks)
    assert [s.trials > 0 for s in resume.stats] == [True, True, False]
    plan = harl_plan(seed=0, num_cores=1, tasks=tasks, nests=NaiveNestConfig(measure=False))
    _, stats = tune_tasks(tasks, target, plan, tmp_path,
                          settings=LoopSettings(trials=BATCH, trials_per_batch=BATCH, seed=0,
                                                num_cores=1),
                          measure=MeasureConfig(), builder=FakeBuilder(), runner=FakeRunner(),
                          resume=resume)
    assert stats[2].trials == BATCH
