"""A task whose candidates keep failing is stopped; the others go on (real MetaSchedule loop,
fake builder and runner)."""

import json
import math

import pytest
from conftest import FakeBuilder, matmul_module
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerResult

from harl.agents.task_allocator import AllocatorConfig
from harl.config import MeasureConfig
from harl.frontend.tasks import TuningTask
from harl.loop import LoopSettings, tune_tasks
from harl.search.harl_scheduler import AllocatorFeedback, HarlTaskScheduler, allocator_for
from harl.search.plan import SearchPlan
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics

FAILING_N = 16  # the task on 16x16 matrices always fails at run time


@derived_object
class FakeRunner(PyRunner):
    """Candidates of the 16x16 task crash; the others take 1 ms."""

    def run(self, runner_inputs):
        results = []
        for runner_input in runner_inputs:
            n = int(runner_input.args_info[0].shape[0])
            result = (RunnerResult(None, "LocalRunner: An exception occurred\nsegfault")
                      if n == FAILING_N else RunnerResult([1e-3], None))
            results.append(ms.runner.LocalRunnerFuture(result.run_secs, result.error_msg))
        return results


# scheduler -> failed batches before a stop. TVM's gradient scheduler never gives a task without
# any valid measurement a second batch, so there the task is stopped after its first.
SCHEDULERS = {
    "round-robin": (lambda _tasks: ms.task_scheduler.RoundRobin(), 2),
    "gradient": (lambda _tasks: ms.task_scheduler.GradientBased(), 1),
    "harl": (lambda tasks: HarlTaskScheduler(allocator_for(tasks, AllocatorConfig(), seed=0)),
             2),  # + its feedback callback
}


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_failing_task_is_stopped_and_the_other_goes_on(tmp_path, scheduler, harl_messages):
    make_scheduler, max_failed = SCHEDULERS[scheduler]
    target = parse_target(None)
    load_tensor_intrinsics(target)
    tasks = [TuningTask("good", matmul_module(32), 1.0, 2 * 32**3),
             TuningTask("bad", matmul_module(FAILING_N), 1.0, 2 * FAILING_N**3)]
    task_scheduler = make_scheduler(tasks)
    feedback = ([AllocatorFeedback(task_scheduler)] if scheduler == "harl" else [])
    plan = SearchPlan(task_scheduler=task_scheduler,
                      cost_model=ms.cost_model.RandomModel(),
                      make_search_strategy=lambda _index: ms.search_strategy.ReplayTrace(),
                      measure_callbacks=feedback)
    _, stats = tune_tasks(tasks, target, plan, tmp_path,
                          settings=LoopSettings(trials=16, trials_per_batch=2, seed=0, num_cores=1),
                          measure=MeasureConfig(max_failed_batches=max_failed),
                          builder=FakeBuilder(), runner=FakeRunner())
    said = harl_messages()
    good, bad = stats
    # the failures are recorded, with their error, and the task got no batch after its stop
    assert bad.stopped and bad.trials == bad.failures == 2 * max_failed
    assert bad.best_s == math.inf and "exception occurred ... segfault" in bad.last_error
    (stop,) = [line for line in said if "stopped task 1 (bad)" in line]
    assert "segfault" in stop and "the other tasks go on" in stop
    # the good task got the rest of the budget
    assert not good.stopped and good.failures == 0 and good.best_s == pytest.approx(1e-3)
    assert good.trials + bad.trials == 16
    # every trial, failed or not, is in the database and in history.csv
    records = (tmp_path / "database_tuning_record.json").read_text().splitlines()
    history = (tmp_path / "history.csv").read_text().splitlines()
    assert len(records) == len(history) - 1 == good.trials + bad.trials


def test_real_candidates_past_their_run_timeout_are_failures_and_the_task_stops(tmp_path,
                                                                               harl_messages):
    """Real builds, TVM's LocalRunner with a timeout nothing can meet, the real loop."""
    target = parse_target(None)
    load_tensor_intrinsics(target)
    plan = SearchPlan(task_scheduler=ms.task_scheduler.RoundRobin(),
                      cost_model=ms.cost_model.RandomModel(),
                      make_search_strategy=lambda _index: ms.search_strategy.ReplayTrace())
    _, (stats,) = tune_tasks([TuningTask("matmul", matmul_module(32), 1.0, 2 * 32**3)],
                             target, plan, tmp_path,
                             settings=LoopSettings(trials=6, trials_per_batch=2, seed=0,
                                                   num_cores=1),
                             measure=MeasureConfig(run_timeout_s=1e-3, max_failed_batches=1))
    said = harl_messages()
    assert stats.stopped and stats.trials == stats.failures == 2
    assert "Timeout" in stats.last_error
    assert len(said) == 1 and "stopped task 0 (matmul)" in said[0]
    history = (tmp_path / "history.csv").read_text().splitlines()[1:]
    assert len(history) == 2 and all("Timeout" in row for row in history)
    records = [json.loads(line) for line in
               (tmp_path / "database_tuning_record.json").read_text().splitlines()]
    assert [record[1][1] for record in records] == [[1e10]] * 2  # failed, yet recorded
