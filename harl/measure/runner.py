"""Runners that time built candidates."""

from __future__ import annotations

from harl.config import MeasureConfig
from harl.measure.worker_lifetime import worker_initializer


def evaluator_config(config: MeasureConfig):
    """TVM's EvaluatorConfig from harl's measurement settings."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

    return EvaluatorConfig(number=config.number, repeat=config.repeat,
                           min_repeat_ms=config.min_repeat_ms, enable_cpu_cache_flush=False)


def local_runner(config: MeasureConfig):
    """Time candidates one at a time in a long-lived local worker process."""
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    return LocalRunner(timeout_sec=config.run_timeout_s, evaluator_config=evaluator_config(config),
                       initializer=worker_initializer())


def shutdown_runner(runner) -> None:
    """Stop a LocalRunner's worker process now (TVM leaves it to garbage collection)."""
    pool = getattr(runner, "pool", None)
    if pool is not None:
        pool.shutdown(wait=False)
