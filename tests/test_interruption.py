"""Ctrl-C and `kill -9` of a real tuning run: records kept, no orphan workers, resume finishes."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
from conftest import EXAMPLES, ROOT, trial_record_lines


def start_tuning(work_dir, trials: int) -> subprocess.Popen:
    """`python -m harl.tune` on the MLP in its own process group (as a terminal would run it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "harl.tune", str(EXAMPLES / "mlp.onnx"), "--trials", str(trials),
         "--trials-per-batch", "2", "--work-dir", str(work_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def record_lines(work_dir) -> list[str]:
    return trial_record_lines(work_dir)


def wait_for_records(proc, work_dir, count: int, timeout_s: float = 400) -> list[psutil.Process]:
    """Wait until the database holds `count` records; return the tuner's worker processes."""
    deadline = time.monotonic() + timeout_s
    while len(record_lines(work_dir)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no records in time"
        time.sleep(0.2)
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert workers, "the tuner should have builder/runner workers by now"
    return workers


def wait_for_workers(proc, count: int = 2, timeout_s: float = 400) -> list[psutil.Process]:
    """Wait until the tuner runs `count` worker processes (builders and runner); return them."""
    deadline = time.monotonic() + timeout_s
    while len(psutil.Process(proc.pid).children(recursive=True)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no workers in time"
        time.sleep(0.2)
    time.sleep(1)  # let them get busy
    return psutil.Process(proc.pid).children(recursive=True)


def all_gone(processes: list[psutil.Process], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in processes):
            return True
        time.sleep(0.1)
    return False


def test_ctrl_c_then_kill_9_then_the_same_command_finishes(tmp_path):
    """One work dir through a user's bad day; the budget (8) is a little over one round (6)."""
    # Ctrl-C once records exist: exit 130 within seconds, records kept, the resume command said.
    proc = start_tuning(tmp_path, trials=8)
    workers = wait_for_records(proc, tmp_path, 1)
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - start < 15
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    command = f"python -m harl.tune {EXAMPLES / 'mlp.onnx'} --trials 8"
    assert f"kept in {tmp_path}; resume with: {command}" in stderr
    assert all_gone(workers, within_s=5), [p.cmdline() for p in workers if p.is_running()]
    after_ctrl_c = record_lines(tmp_path)
    assert after_ctrl_c

    # kill -9 of the resumed run once its workers are busy: no worker outlives it.
    proc = start_tuning(tmp_path, trials=8)
    workers = wait_for_workers(proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert all_gone(workers, within_s=5), [p.cmdline() for p in workers if p.is_running()]
    before = record_lines(tmp_path)
    assert before[: len(after_ctrl_c)] == after_ctrl_c

    # The same command again finishes the budget, verified, with every earlier record kept.
    proc = start_tuning(tmp_path, trials=8)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert f"resuming: {len(before)} trials already in the database" in stdout
    assert "verified                 true" in stdout
    after = record_lines(tmp_path)
    assert after[: len(before)] == before and len(after) >= 8
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["trials_resumed"] == len(before) and report["trials_done"] == len(after)
    assert report["verified"] is True
