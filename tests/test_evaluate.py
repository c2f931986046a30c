"""The output check against the reference."""

import numpy as np

from harl.evaluate import check_outputs


def test_outputs_within_tolerance_pass():
    ref = [np.array([1.0, -2.0, 100.0], dtype="float32")]
    got = [ref[0] + np.array([1e-5, -1e-5, 5e-2], dtype="float32")]
    check = check_outputs(got, ref, ["y"], rtol=1e-3, atol=1e-4)
    assert check.verified and check.worst_output == "y"
    assert np.isclose(check.max_abs_err, 5e-2, rtol=1e-3)


def test_worst_output_is_named_when_it_fails():
    ref = [np.zeros(3, "float32"), np.ones(2, "float32")]
    got = [np.zeros(3, "float32"), np.array([1.0, 1.5], "float32")]
    check = check_outputs(got, ref, ["a", "b"], rtol=1e-3, atol=1e-4)
    assert not check.verified and check.worst_output == "b" and check.max_abs_err == 0.5


def test_shape_mismatch_and_nan_fail():
    assert not check_outputs([np.zeros(2)], [np.zeros(3)], ["a"], 1e-3, 1e-4).verified
    assert not check_outputs([np.array([np.nan])], [np.zeros(1)], ["a"], 1e-3, 1e-4).verified


class SleepyRunner:
    def __init__(self, seconds):
        self.seconds, self.runs = seconds, 0

    def run(self, inputs):
        import time
        time.sleep(self.seconds)
        self.runs += 1


def test_a_slow_build_gets_fewer_timing_samples_than_a_fast_one():
    from harl.evaluate import repeats_within

    fast, slow = SleepyRunner(0.0), SleepyRunner(0.2)
    repeats = repeats_within({"fast": fast, "slow": slow}, {}, rounds=4, max_repeats=5,
                             seconds=2.0)
    assert repeats["fast"] == 5 and repeats["slow"] in (1, 2)  # 2.0 s / (4 x >= 0.2 s)
    assert fast.runs == slow.runs == 1
    assert repeats_within({"slow": slow}, {}, rounds=4, max_repeats=5, seconds=0.1) == {"slow": 1}
