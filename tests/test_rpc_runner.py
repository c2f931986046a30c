"""The farm runner on real TVM RPC servers: parallel sessions, a server killed mid-measurement."""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import matmul_module
from farm_util import loopback_farm
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RunnerInput

from harl.config import RpcConfig
from harl.farm.tracker import count_servers, key_statuses, tracker_summary
from harl.measure.artifacts import remove_build_dir
from harl.measure.builder import PersistentBuilder
from harl.measure.rpc import FarmLostError, FarmRunner
from harl.target import parse_target


@pytest.fixture(scope="module")
def matmul_artifact():
    mod = matmul_module(64)
    builder = PersistentBuilder(max_workers=1, timeout_s=120)
    try:
        (result,) = builder.build([BuilderInput(mod, parse_target(None))])
    finally:
        builder.shutdown()
    assert result.error_msg is None
    yield result.artifact_path, ArgInfo.from_prim_func(mod["main"])
    remove_build_dir(result.artifact_path)


def wait_until_busy(port: int, key: str, busy: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while key_statuses(tracker_summary("127.0.0.1", port)).get(key).busy < busy:
        assert time.monotonic() < deadline, "the servers never got busy"
        time.sleep(0.05)


def test_a_dead_server_costs_only_its_candidate_and_a_dead_farm_stops(tmp_path, matmul_artifact):
    artifact, args_info = matmul_artifact
    # Each timing lasts at least 1.5 s, so a kill lands while the candidate is on the server.
    slow = EvaluatorConfig(number=1, repeat=1, min_repeat_ms=1500, enable_cpu_cache_flush=False)
    inputs = [RunnerInput(artifact, "cpu", args_info) for _ in range(4)]
    with loopback_farm(tmp_path, servers=2, key="test-cpu") as (port, records):
        servers = [r for r in records if r.role == "server"]
        # Both servers are killed below and none comes back: no need to wait 15 s for one.
        rpc = RpcConfig("127.0.0.1", port, "test-cpu", session_timeout_s=60, lost_wait_s=2)
        runner = FarmRunner(rpc, slow, workers=2)
        try:
            futures = runner.run(inputs)
            wait_until_busy(port, "test-cpu", busy=2)  # one session on each server at once
            # "busy" starts when the tracker hands a server out, before the session connects; a
            # kill in between only makes TVM's client retry on the other server. Half a second
            # in, both sessions are timing (1.5 s each).
            time.sleep(0.5)
            os.killpg(servers[0].pid, signal.SIGKILL)
            results = [future.result() for future in futures]
            failed = [r for r in results if r.error_msg]
            assert len(failed) == 1 and "RPCRunner" in failed[0].error_msg
            assert all(r.run_secs and float(r.run_secs[0]) > 0 for r in results if not r.error_msg)

            os.killpg(servers[1].pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while count_servers("127.0.0.1", port, "test-cpu") > 0:  # the tracker sees it go
                assert time.monotonic() < deadline
                time.sleep(0.1)
            # Raised through TVM's FFI it arrives as a RuntimeError; the loop re-raises runner.lost.
            with pytest.raises(RuntimeError, match="no RPC server is left under key 'test-cpu'"):
                runner.run(inputs)
            assert isinstance(runner.lost, FarmLostError)
        finally:
            runner.shutdown()
