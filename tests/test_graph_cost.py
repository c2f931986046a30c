"""The graph cost: measured tasks from the database, the rest estimated, cached, calibrated."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from harl.graph.cost import SLOPE_RANGE, Calibration, GraphCostModel


class CountingScorer:
    """Scores every schedule 0.5 and counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def ranks(self, mod) -> bool:
        return True

    def __call__(self, context, candidates):
        self.calls += 1
        return SimpleNamespace(scores=np.full(len(candidates), 0.5))


def _mlp(hidden: int = 32):
    """x @ W1 -> relu -> @ W2: a fused matmul+relu task and a matmul task."""
    from tvm import relax

    rng = np.random.default_rng(0)
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            w1 = relax.const(rng.standard_normal((64, hidden)).astype("float32"))
            w2 = relax.const(rng.standard_normal((hidden, 16)).astype("float32"))
            y = builder.emit(relax.op.nn.relu(relax.op.matmul(x, w1)))
            out = builder.emit_output(relax.op.matmul(y, w2))
        builder.emit_func_output(out)
    return builder.get()


@pytest.fixture(scope="module")
def target():
    from harl.target import parse_target

    return parse_target(None)


def _database_with(task, target, run_secs: float):
    """A database holding one measured record of `task`'s workload."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from harl.tvm_env import load_tensor_intrinsics

    load_tensor_intrinsics(target)
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(task.mod)
    database.commit_tuning_record(ms.database.TuningRecord(
        Schedule(task.mod).trace, workload, [run_secs], target,
        ArgInfo.from_entry_func(task.mod, remove_preproc=True)))
    return database


def test_measured_task_comes_from_the_database_and_the_rest_is_estimated(target):
    from harl.frontend.tasks import extract_tasks

    mod = _mlp()
    tasks = extract_tasks(mod, target)
    assert len(tasks) == 2
    measured = tasks[0]
    model = GraphCostModel(target, database=_database_with(measured, target, 0.00123),
                           scorer=CountingScorer())
    cost = model.estimate(mod)
    by_name = {task.name: task for task in cost.tasks}
    assert by_name[measured.name].source == "measured"
    assert by_name[measured.name].ms == pytest.approx(1.23)
    other = by_name[tasks[1].name]
    assert other.source == "estimated"
    assert 0 < other.ms < math.inf
    assert cost.total_ms == pytest.approx(sum(t.weight * t.ms for t in cost.tasks))
    assert 0 < cost.measured_share < 1
    # one measured workload: the calibration maps predictions onto it (offset only)
    assert model.calibration.fitted_on == 1
    assert model.calibration.slope == 1.0


def test_no_estimate_runs_faster_than_the_fastest_measured_task(target):
    """A padded conv merge adds FLOPs: the estimate of a new task must not make them free."""
    from harl.frontend.tasks import extract_tasks

    mod = _mlp()
    small, large = sorted(extract_tasks(mod, target), key=lambda task: task.flop)
    database = _database_with(small, target, 1.0)  # 1 s: a slow machine
    floored, free = (GraphCostModel(target, database=database, scorer=CountingScorer(),
                                    measured_peak_floor=floor) for floor in (True, False))
    assert floored.peak_gflops == pytest.approx(small.flop / 1e9)
    floor_ms = large.flop / (floored.peak_gflops * 1e6)
    estimate = {t.name: t.ms for t in floored.estimate(mod).tasks}[large.name]
    unfloored = {t.name: t.ms for t in free.estimate(mod).tasks}[large.name]
    assert unfloored < floor_ms  # the calibrated estimate alone prices it faster ...
    assert estimate == pytest.approx(floor_ms)  # ... than the machine has run anything


def test_estimates_are_cached_by_workload(target):
    scorer = CountingScorer()
    model = GraphCostModel(target, scorer=scorer)
    first = model.estimate(_mlp())
    calls = scorer.calls
    assert calls == 2  # each task's samples scored once
    again = model.estimate(_mlp())  # a new module object, the same workloads
    assert scorer.calls == calls
    assert again == first
    # a variant with one new task: only that one is scored
    model.estimate(_mlp(hidden=48))
    assert scorer.calls == calls + 2  # both tasks' shapes changed with the hidden size
    assert model.scored_workloads == 4


def test_without_a_scorer_that_ranks_the_roofline_stands(target):
    class Blind(CountingScorer):
        def ranks(self, mod) -> bool:
            return False

    scorer = Blind()
    cost = GraphCostModel(target, scorer=scorer).estimate(_mlp())
    assert scorer.calls == 0
    assert all(task.source == "estimated" and task.ms > 0 for task in cost.tasks)
    # the larger task costs more
    big, small = sorted(cost.tasks, key=lambda t: -t.flop)
    assert big.ms > small.ms


def _matmul_beside_exp():
    """x @ W and exp(x): a task with a reduction and an element-wise one."""
    from tvm import relax

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            w = relax.const(np.ones((64, 16), dtype="float32"))
            product = builder.emit(relax.op.matmul(x, w))
            out = builder.emit_output(relax.Tuple([product, builder.emit(relax.op.exp(x))]))
        builder.emit_func_output(out)
    return builder.get()


def test_only_tasks_with_a_reduction_are_scored_unless_asked(target):
    from harl.frontend.tasks import extract_tasks
    from harl.graph.cost import has_reduction, roofline_ms

    tasks = extract_tasks(_matmul_beside_exp(), target)
    assert sorted(has_reduction(t.mod) for t in tasks) == [False, True]
    scored, unscored = CountingScorer(), CountingScorer()
    GraphCostModel(target, scorer=scored, score_injective=True).estimate(_matmul_beside_exp())
    cost = GraphCostModel(target, scorer=unscored).estimate(_matmul_beside_exp())
    assert (scored.calls, unscored.calls) == (2, 1)
    injective = next(t for t in tasks if not has_reduction(t.mod))
    priced = next(c for c in cost.tasks if c.name == injective.name)
    assert priced.ms == pytest.approx(roofline_ms(injective.mod, injective.flop))


def test_the_shipped_prior_scores_an_unmeasured_task(target):
    cost = GraphCostModel(target, samples=4).estimate(_mlp(hidden=256))
    assert all(task.source == "estimated" and 0 < task.ms < 1e3 for task in cost.tasks)


def test_calibration_is_monotone_and_fits_the_measured_scale():
    predicted = [0.01, 0.1, 1.0, 10.0]
    calibration = Calibration.fit(predicted, [3 * p for p in predicted])
    assert calibration.slope == pytest.approx(1.0)
    assert calibration.ms(0.5) == pytest.approx(1.5)
    values = [calibration.ms(p) for p in np.geomspace(1e-4, 1e2, 20)]
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    # measurements that fall as predictions rise cannot make the map decreasing
    inverted = Calibration.fit(predicted, [1 / p for p in predicted])
    assert inverted.slope == SLOPE_RANGE[0]
    assert inverted.ms(1.0) < inverted.ms(2.0)


def test_calibration_with_few_points_fits_the_offset_only():
    assert Calibration.fit([], []) == Calibration()
    one = Calibration.fit([0.2], [0.8])
    assert (one.slope, one.fitted_on) == (1.0, 1)
    assert one.ms(0.2) == pytest.approx(0.8)
