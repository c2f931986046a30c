"""Popen workers busy with a candidate die with their parent when it is killed with -9."""

import os
import signal
import subprocess
import sys
import time

import psutil
from conftest import ROOT

# A parent that starts one pool worker, makes it busy for a minute, prints its pid, and waits.
PARENT = """
import sys, time
from tvm.support.popen_pool import PopenPoolExecutor
from harl.measure.worker_lifetime import worker_initializer
pool = PopenPoolExecutor(max_workers=1, initializer=worker_initializer() if {guard} else None)
pool.submit(time.sleep, 0.01).result()
pool.submit(time.sleep, 60)
time.sleep(1)
(worker,) = [w._proc.pid for w in pool._worker_map.values()]
print(worker, flush=True)
time.sleep(120)
"""


def busy_worker_after_parent_killed(guard: bool) -> psutil.Process:
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(guard=guard)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    worker = psutil.Process(int(parent.stdout.readline()))
    assert worker.ppid() == parent.pid
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    return worker


def gone(process: psutil.Process, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def test_guarded_worker_dies_with_its_parent():
    assert gone(busy_worker_after_parent_killed(guard=True), within_s=5)


def test_unguarded_worker_outlives_its_parent():
    """The control: without the guard TVM's worker keeps running its job as an orphan."""
    worker = busy_worker_after_parent_killed(guard=False)
    try:
        assert not gone(worker, within_s=2)
    finally:
        if worker.is_running():
            worker.kill()


def test_worker_of_a_dead_parent_exits_at_once():
    """The initializer exits when its parent is already gone (before prctl could take effect)."""
    code = ("from harl.measure.worker_lifetime import die_with_parent; import os; "
            "die_with_parent(os.getppid() + 1); print('still here')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "still here" not in proc.stdout
