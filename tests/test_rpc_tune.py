"""`python -m harl.tune --rpc-tracker/--rpc-key` on a loopback farm of real TVM RPC servers."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, harl_tune_here, trial_record_lines
from farm_util import loopback_farm

from harl.config import RpcConfig
from harl.errors import HarlError
from harl.farm.farm import free_port
from harl.measure.rpc import rpc_config_from


def history_rows(work_dir: Path) -> list[dict]:
    """history.csv's trial rows (not the unscheduled nests' rows, measured before tuning)."""
    path = work_dir / "history.csv"
    rows = list(csv.DictReader(path.open())) if path.exists() else []
    return [row for row in rows if row["trial"]]


def kill_group(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)  # the server, its popen worker and any session process


def farm_logs(records) -> str:
    """The tail of every farm process's log, for a failure's message."""
    return "".join(f"\n--- {r.role} {r.pid} ---\n{Path(r.log).read_text()[-1500:]}"
                   for r in records)


def start_tune(work_dir: Path, port: int, key: str, trials: int) -> subprocess.Popen:
    """harl on the farm, its [rpc] from a config file: a measurement past 20 s fails (60 by
    default), so a candidate in flight on a server that dies costs the test 20 s, not 60."""
    config = work_dir.parent / "rpc.toml"
    config.write_text(f'[rpc]\ntracker_host = "127.0.0.1"\ntracker_port = {port}\n'
                      f'key = "{key}"\nsession_timeout_s = 20.0\n')
    return subprocess.Popen(
        [sys.executable, "-m", "harl.tune", str(EXAMPLES / "mlp.onnx"), "--trials", str(trials),
         "--trials-per-batch", "2", "--work-dir", str(work_dir), "--config", str(config)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_rows(work_dir: Path, proc: subprocess.Popen, n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while len(history_rows(work_dir)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no trial measured in time"
        time.sleep(0.2)


def test_flags_fall_back_to_tvm_environment_variables():
    env = {"TVM_TRACKER_HOST": "10.0.0.5", "TVM_TRACKER_PORT": "9191", "TVM_TRACKER_KEY": "gpu"}
    assert rpc_config_from(None, None, env) == RpcConfig("10.0.0.5", 9191, "gpu")
    assert rpc_config_from("127.0.0.1:9000", "cpu", env) == RpcConfig("127.0.0.1", 9000, "cpu")
    assert rpc_config_from(None, None, {}) is None
    with pytest.raises(HarlError, match="needs --rpc-tracker"):
        rpc_config_from(None, "cpu", {})
    with pytest.raises(HarlError, match="needs --rpc-key"):
        rpc_config_from("127.0.0.1:9000", None, {})
    with pytest.raises(HarlError, match="malformed --rpc-tracker"):
        rpc_config_from("localhost", "cpu", {})


def test_tunes_through_two_servers_overlapping_batches_and_survives_losing_one(tmp_path):
    with loopback_farm(tmp_path / "farm", servers=2, key="test-cpu") as (port, records):
        servers = [r for r in records if r.role == "server"]
        work_dir = tmp_path / "run"
        # 10 trials, killed after 2: enough left that a loaded machine cannot finish them all
        # between the wait and the kill (with 6 it once did, and nothing was left to check).
        proc = start_tune(work_dir, port, "test-cpu", trials=10)
        try:
            wait_for_rows(work_dir, proc, 2)
            # Both servers measured the first batch, in parallel (one runner worker each).
            for server in servers:
                assert "load_module" in Path(server.log).read_text(), server.log
            rows_before_kill = len(history_rows(work_dir))
            kill_group(servers[0].pid)
            out, err = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err[-3000:] + farm_logs(records)
        assert "verified                 true" in out
        report = json.loads((work_dir / "report.json").read_text())
        assert report["verified"] is True and report["trials_done"] >= 10
        after = history_rows(work_dir)[rows_before_kill:]
        failed = [row for row in after if not row["latency_ms"]]
        # At most the candidates in flight on the dead server are lost; they keep their error.
        assert len(failed) <= 2 and all(row["error"] for row in failed)
        assert len(after) - len(failed) >= 2  # measured on the server left
        # every batch, in flight or not, was joined: recorded in history.csv and the database
        assert len(trial_record_lines(work_dir)) == report["trials_done"]
        lines = [json.loads(line) for line in (work_dir / "metrics.jsonl").open()]
        overlapped = [line["alloc/overlapped_batches"] for line in lines
                      if "alloc/overlapped_batches" in line]
        # one record per measured batch; harl chose and built batches while another task's
        # batch was still on the farm (the first batch cannot be, nor, with 3 tasks, need every
        # later one be)
        batches = {row["batch"] for row in history_rows(work_dir) if row["batch"]}
        assert len(overlapped) == len(batches) and overlapped[-1] >= 2, (overlapped, batches)


def test_unknown_key_fails_fast_in_one_line(tmp_path):
    from tvm.rpc.tracker import Tracker

    port = free_port()
    tracker = Tracker(host="127.0.0.1", port=port, port_end=port + 1, silent=True)
    try:
        start = time.monotonic()
        proc = harl_tune_here(EXAMPLES / "mlp.onnx", "--work-dir", tmp_path, "--rpc-tracker",
                              f"127.0.0.1:{port}", "--rpc-key", "nobody")
        elapsed = time.monotonic() - start
    finally:
        tracker.terminate()
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"harl: error: no RPC server registered under key 'nobody' at 127.0.0.1:{port}"]
    assert elapsed < 30  # ONNX load + 3 s of polling; TVM alone waits forever


def test_tracker_that_does_not_answer_fails_fast(tmp_path):
    # A socket that accepts connections but never replies, and a port nobody listens on.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        for port in (silent.getsockname()[1], free_port()):
            start = time.monotonic()
            proc = harl_tune_here(EXAMPLES / "mlp.onnx", "--work-dir", tmp_path,
                                  "--rpc-tracker", f"127.0.0.1:{port}", "--rpc-key", "x")
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1, proc.stderr
            assert lines[0].startswith(f"harl: error: RPC tracker 127.0.0.1:{port} does not answer")
            assert time.monotonic() - start < 30


@pytest.mark.slow
def test_losing_the_whole_farm_ends_the_run_and_keeps_records(tmp_path):
    with loopback_farm(tmp_path / "farm", servers=1, key="test-cpu") as (port, records):
        work_dir = tmp_path / "run"
        proc = start_tune(work_dir, port, "test-cpu", trials=64)
        try:
            wait_for_rows(work_dir, proc, 2)
            kill_group(next(r for r in records if r.role == "server").pid)
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        f"harl: error: no RPC server is left under key 'test-cpu' at 127.0.0.1:{port}"]
    kept = (work_dir / "database_tuning_record.json").read_text().splitlines()
    # every trial measured, and each small task's unscheduled nest (measured before tuning, the
    # task's first best on a fresh run, so stored too)
    with (work_dir / "history.csv").open() as history:
        nests = [row for row in csv.DictReader(history) if not row["trial"]]
    assert len(kept) >= 2 and len(kept) == len(history_rows(work_dir)) + len(nests)
