from harl.report.summary import RunReport, TaskSummary, format_summary


def report_of(tasks):
    return RunReport(model="m", target="llvm", strategy="harl", trials=4, trials_done=4, seed=0,
                     tune_seconds=1.0, tasks=tasks)


def test_a_task_without_trials_is_untuned_not_failed():
    text = format_summary(report_of([
        TaskSummary("measured", 1, 1e6, 2, 0, 0.5),
        TaskSummary("every_trial_failed", 1, 1e6, 2, 2, None),
        TaskSummary("never_reached", 1, 1e6, 0, 0, None),
    ]))
    rows = {line.split()[0]: line.split()[-1] for line in text.splitlines()[1:4]}
    assert rows == {"measured": "0.5", "every_trial_failed": "failed", "never_reached": "untuned"}
    assert "1 task(s) had no trials" in text


def test_no_note_when_every_task_was_tuned():
    text = format_summary(report_of([TaskSummary("measured", 1, 1e6, 2, 0, 0.5)]))
    assert "had no trials" not in text
