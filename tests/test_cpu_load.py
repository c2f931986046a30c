import subprocess
import sys
import time

import pytest

from harl.loop import _say_if_measured_beside_others
from harl.measure import cpu_load
from harl.measure.clock import StageClock
from harl.measure.cpu_load import CpuSnapshot, other_load_cores, snapshot
from harl.measure.runner import ClockedRunner
from harl.report.summary import RunReport, TaskSummary, format_summary

linux_only = pytest.mark.skipif(snapshot() is None, reason="no /proc/stat here")


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


SPIN = "import time\nend = time.monotonic() + {}\nwhile time.monotonic() < end: pass"


def load_while_sleeping(seconds: float) -> float:
    time.sleep(0.5)  # past the spinner's start-up
    before = snapshot()
    time.sleep(seconds)
    return other_load_cores(before, snapshot())


def start_another_process_spinning(seconds: float) -> None:
    """Not a descendant: started by a child that exits at once, so it belongs to someone else."""
    subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen("
                    f"[sys.executable, '-c', {SPIN.format(seconds)!r}], start_new_session=True)"],
                   check=True)


@linux_only
def test_another_process_spinning_counts_and_this_one_and_its_children_do_not():
    start_another_process_spinning(2.5)
    beside_another = load_while_sleeping(1.5)
    time.sleep(1.0)  # it has stopped
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(2.5)])
    try:
        beside_a_child = load_while_sleeping(1.5)
    finally:
        child.kill()
        child.wait()
    before = snapshot()
    spin(1.5)
    own = other_load_cores(before, snapshot())
    # The other process took about one core; this process's own spin and its child's are
    # subtracted (what the rest of the machine did meanwhile stays: only margins are asserted).
    assert beside_another > 0.6
    assert beside_a_child < beside_another - 0.4
    assert own < beside_another - 0.4


def test_a_missing_or_stalled_snapshot_says_nothing():
    a = CpuSnapshot(busy_s=10.0, own_s=1.0, wall_s=5.0, cores=2)
    assert other_load_cores(None, a) is None
    assert other_load_cores(a, a) is None
    # Own time larger than the counters' (their 10 ms ticks lag) is no one else's load.
    assert other_load_cores(a, CpuSnapshot(10.5, 1.6, 6.0, 2)) == 0.0
    assert other_load_cores(a, CpuSnapshot(12.0, 1.5, 6.0, 2)) == pytest.approx(1.5)


def test_only_the_cpus_this_process_may_run_on_are_counted(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text("cpu  900 0 900 0 0 0 0 0 0 0\n"
                    "cpu0 100 5 50 1000 7 1 2 3 0 0\n"
                    "cpu1 400 0 400 0 0 0 0 0 0 0\n"
                    "intr 123\n")
    monkeypatch.setattr(cpu_load.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(cpu_load.os, "sysconf", lambda name: 100)
    shot = snapshot(stat)
    assert shot.cores == 1
    assert shot.busy_s == pytest.approx((100 + 5 + 50 + 1 + 2 + 3) / 100)  # idle, iowait left out


def test_the_summary_flags_timings_taken_beside_other_load():
    report = RunReport(model="m", target="llvm", strategy="harl", trials=4, trials_done=4,
                       seed=0, tune_seconds=1.0, tasks=[TaskSummary("t", 1, 1e6, 4, 0, 0.5)],
                       latency_ms={"untuned": 2.0, "tuned": 1.0, "onnxruntime": 1.5})
    report.timing_other_cores = 0.05
    assert "other load" not in format_summary(report)
    report.timing_other_cores = 0.9
    line = next(x for x in format_summary(report).splitlines() if x.startswith("other load"))
    assert "0.9 cores' worth of CPU time went to other processes" in line


class SleepingRunner:
    def run(self, runner_inputs):
        time.sleep(0.6)
        return []


@linux_only
def test_candidates_measured_beside_another_process_are_flagged_after_tuning():
    quiet, watched, unwatched = StageClock(), StageClock(), StageClock()
    ClockedRunner(SleepingRunner(), unwatched).run([])  # a farm's runner: not watched
    start_another_process_spinning(2.5)
    time.sleep(0.5)
    for _ in range(2):
        ClockedRunner(SleepingRunner(), watched, watch_load=True).run([])
    said = []
    _say_if_measured_beside_others(watched, said.append)
    assert watched.watched_run_s == pytest.approx(watched.run_s) and watched.run_s >= 1.2
    assert watched.others_while_measuring() > 0.6
    assert said and "while candidates were measured" in said[0]
    assert unwatched.others_while_measuring() is None
    said.clear()
    _say_if_measured_beside_others(quiet, said.append)  # nothing measured: nothing said
    assert not said
