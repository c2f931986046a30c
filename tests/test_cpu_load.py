import contextlib
import os
import subprocess
import sys
import time

import pytest

from harl.loop import _say_if_measured_beside_others
from harl.measure import cpu_load
from harl.measure.clock import StageClock
from harl.measure.cpu_load import CpuSnapshot, other_core_seconds, other_load_cores, snapshot
from harl.measure.runner import ClockedRunner
from harl.report.summary import RunReport, TaskSummary, format_summary

linux_only = pytest.mark.skipif(snapshot() is None, reason="no usable /proc counters here")

SPIN = "import time\nend = time.monotonic() + {}\nwhile time.monotonic() < end: pass"


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def load_over(seconds: float) -> float:
    before = snapshot()
    time.sleep(seconds)
    return other_load_cores(before, snapshot())


class AnotherProcessSpinning:
    """Not a descendant: started by a child that exits at once, so it belongs to someone else."""

    def __enter__(self):
        launcher = subprocess.run(
            [sys.executable, "-c", "import subprocess, sys; print(subprocess.Popen("
             f"[sys.executable, '-c', {SPIN.format(30)!r}], start_new_session=True, "
             "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"],
            check=True, capture_output=True, text=True)
        self.pid = int(launcher.stdout)
        time.sleep(0.5)  # past its start-up
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 9)
        time.sleep(0.2)


@linux_only
def test_another_process_spinning_counts_and_this_one_and_its_children_do_not():
    with AnotherProcessSpinning():
        beside_another = load_over(1.5)
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(30)])
    try:
        time.sleep(0.5)
        beside_a_child = load_over(1.5)
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


@linux_only
def test_a_child_that_exits_inside_the_window_is_counted_once_as_this_process_own():
    before = snapshot()
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(1.0)])
    time.sleep(0.5)
    middle = snapshot()  # while it runs: a living descendant
    child.wait()  # reaped: now in this process's children's times
    after = snapshot()
    assert after.own_s - before.own_s > 0.8  # its second of spinning, counted
    assert after.own_s - middle.own_s < 0.8  # and not its first half again


def test_a_missing_or_stalled_snapshot_says_nothing():
    a = CpuSnapshot(busy_s=10.0, own_s=1.0, wall_s=5.0, cores=2)
    assert other_load_cores(None, a) is None
    assert other_load_cores(a, a) is None
    # Own time above the counters' (their 10 ms ticks lag) is no one else's load, but the
    # signed seconds keep the tick so that sums over many windows cancel it out.
    assert other_load_cores(a, CpuSnapshot(10.5, 1.6, 6.0, 2)) == 0.0
    assert other_core_seconds(a, CpuSnapshot(10.5, 1.6, 6.0, 2)) == pytest.approx(-0.1)
    assert other_load_cores(a, CpuSnapshot(12.0, 1.5, 6.0, 2)) == pytest.approx(1.5)
    # One 10 ms tick over half a second is no load to speak of.
    assert other_load_cores(a, CpuSnapshot(10.01, 1.0, 5.5, 2)) is None


def test_a_tick_over_a_few_milliseconds_of_measuring_is_not_load():
    # A fake runner's instant batches: 5 ms watched, one tick of someone else's (it read as 2.1
    # cores and a test's loop said so).
    clock = StageClock(run_s=0.005, watched_run_s=0.005, others_core_s=0.01)
    assert clock.others_while_measuring() is None
    _say_if_measured_beside_others(StageClock(run_s=2.0, watched_run_s=2.0, others_core_s=1.8))


def fake_proc(tmp_path, children_list: bool = True):
    proc = tmp_path / "proc"
    (proc / str(os.getpid()) / "task" / str(os.getpid())).mkdir(parents=True)
    if children_list:
        (proc / str(os.getpid()) / "task" / str(os.getpid()) / "children").write_text("")
    (proc / "stat").write_text("cpu  900 0 900 0 0 0 0 0 0 0\n"
                               "cpu0 100 5 50 1000 7 1 2 3 0 0\n"
                               "cpu1 400 0 400 0 0 0 0 0 0 0\n"
                               "intr 123\n")
    return proc


def test_only_the_cpus_this_process_may_run_on_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_load.os, "sysconf", lambda name: 100)
    shot = snapshot(fake_proc(tmp_path), frozenset({0}), cgroup=tmp_path)
    assert shot.cores == 1
    assert shot.busy_s == pytest.approx((100 + 5 + 50 + 1 + 2 + 3) / 100)  # idle, iowait left out


def test_counters_that_would_mislead_give_no_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_load.os, "sysconf", lambda name: 100)
    two = frozenset({0, 1})
    proc = fake_proc(tmp_path)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert snapshot(proc, two, cgroup=tmp_path) is not None
    # A quota of half a core on two visible CPUs: the counters hold other tenants' load.
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert snapshot(proc, two, cgroup=tmp_path) is None
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    assert snapshot(proc, two, cgroup=tmp_path) is not None
    # Counters that do not parse, or no list of children to tell the workers by: nothing.
    (proc / "stat").write_text("cpu0 a b c\n")
    assert snapshot(proc, two, cgroup=tmp_path) is None
    assert snapshot(fake_proc(tmp_path / "other", children_list=False), two,
                    cgroup=tmp_path) is None


V1_HALF_CORE = {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"}
V1_NO_QUOTA = {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}


@pytest.mark.parametrize("cgroup_line, quota_folder, half_core, no_quota", [
    # v1, the container's cgroup mounted at the root (no namespace): /proc's path is not there
    ("4:cpu,cpuacct:/docker/abc", "cpu,cpuacct", V1_HALF_CORE, V1_NO_QUOTA),
    # v1, the path as /proc names it, the quota on the cgroup itself
    ("4:cpu,cpuacct:/docker/abc", "cpu,cpuacct/docker/abc", V1_HALF_CORE, V1_NO_QUOTA),
    # v1 mounted as "cpu" alone, the controllers' joint name not a folder
    ("4:cpu,cpuacct:/docker/abc", "cpu", V1_HALF_CORE, V1_NO_QUOTA),
    # v2, the quota on an ancestor of this process's cgroup
    ("0::/machine/job/step", "machine", {"cpu.max": "50000 100000"}, {"cpu.max": "max 100000"}),
])
def test_a_quota_is_found_in_either_cgroup_layout(tmp_path, monkeypatch, cgroup_line,
                                                  quota_folder, half_core, no_quota):
    monkeypatch.setattr(cpu_load.os, "sysconf", lambda name: 100)
    proc = fake_proc(tmp_path)
    (proc / "self").mkdir()
    (proc / "self" / "cgroup").write_text(f"7:memory:/docker/abc\nnot a cgroup line\n"
                                          f"{cgroup_line}\n")
    folder = tmp_path / "cgroup" / quota_folder
    folder.mkdir(parents=True)
    two = frozenset({0, 1})
    for files, usable in ((no_quota, True), (half_core, False), (no_quota, True)):
        for name, value in files.items():
            (folder / name).write_text(value + "\n")
        assert (snapshot(proc, two, cgroup=tmp_path / "cgroup") is not None) == usable


def test_the_summary_flags_timings_taken_beside_other_load():
    report = RunReport(model="m", target="llvm", strategy="harl", trials=4, trials_done=4,
                       seed=0, tune_seconds=1.0, tasks=[TaskSummary("t", 1, 1e6, 4, 0, 0.5)],
                       latency_ms={"untuned": 2.0, "tuned": 1.0, "onnxruntime": 1.5})
    report.timing_other_cores = 0.05
    assert "other load" not in format_summary(report)
    report.timing_other_cores = 0.9
    line = next(x for x in format_summary(report).splitlines() if x.startswith("other load"))
    assert "on average 0.90 cores were busy with other processes or the host while timing" in line


class SleepingRunner:
    def run(self, runner_inputs):
        time.sleep(0.6)
        return []


@linux_only
def test_candidates_measured_beside_another_process_are_flagged_after_tuning(caplog,
                                                                            harl_messages):
    quiet, watched, unwatched = StageClock(), StageClock(), StageClock()
    ClockedRunner(SleepingRunner(), unwatched).run([])  # a farm's runner: not watched
    with AnotherProcessSpinning():
        for _ in range(2):
            ClockedRunner(SleepingRunner(), watched, watch_load=True).run([])
    _say_if_measured_beside_others(watched)
    said = harl_messages()
    assert watched.watched_run_s == pytest.approx(watched.run_s) and watched.run_s >= 1.2
    assert watched.others_while_measuring() > 0.6
    assert said and "while candidates were measured" in said[0]
    assert unwatched.others_while_measuring() is None
    caplog.clear()
    _say_if_measured_beside_others(quiet)  # nothing measured: nothing said
    said = harl_messages()
    assert not said
