"""Runners that time built candidates: a local process, or the servers of a TVM RPC farm."""

from __future__ import annotations

from harl.config import MeasureConfig, RpcConfig


def evaluator_config(config: MeasureConfig):
    """TVM's EvaluatorConfig from harl's measurement settings."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

    return EvaluatorConfig(number=config.number, repeat=config.repeat,
                           min_repeat_ms=config.min_repeat_ms, enable_cpu_cache_flush=False)


def local_runner(config: MeasureConfig):
    """Time candidates one at a time in a long-lived local worker process."""
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    return LocalRunner(timeout_sec=config.run_timeout_s, evaluator_config=evaluator_config(config))


def make_runner(config: MeasureConfig, rpc: RpcConfig | None = None):
    """The local runner, or an RPC runner with one worker per server registered under the key."""
    if rpc is None:
        return local_runner(config)
    from harl.measure.rpc import FarmRunner, preflight

    return FarmRunner(rpc, evaluator_config(config), workers=preflight(rpc))
