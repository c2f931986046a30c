"""TVM's unscheduled loop nest: measured before tuning for small tasks, after it for tasks whose
tuned kernels are tiny."""

import json
import math

import numpy as np
import pytest
import tvm
from conftest import harl_tune_here, matmul_module, save_model
from onnx import TensorProto, helper
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from harl.frontend.tasks import TuningTask
from harl.loop import _measure_naive_nests, open_database
from harl.measure.builder import PersistentBuilder
from harl.naive_nests import (
    NaiveNestConfig,
    is_naive_trace,
    measure_naive_nests,
    naive_schedule,
    tasks_to_check,
    tasks_to_check_first,
)
from harl.report.history import TaskStats, TrialRecorder
from harl.report.summary import task_summaries
from harl.resume import PriorRun, warm_start_cost_model
from harl.target import parse_target


def test_only_measured_tasks_below_the_threshold_are_checked_once():
    stats = [TaskStats("tiny", 1, 1, trials=4, best_s=6e-6),
             TaskStats("large", 1, 1, trials=4, best_s=2e-3),
             TaskStats("failed", 1, 1, trials=4, failures=4),
             TaskStats("checked", 1, 1, trials=4, best_s=6e-6, naive_s=1e-6)]
    assert tasks_to_check(stats, NaiveNestConfig(below_s=1e-4)) == [0]
    assert tasks_to_check(stats, NaiveNestConfig(below_s=1e-2)) == [0, 1]


def test_before_tuning_only_small_tasks_not_measured_yet_are_checked():
    stats = [TaskStats("copy", 1, 0.0), TaskStats("small", 1, 1e5),
             TaskStats("large", 1, 1e9), TaskStats("checked", 1, 1e3, naive_s=1e-6)]
    assert tasks_to_check_first(stats, NaiveNestConfig(first_max_flop=1e6)) == [0, 1]
    assert tasks_to_check_first(stats, NaiveNestConfig(first_max_flop=-1)) == []


def test_the_summary_shows_the_faster_of_tuned_and_naive():
    stats = [TaskStats("won", 1, 1, trials=4, best_s=6e-6, naive_s=1e-6),
             TaskStats("lost", 1, 1, trials=4, best_s=6e-6, naive_s=9e-6)]
    won, lost = task_summaries(stats)
    assert won.naive and won.best_ms == pytest.approx(1e-3)
    assert not lost.naive and lost.best_ms == pytest.approx(6e-3)


class FixedRunner:
    """Each candidate 'runs' in the given seconds; the builder is TVM's real one."""

    def __init__(self, seconds):
        self.seconds = list(seconds)

    def run(self, inputs):
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        class Done:
            def __init__(self, secs):
                self.secs = secs

            def result(self):
                return RunnerResult([self.secs], None)

        return [Done(self.seconds.pop(0)) for _ in inputs]


@pytest.fixture
def harl_builder():
    """harl's own builder: TVM's LocalBuilder imports every tensor intrinsic per batch, which
    takes longer than its 30 s timeout on some 2-core machines."""
    builder = PersistentBuilder(max_workers=1, timeout_s=120)
    yield builder
    builder.shutdown()


def test_a_faster_nest_is_committed_and_read_back_as_no_trial(tmp_path, harl_builder):
    target = parse_target(None)
    tasks = [TuningTask("faster", matmul_module(8), 1.0, 1.0),
             TuningTask("slower", matmul_module(4), 1.0, 1.0)]
    stats = [TaskStats(task.name, 1, 1, trials=2, best_s=5e-6) for task in tasks]
    database = open_database(tmp_path)
    won = measure_naive_nests(tasks, [0, 1], target, builder=harl_builder,
                              runner=FixedRunner([1e-6, 9e-6]), database=database, stats=stats)
    assert won == 1 and stats[0].naive_s == 1e-6 and stats[1].naive_s == 9e-6
    records = database.get_all_tuning_records()
    assert len(records) == 1 and is_naive_trace(records[0].trace)
    # MetaSchedule's query, as compile asks it, returns the nest (it skips empty traces).
    best = database.query_tuning_record(tasks[0].mod, target, "main")
    assert best is not None and is_naive_trace(best.trace)

    prior = PriorRun.read(open_database(tmp_path), [task.mod for task in tasks])
    assert prior.trials == 0  # the nest is not a trial
    resumed = [TaskStats(task.name, 1, 1) for task in tasks]
    prior.seed_stats(resumed)
    assert resumed[0].trials == 0 and resumed[0].naive_s == 1e-6
    assert not math.isfinite(resumed[0].best_s)

    class Recording:  # a resumed run's cost model must not learn the nest: it rescales labels
        def update(self, context, candidates, results):
            raise AssertionError("trained on a naive record")

    contexts = [ms.TuneContext(mod=task.mod, target=target) for task in tasks]
    assert warm_start_cost_model(Recording(), contexts, prior) == 0


def opaque_copy_module():
    """A function whose body is one opaque block and no root block (as TVM's top-k, which calls
    a library sort): there is no nest to look up."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def main(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        with T.sblock("copy"):
            T.reads()
            T.writes()
            for i in range(4):
                b[i] = a[i]

    return tvm.IRModule({"main": main})


def test_a_task_without_a_root_block_costs_only_its_own_nest(tmp_path, harl_builder):
    tasks = [TuningTask("opaque", opaque_copy_module(), 1.0, 1.0),
             TuningTask("small", matmul_module(8), 1.0, 1.0)]
    with pytest.raises(Exception, match="get-block"):
        naive_schedule(tasks[0].mod)
    stats = [TaskStats(task.name, 1, 1, trials=2, best_s=5e-6) for task in tasks]
    won = measure_naive_nests(tasks, [0, 1], parse_target(None), builder=harl_builder,
                              runner=FixedRunner([1e-6]), database=open_database(tmp_path),
                              stats=stats)
    assert won == 1 and stats[1].naive_s == 1e-6
    assert not math.isfinite(stats[0].naive_s)


def test_a_failing_nest_step_warns_and_keeps_the_run(tmp_path, harl_messages):
    class Broken:
        def build(self, inputs):
            raise RuntimeError("builder gone")

    stats = [TaskStats("tiny", 1, 1, trials=2, best_s=5e-6)]
    _measure_naive_nests([TuningTask("tiny", matmul_module(8), 1.0, 1.0)], parse_target(None),
                         [0], builder=Broken(), runner=None, database=open_database(tmp_path),
                         recorder=TrialRecorder(stats, tmp_path / "history.csv"),
                         when="after tuning")
    said = harl_messages()
    assert said and "not measured after tuning (builder gone)" in said[0]
    assert not math.isfinite(stats[0].naive_s)


def test_a_schedule_that_does_something_is_not_naive():
    sch = naive_schedule(matmul_module(8))
    assert is_naive_trace(sch.trace)
    other = Schedule(matmul_module(8))
    assert not is_naive_trace(other.trace)  # empty: never returned by the database anyway
    other.get_sblock("C")
    assert not is_naive_trace(other.trace)
    sch.get_loops(sch.get_sblock("C"))
    sch.parallel(sch.get_loops(sch.get_sblock("C"))[0])
    assert not is_naive_trace(sch.trace)


@pytest.fixture
def small_ops_model(tmp_path):
    """Softmax and a sum over a few numbers: kernels far below a thread pool's start-up."""
    return save_model(
        tmp_path / "small.onnx",
        [helper.make_node("Softmax", ["x"], ["s"], axis=-1),
         helper.make_node("ReduceSum", ["s"], ["y"], keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )


def test_small_tasks_compile_with_the_nest_when_it_is_faster(small_ops_model, tmp_path):
    work_dir = tmp_path / "run"
    args = (small_ops_model, "--trials", 4, "--trials-per-batch", 2, "--work-dir", work_dir)
    proc = harl_tune_here(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Both tasks are small: their nests are measured before tuning, not after.
    assert "loop nest of 2 small task(s) measured before tuning: 2 kept" in proc.stdout
    assert "measured after tuning" not in proc.stdout
    report = json.loads((work_dir / "report.json").read_text())
    assert report["verified"] is True and report["trials_done"] == 4
    database = open_database(work_dir)
    records = database.get_all_tuning_records()
    assert sum(is_naive_trace(r.trace) for r in records) == 2
    assert sum(not is_naive_trace(r.trace) for r in records) == 4
    # A task is marked naive exactly when its nest is the fastest record of its workload.
    fastest = {}
    for record in records:
        key, secs = str(record.workload.mod), float(np.mean([float(x) for x in record.run_secs]))
        if key not in fastest or secs < fastest[key][0]:
            fastest[key] = (secs, is_naive_trace(record.trace))
    naive = [task for task in report["tasks"] if task["naive"]]
    assert len(naive) == sum(won for _, won in fastest.values())
    # The allocator started from the nests' latencies: no first visit owed to either task.
    allocator = json.loads((work_dir / "agents" / "task_allocator.json").read_text())
    assert all(task["known"] for task in allocator)

    rerun = harl_tune_here(*args)  # the budget is spent: the nests count as no trial
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "going straight to compile" in rerun.stdout
    again = json.loads((work_dir / "report.json").read_text())
    assert [t["naive"] for t in again["tasks"]] == [t["naive"] for t in report["tasks"]]
