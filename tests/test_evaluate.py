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
