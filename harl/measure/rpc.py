"""Timing candidates on a TVM RPC device farm: preflight checks and a guarded RPC runner.

The runner is MetaSchedule's RPCRunner measurement (`rpc_runner._worker_func`: request a session
from the tracker, upload, time, clean up), run on one worker per registered server, with two
guards TVM's runner lacks:
- every measurement has a deadline (the worker is killed after `session_timeout_s`), because a
  session request for a key with no free server waits forever;
- before each batch the tracker is asked whether any server is left under the key, so a farm
  that died ends the run with one clear error instead of failing every remaining candidate.
A server that dies mid-session costs only its in-flight candidate: TVM scores it as a failed
RunnerResult with the error message, and the next candidates go to the servers still registered.
"""

from __future__ import annotations

import logging
import math
import os

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerInput
from tvm.s_tir.meta_schedule.runner.config import EvaluatorConfig, RPCConfig
from tvm.s_tir.meta_schedule.runner.rpc_runner import RPCRunnerFuture
from tvm.support.popen_pool import PopenPoolExecutor

from harl.config import RpcConfig
from harl.errors import HarlError
from harl.farm.tracker import wait_for_servers
from harl.measure.arguments import remote_arguments
from harl.tvm_adapter import rpc_worker_func

logger = logging.getLogger(__name__)

#: The environment variables TVM's own tools read (tvm.s_tir.meta_schedule.runner.config).
ENV_HOST, ENV_PORT, ENV_KEY = "TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "TVM_TRACKER_KEY"


class FarmLostError(HarlError):
    """No server is left under the key (or the tracker stopped answering) during tuning."""


def rpc_config_from(tracker: str | None, key: str | None,
                    env: dict[str, str] | None = None) -> RpcConfig | None:
    """The RPC settings from --rpc-tracker HOST:PORT / --rpc-key, else TVM's environment variables.

    None (measure locally) when no key is given either way.
    """
    env = os.environ if env is None else env
    key = key or env.get(ENV_KEY)
    if not key:
        if tracker:
            raise HarlError(f"--rpc-tracker needs --rpc-key (or {ENV_KEY})")
        return None
    if tracker:
        host, sep, port_text = tracker.rpartition(":")
        if not sep or not host:
            raise HarlError(f"malformed --rpc-tracker {tracker!r}; expected HOST:PORT")
    else:
        host, port_text = env.get(ENV_HOST, ""), env.get(ENV_PORT, "")
        if not host or not port_text:
            raise HarlError(f"--rpc-key needs --rpc-tracker HOST:PORT (or {ENV_HOST} and "
                            f"{ENV_PORT})")
    try:
        port = int(port_text)
    except ValueError:
        raise HarlError(f"malformed RPC tracker port {port_text!r}; expected a number") from None
    return RpcConfig(tracker_host=host, tracker_port=port, key=key)


def preflight(rpc: RpcConfig) -> int:
    """Servers registered under the key; a one-line HarlError within seconds when there are none.

    Checked before tuning because TVM's RPC runner waits forever on a key nobody serves.
    """
    servers = wait_for_servers(rpc.tracker_host, rpc.tracker_port, rpc.key, want=1,
                               wait_s=rpc.register_wait_s, timeout_s=rpc.answer_timeout_s)
    if servers == 0:
        raise HarlError(f"no RPC server registered under key {rpc.key!r} at "
                        f"{rpc.tracker_host}:{rpc.tracker_port}")
    return servers


@derived_object
class FarmRunner(PyRunner):
    """Measures each batch on every server registered under the key, in parallel."""

    returns_pending_futures = True  # run() submits; measurement goes on in the pool

    def __init__(self, rpc: RpcConfig, evaluator_config: EvaluatorConfig, workers: int) -> None:
        super().__init__()
        self.rpc = rpc
        self.workers = workers
        self.evaluator_config = evaluator_config
        self.tvm_rpc_config = RPCConfig(
            tracker_host=rpc.tracker_host, tracker_port=rpc.tracker_port, tracker_key=rpc.key,
            session_timeout_sec=math.ceil(rpc.session_timeout_s))
        self.pool = PopenPoolExecutor(max_workers=workers, timeout=rpc.session_timeout_s)
        self.lost: FarmLostError | None = None
        self._submitted: list = []  # concurrent futures, cancelled at shutdown

    def run(self, runner_inputs: list[RunnerInput]) -> list[RunnerFuture]:
        self._check_farm()
        self._submitted = [future for future in self._submitted if not future.done()]
        futures = []
        for item in runner_inputs:
            future = self.pool.submit(
                rpc_worker_func(), None, None, remote_arguments, None, None,  # else TVM's steps
                self.tvm_rpc_config, self.evaluator_config, 1,
                str(item.artifact_path), str(item.device_type),
                tuple(arg.as_json() for arg in item.args_info))
            self._submitted.append(future)
            futures.append(RPCRunnerFuture(future=future, timeout_sec=self.rpc.session_timeout_s))
        return futures

    def _check_farm(self) -> None:
        where = f"{self.rpc.tracker_host}:{self.rpc.tracker_port}"
        try:
            servers = wait_for_servers(self.rpc.tracker_host, self.rpc.tracker_port,
                                       self.rpc.key, want=1, wait_s=self.rpc.lost_wait_s,
                                       timeout_s=self.rpc.answer_timeout_s)
        except HarlError as err:
            self.lost = FarmLostError(f"{err} during tuning")
            raise self.lost from None
        if servers == 0:
            self.lost = FarmLostError(f"no RPC server is left under key {self.rpc.key!r} "
                                      f"at {where}")
            raise self.lost
        if servers < self.workers:
            logger.warning("%d of %d RPC servers left under key %r", servers, self.workers,
                           self.rpc.key)

    def shutdown(self) -> None:
        """Drop queued measurements and stop the workers."""
        for future in self._submitted:
            future.cancel()  # else the pool restarts a killed worker for each queued one
        self.pool.shutdown(wait=False)
