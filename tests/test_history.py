"""Per-trial bookkeeping: failures score infinity, the estimate, history.csv rows."""

import csv
import math

from tvm.s_tir.meta_schedule.builder import BuilderResult
from tvm.s_tir.meta_schedule.runner import RunnerResult

from harl.measure.clock import StageClock
from harl.report.history import TaskStats, TrialRecorder, end_to_end_estimate_s, trial_latency_s


def ok(*secs):
    return BuilderResult("artifact.tar", None), RunnerResult(list(secs), None)


def test_trial_latency_of_success_and_failures():
    assert math.isclose(trial_latency_s(*ok(1e-3, 3e-3))[0], 2e-3)
    latency, error = trial_latency_s(BuilderResult(None, "boom\ntrace"), None)
    assert latency == math.inf and error == "boom ... trace"
    latency, error = trial_latency_s(BuilderResult("a.tar", None), RunnerResult(None, "crash"))
    assert latency == math.inf and error == "crash"


def test_estimate_weights_measured_tasks_only():
    stats = [TaskStats("a", 2.0, 1.0, best_s=1e-3), TaskStats("b", 1.0, 1.0)]
    assert math.isclose(end_to_end_estimate_s(stats), 2e-3)
    assert end_to_end_estimate_s([TaskStats("c", 1.0, 1.0)]) is None
    # A kept unscheduled nest is what a compile uses: it counts, the faster of the two.
    stats.append(TaskStats("nest only", 1.0, 1.0, naive_s=5e-4))
    stats.append(TaskStats("nest lost", 1.0, 1.0, best_s=1e-4, naive_s=5e-4))
    assert math.isclose(end_to_end_estimate_s(stats), 2e-3 + 5e-4 + 1e-4)


def test_recorder_writes_every_trial_at_once(tmp_path):
    stats = [TaskStats("a", 1.0, 10.0), TaskStats("b", 3.0, 10.0)]
    recorder = TrialRecorder(stats, tmp_path / "history.csv")
    failed = (BuilderResult(None, "bad"), RunnerResult(None, "build failed"))
    builds, runs = zip(ok(2e-3), failed, ok(1e-3), strict=True)
    recorder.record(1, list(builds), list(runs))
    # Rows are on disk before close(): a crash keeps them.
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert [r["latency_ms"] for r in rows] == ["2", "", "1"]
    assert rows[1]["error"] == "bad"
    assert rows[-1]["best_task_ms"] == "1" and rows[-1]["e2e_estimate_ms"] == "3"
    assert stats[1].trials == 3 and stats[1].failures == 1 and stats[0].trials == 0
    recorder.close()


def test_recorder_splits_each_batch_into_build_and_run_seconds(tmp_path):
    clock = StageClock()
    recorder = TrialRecorder([TaskStats("a", 1.0, 10.0)], tmp_path / "history.csv", clock=clock)
    clock.build_s, clock.run_s = 0.5, 0.25
    builds, runs = zip(ok(2e-3), ok(1e-3), strict=True)
    recorder.record(0, list(builds), list(runs))
    clock.build_s, clock.run_s = 0.75, 1.25
    recorder.record(0, [ok(3e-3)[0]], [ok(3e-3)[1]])
    recorder.close()
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert [r["batch"] for r in rows] == ["1", "", "2"]
    assert [r["build_s"] for r in rows] == ["0.500", "", "0.250"]
    assert [r["run_s"] for r in rows] == ["0.250", "", "1.000"]
    assert float(rows[0]["batch_wall_s"]) >= 0 and rows[1]["batch_wall_s"] == ""
