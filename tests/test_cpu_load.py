import subprocess
import sys
import time

import pytest

from harl.measure import cpu_load
from harl.measure.cpu_load import CpuSnapshot, other_load_cores, snapshot
from harl.report.summary import RunReport, TaskSummary, format_summary

linux_only = pytest.mark.skipif(snapshot() is None, reason="no /proc/stat here")


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@linux_only
def test_another_process_spinning_counts_and_this_one_does_not():
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 3\n"
                             "while time.monotonic() < end: pass"])
    try:
        time.sleep(0.5)  # past the child's start-up
        before = snapshot()
        time.sleep(1.5)
        beside_it = other_load_cores(before, snapshot())
    finally:
        busy.kill()
        busy.wait()
    before = snapshot()
    spin(1.5)
    own = other_load_cores(before, snapshot())
    # The child took about one core; this process's own spin is subtracted (what the rest of
    # the machine did meanwhile stays, so only a margin is asserted).
    assert beside_it > 0.6
    assert own < beside_it - 0.4


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
