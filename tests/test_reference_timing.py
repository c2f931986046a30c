"""Local CPU candidates timed again while a reference kernel says the machine runs slow."""

import pytest
import tvm
from tvm.s_tir.meta_schedule.runner import utils as runner_utils

from harl.cli import build_parser, config_from_args
from harl.config import MeasureConfig
from harl.measure import reference
from harl.measure.runner import local_runner, shutdown_runner


def test_a_slow_phase_is_a_reference_timing_well_above_the_recent_lower_quartile():
    phases = reference.SlowPhases()
    assert not phases.slow(1.0, 1.02)
    assert not any(phases.slow(1.0 + i / 100, 1.0) for i in range(6))
    assert phases.slow(1.0, 1.3) and phases.slow(1.5, 1.0)
    assert not phases.slow(1.1, 1.1)  # within SLOW_FACTOR
    for _ in range(reference.RECENT_TIMINGS):  # a slower machine for good: the floor follows
        phases.slow(2.0, 2.0)
    assert not phases.slow(2.0, 2.1)


class _Gpu:
    def dlpack_device_type(self) -> int:
        return 2  # kDLCUDA


@pytest.fixture
def candidate(monkeypatch):
    """TVM's timings of the candidate: each attempt's own; a fresh record of phases."""
    attempts = []

    def timed(*_args):
        attempts.append(len(attempts))
        return [float(len(attempts))]
    monkeypatch.setattr(runner_utils, "run_evaluator_common", timed)
    monkeypatch.setattr(reference, "_PHASES", reference.SlowPhases())
    return attempts


def test_a_candidate_timed_in_a_slow_phase_is_timed_again(monkeypatch, candidate):
    around = iter([1.0, 1.0, 1.0, 1.6, 1.0, 1.0])  # steady; slow after the next; steady again
    monkeypatch.setattr(reference, "reference_seconds", lambda: next(around))
    assert reference.steady_run_evaluator(None, tvm.cpu(0), None, []) == [1.0]
    assert reference.steady_run_evaluator(None, tvm.cpu(0), None, []) == [3.0]  # the last kept
    assert len(candidate) == 3


def test_attempts_stop_at_the_limit_and_a_gpu_is_timed_once(monkeypatch, candidate):
    for _ in range(reference.RECENT_TIMINGS // 2):  # a fast machine's record: the floor is 1
        reference._PHASES.slow(1.0, 1.0)
    monkeypatch.setattr(reference, "reference_seconds", lambda: 3.0)  # slow from now on
    assert reference.steady_run_evaluator(None, tvm.cpu(0), None, []) == [
        float(reference.MAX_ATTEMPTS)]
    assert reference.steady_run_evaluator(None, _Gpu(), None, []) == [
        float(1 + reference.MAX_ATTEMPTS)]


def test_a_long_timing_is_not_taken_again(monkeypatch, candidate):
    for _ in range(reference.RECENT_TIMINGS // 2):
        reference._PHASES.slow(1.0, 1.0)
    monkeypatch.setattr(reference, "reference_seconds", lambda: 3.0)
    monkeypatch.setattr(reference, "LONG_TIMING_S", 0.0)  # every timing counts as long
    assert reference.steady_run_evaluator(None, tvm.cpu(0), None, []) == [1.0]


def test_the_reference_kernel_runs_here():
    timings = [reference.reference_seconds() for _ in range(3)]
    assert all(0 < t < 1 for t in timings)


def test_the_local_runner_times_with_the_reference_unless_told_not_to():
    on, off = local_runner(MeasureConfig()), local_runner(MeasureConfig(reference_timing=False))
    try:
        assert on.f_run_evaluator is reference.steady_run_evaluator
        assert off.f_run_evaluator is None  # TVM's
    finally:
        shutdown_runner(on)
        shutdown_runner(off)


def test_the_flag_turns_it_off():
    assert config_from_args(build_parser().parse_args(["m.onnx"])).measure.reference_timing
    args = build_parser().parse_args(["m.onnx", "--no-reference-timing"])
    assert not config_from_args(args).measure.reference_timing
