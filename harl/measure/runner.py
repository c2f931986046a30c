"""Runners that time built candidates: a local process, or the servers of a TVM RPC farm."""

from __future__ import annotations

import time

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner

from harl.config import MeasureConfig, RpcConfig
from harl.measure import cpu_load
from harl.measure.arguments import local_arguments
from harl.measure.clock import StageClock
from harl.measure.reference import steady_run_evaluator
from harl.measure.worker_lifetime import worker_initializer


def evaluator_config(config: MeasureConfig):
    """TVM's EvaluatorConfig from harl's measurement settings."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

    if config.flush_caches:
        return EvaluatorConfig(number=1, repeat=config.cold_repeats, min_repeat_ms=0,
                               enable_cpu_cache_flush=True)
    return EvaluatorConfig(number=config.number, repeat=config.repeat,
                           min_repeat_ms=config.min_repeat_ms, enable_cpu_cache_flush=False)


def local_runner(config: MeasureConfig):
    """Time candidates one at a time in a long-lived local worker process; with
    `reference_timing`, again while the machine runs slow (harl.measure.reference)."""
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    return LocalRunner(timeout_sec=config.run_timeout_s, evaluator_config=evaluator_config(config),
                       f_alloc_argument=local_arguments,
                       f_run_evaluator=steady_run_evaluator if config.reference_timing else None,
                       initializer=worker_initializer())


@derived_object
class ClockedRunner(PyRunner):
    """Adds the wall seconds of each `run` call to a StageClock.

    TVM 0.27's LocalRunner measures the whole batch inside `run` (its futures come back done), so
    this is the loop's full measuring time. The RPC farm's runner returns pending futures, so
    there only submission is counted (the rest shows as search time).
    """

    def __init__(self, inner, clock: StageClock, watch_load: bool = False) -> None:
        super().__init__()
        self.inner = inner
        self.clock = clock
        self.watch_load = watch_load  # measuring happens here: note others' CPU load meanwhile

    def run(self, runner_inputs):
        start = time.perf_counter()
        before = cpu_load.snapshot() if self.watch_load else None
        try:
            return self.inner.run(runner_inputs)
        finally:
            seconds = time.perf_counter() - start
            self.clock.run_s += seconds
            others = cpu_load.other_core_seconds(before,
                                                 cpu_load.snapshot() if before else None)
            if others is not None:
                self.clock.watched_run_s += seconds
                self.clock.others_core_s += others


def make_runner(config: MeasureConfig, rpc: RpcConfig | None = None):
    """The local runner, or an RPC runner with one worker per server registered under the key."""
    if rpc is None:
        return local_runner(config)
    from harl.measure.rpc import FarmRunner, preflight

    return FarmRunner(rpc, evaluator_config(config), workers=preflight(rpc))


def shutdown_runner(runner) -> None:
    """Stop a runner's workers now (TVM leaves a LocalRunner's to garbage collection)."""
    if hasattr(runner, "shutdown"):  # the farm runner
        runner.shutdown()
        return
    pool = getattr(runner, "pool", None)
    if pool is not None:
        pool.shutdown(wait=False)
