"""Tasks the budget never reached: the cost model's unmeasured picks, kept out of the log."""

import json
import os
import tempfile

import numpy as np
import pytest
from conftest import (
    conv2d_module,
    harl_tune_here,
    matmul_module,
    shipped_prior_applies,
    three_convs,
)
from tvm.s_tir import meta_schedule as ms

from harl.frontend.tasks import TuningTask
from harl.resume import PriorRun
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics
from harl.untuned import PREDICTED_RUN_S, predicted_schedules, unmeasured_tasks


class CountingScorer:
    """Informative; prefers the candidate it saw last, and counts what it scored."""

    informative = True

    def __init__(self):
        self.scored = 0

    def __call__(self, context, candidates):
        from harl.agents.tile_tuner import Evaluation

        self.scored += len(candidates)
        return Evaluation(np.arange(len(candidates), dtype=float))


def three_tasks(second: str):
    """This CPU's target and three small tasks (the second named `second`)."""
    target = parse_target(None)
    load_tensor_intrinsics(target)
    return target, [TuningTask("matmul", matmul_module(16), 1.0, 1.0),
                    TuningTask(second, matmul_module(8), 1.0, 1.0),
                    TuningTask("conv", conv2d_module(), 1.0, 1.0)]


def test_only_tasks_never_measured_get_a_pick():
    target, tasks = three_tasks("failed")
    database = ms.database.MemoryDatabase()
    mods = [task.mod for task in tasks]
    assert unmeasured_tasks(PriorRun.read(database, mods)) == [0, 1, 2]
    first = predicted_schedules(tasks, [0, 1], target, CountingScorer(), samples=2)
    for index, run_s in ((0, 1e-3), (1, 1e10)):  # one measured, one whose run failed
        mod = tasks[index].mod
        trace = first.database.get_top_k(first.database.commit_workload(mod), 1)[0].trace
        database.commit_tuning_record(ms.database.TuningRecord(
            trace, database.commit_workload(mod), [run_s], target,
            ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    assert unmeasured_tasks(PriorRun.read(database, mods)) == [2]

    scorer = CountingScorer()
    picks = predicted_schedules(tasks, [2], target, scorer, samples=8)
    assert picks.task_indices == [2] and 1 <= scorer.scored <= 8
    union = ms.database.UnionDatabase(database, picks.database)
    for index, run_s in ((0, 1e-3), (2, PREDICTED_RUN_S)):
        best = union.query_tuning_record(tasks[index].mod, target, "main")  # as compile asks
        assert [float(x) for x in best.run_secs] == [run_s]


class ScriptedBuilder:
    """Fails the builds at (round, position in the round); keeps what it was given."""

    def __init__(self, failing: set[tuple[int, int]]):
        self.failing, self.rounds, self.artifacts = failing, [], []

    def build(self, inputs):
        from tvm.s_tir.meta_schedule.builder import BuilderResult

        round_ = len(self.rounds)
        self.rounds.append([item.mod for item in inputs])
        results = []
        for position in range(len(inputs)):
            if (round_, position) in self.failing:
                results.append(BuilderResult(None, "build abandoned"))
            else:
                self.artifacts.append(os.path.join(tempfile.mkdtemp(), "candidate.tar"))
                results.append(BuilderResult(self.artifacts[-1], None))
        return results


def test_a_pick_that_does_not_build_gives_way_to_the_next_best():
    target, tasks = three_tasks("small")
    unchecked = predicted_schedules(tasks, [0, 1, 2], target, CountingScorer(), samples=4)
    # round 0 builds each task's best: "small" and "conv" fail; round 1 their second best:
    # "small" fails again, "conv" builds; round 2: "small"'s third fails too
    builder = ScriptedBuilder({(0, 1), (0, 2), (1, 0), (2, 0)})
    picks = predicted_schedules(tasks, [0, 1, 2], target, CountingScorer(), samples=4,
                                builder=builder)
    assert [len(mods) for mods in builder.rounds] == [3, 2, 1]
    assert picks.task_indices == [0, 2]
    assert picks.failed_builds == 4 and picks.unbuilt_tasks == 1
    assert not any(os.path.exists(os.path.dirname(path)) for path in builder.artifacts)

    def trace_of(found, index):
        workload = found.database.commit_workload(tasks[index].mod)
        records = found.database.get_top_k(workload, 1)
        return str(records[0].trace) if records else None

    assert trace_of(picks, 0) == trace_of(unchecked, 0)  # built at once: the same pick
    assert trace_of(picks, 2) not in (None, trace_of(unchecked, 2))  # the second best
    assert trace_of(picks, 1) is None  # none built: TVM's naive nest


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """3 conv tasks, 2 batches of 4: the cost model has learned (8 samples), 1 task not
    reached (on a CPU also the layout transforms at the graph's borders, whose TVM nests are
    measured)."""
    work_dir = tmp_path_factory.mktemp("short")
    model = three_convs(work_dir.parent / "three_convs.onnx")
    args = (model, "--trials", 8, "--trials-per-batch", 4, "--work-dir", work_dir)
    return harl_tune_here(*args), args, work_dir


def test_a_budget_below_the_task_count_still_compiles_every_task(short_run):
    proc, _, work_dir = short_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    assert report["verified"] is True and report["trials_done"] == 8
    # 4.7-9.4 MFLOP convs: the shipped prior ranks them where it applies (x86, its TVM)
    assert report["cost_prior"] is shipped_prior_applies()
    tasks = report["tasks"]
    assert sum(task["trials"] > 0 for task in tasks) == 2
    assert sum(task["predicted"] for task in tasks) == 1
    assert all(task["predicted"] == (task["trials"] == 0 and not task["naive"]) for task in tasks)
    assert "predicted" in proc.stdout and "not in the tuning log" in proc.stdout
    assert list(report["phase_seconds"]) == ["setup", "tuning", "store", "picks",
                                             "compile_verify", "timing"]
    records = (work_dir / "database_tuning_record.json").read_text().splitlines()
    # the picks are never written to the log; the measured nests of the transforms are
    assert len(records) == 8 + sum(task["naive"] for task in tasks)


def test_a_rerun_with_the_budget_spent_picks_from_a_model_of_the_log(short_run):
    proc, args, work_dir = short_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    # nothing to measure: no run's cost model, one learned from the log
    rerun = harl_tune_here(*args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "going straight to compile" in rerun.stdout
    report = json.loads((work_dir / "report.json").read_text())
    assert report["verified"] is True
    assert [task["predicted"] for task in report["tasks"]] == [
        task["trials"] == 0 and not task["naive"] for task in report["tasks"]]
    nests = sum(task["naive"] for task in report["tasks"])
    assert len((work_dir / "database_tuning_record.json").read_text().splitlines()) == 8 + nests
