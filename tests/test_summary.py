from harl.report import phases
from harl.report.summary import RunReport, TaskSummary, format_summary


def report_of(tasks):
    return RunReport(model="m", target="llvm", strategy="harl", trials=4, trials_done=4, seed=0,
                     tune_seconds=1.0, tasks=tasks)


def test_tasks_without_a_measured_schedule_say_why():
    text = format_summary(report_of([
        TaskSummary("measured", 1, 1e6, 2, 0, 0.5),
        TaskSummary("every_trial_failed", 1, 1e6, 2, 2, None),
        TaskSummary("never_reached", 1, 1e6, 0, 0, None),
        TaskSummary("picked_by_the_model", 1, 1e6, 0, 0, None, predicted=True),
    ]))
    rows = {line.split()[0]: line.split()[-1] for line in text.splitlines()[1:5]}
    assert rows == {"measured": "0.5", "every_trial_failed": "failed",
                    "never_reached": "untuned", "picked_by_the_model": "predicted"}
    assert "1 task(s) without a measured schedule run the cost model's pick" in text
    assert "2 task(s) without a measured schedule keep TVM's default one" in text


def test_no_note_when_every_task_was_measured():
    text = format_summary(report_of([TaskSummary("measured", 1, 1e6, 2, 0, 0.5)]))
    assert "without a measured schedule" not in text


def test_the_agents_time_is_broken_down_where_it_went():
    report = report_of([TaskSummary("measured", 1, 1e6, 4, 0, 0.5)])
    report.agent_seconds = {"search/agent_seconds": 0.8, "cost_model/update_seconds": 0.2}
    report.agent_stage_seconds = {"search/replay_seconds": 0.4, "tile/policy_seconds": 0.04}
    line = next(x for x in format_summary(report).splitlines() if "agents + cost model" in x)
    assert line.endswith("250 ms per trial (of which trace replay 100, policy 10)")


def test_a_resumed_run_counts_its_seconds_over_the_trials_it_measured():
    report = report_of([TaskSummary("measured", 1, 1e6, 4, 0, 0.5)])
    report.trials_resumed = 2  # of the 4 done: this process measured 2, in 1 s of agents
    report.agent_seconds = {"search/agent_seconds": 1.0}
    assert "500 ms per trial" in format_summary(report)


def test_a_gpu_model_against_onnxruntime_on_the_cpu_says_so():
    report = report_of([TaskSummary("measured", 1, 1e6, 4, 0, 0.5)])
    report.latency_ms = {"untuned": 2.0, "tuned": 1.0, "onnxruntime": 4.0}
    assert "on the CPU" not in format_summary(report)  # both on this CPU
    report.gpu_target = True
    lines = format_summary(report).splitlines()
    assert "onnxruntime latency      4 ms (onnxruntime on the CPU)" in lines
    assert "tuned / onnxruntime      0.25x (onnxruntime on the CPU)" in lines


def test_the_wall_time_is_broken_down_by_phase_in_the_order_they_ran():
    report = report_of([TaskSummary("measured", 1, 1e6, 4, 0, 0.5)])
    report.phase_seconds = {"setup": 20.4, "tuning": 36.2, "picks": 30.0,
                            "compile_verify": 50.1, "timing": 15.0}
    line = next(x for x in format_summary(report).splitlines() if x.startswith("wall time"))
    assert line.endswith("152 s: setup and import 20, tuning 36, untuned tasks' picks 30, "
                         "compile and verify 50, timing 15")


def test_a_phase_clock_lap_closes_the_phase_since_the_last_one(monkeypatch):
    now = iter([10.0, 12.5, 13.0, 20.0])
    monkeypatch.setattr(phases.time, "monotonic", lambda: next(now))
    clock = phases.PhaseClock()
    assert clock.lap("setup") == 2.5
    clock.lap("tuning")
    clock.lap("setup")  # a phase that comes back adds up
    assert clock.seconds == {"setup": 9.5, "tuning": 0.5}
