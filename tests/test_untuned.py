"""Tasks the budget never reached: the cost model's unmeasured picks, kept out of the log."""

import json

import numpy as np
from conftest import EXAMPLES, conv2d_module, matmul_module
from test_end_to_end import harl_tune
from tvm.s_tir import meta_schedule as ms

from harl.frontend.tasks import TuningTask
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics
from harl.untuned import PREDICTED_RUN_S, has_measured_record, predicted_schedules


class CountingScorer:
    """Informative; prefers the candidate it saw last, and counts what it scored."""

    informative = True

    def __init__(self):
        self.scored = 0

    def __call__(self, context, candidates):
        from harl.agents.tile_tuner import Evaluation

        self.scored += len(candidates)
        return Evaluation(np.arange(len(candidates), dtype=float))


def test_only_tasks_without_a_measured_record_get_a_pick():
    target = parse_target(None)
    load_tensor_intrinsics(target)
    tuned, untuned = (TuningTask("matmul", matmul_module(16), 1.0, 1.0),
                      TuningTask("conv", conv2d_module(), 1.0, 1.0))
    measured = ms.database.MemoryDatabase()
    first = predicted_schedules([tuned], target, measured, CountingScorer(), samples=2)
    trace = first.database.get_top_k(first.database.commit_workload(tuned.mod), 1)[0].trace
    measured.commit_tuning_record(ms.database.TuningRecord(
        trace, measured.commit_workload(tuned.mod), [1e-3], target,
        ms.arg_info.ArgInfo.from_prim_func(tuned.mod["main"])))
    assert has_measured_record(measured, tuned.mod)
    assert not has_measured_record(measured, untuned.mod)

    scorer = CountingScorer()
    picks = predicted_schedules([tuned, untuned], target, measured, scorer, samples=8)
    assert picks.task_indices == [1] and 1 <= scorer.scored <= 8
    union = ms.database.UnionDatabase(measured, picks.database)
    for task, run_s in ((tuned, 1e-3), (untuned, PREDICTED_RUN_S)):
        best = union.query_tuning_record(task.mod, target, "main")  # as the compile asks
        assert [float(x) for x in best.run_secs] == [run_s]


def test_a_budget_below_the_task_count_still_compiles_every_task(tmp_path):
    # 5 tasks, 2 batches of 4: the cost model has learned (8 samples), 3 tasks were not reached.
    proc = harl_tune(EXAMPLES / "cnn.onnx", "--trials", 8, "--trials-per-batch", 4,
                     "--work-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verified"] is True and report["trials_done"] == 8
    tasks = report["tasks"]
    assert sum(task["trials"] > 0 for task in tasks) == 2
    assert all(task["predicted"] == (task["trials"] == 0) for task in tasks)
    assert "predicted" in proc.stdout and "not in the tuning log" in proc.stdout
    records = (tmp_path / "database_tuning_record.json").read_text().splitlines()
    assert len(records) == 8  # the picks are never written to the log

