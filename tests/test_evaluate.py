"""The output check against the reference."""

import numpy as np

from harl.evaluate import ONNXRUNTIME, UNTUNED_TVM, check_outputs, verify_tuned


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
    assert not check_outputs([np.zeros(2)], [np.zeros(3)], ["a"], rtol=1e-3, atol=1e-4).verified
    assert not check_outputs([np.array([np.nan])], [np.zeros(1)], ["a"], rtol=1e-3,
                             atol=1e-4).verified


def test_tuning_is_judged_against_untuned_tvm_only_where_tvm_itself_disagrees():
    ort = [np.array([0.2, 0.3, 0.5], "float32")]
    tvm_off = [np.array([0.2006, 0.2994, 0.5], "float32")]  # a rounding flip in TVM's compile
    # TVM agrees with onnxruntime: the tuned build is held to onnxruntime.
    verdict = verify_tuned(tvm_off, ort, ort, ["y"], rtol=1e-3, atol=1e-4)
    assert verdict.reference == ONNXRUNTIME and not verdict.check.verified
    # TVM's untuned build disagrees already, and the tuned one kept its outputs.
    verdict = verify_tuned(tvm_off, tvm_off, ort, ["y"], rtol=1e-3, atol=1e-4)
    assert verdict.reference == UNTUNED_TVM and verdict.check.verified
    assert np.isclose(verdict.untuned_vs_onnxruntime.max_abs_err, 6e-4, rtol=1e-2)
    # ... but a tuned build that also changed them fails.
    broken = [np.array([0.2006, 0.2994, 0.6], "float32")]
    verdict = verify_tuned(broken, tvm_off, ort, ["y"], rtol=1e-3, atol=1e-4)
    assert verdict.reference == UNTUNED_TVM and not verdict.check.verified
    # Agreeing with onnxruntime is enough, whatever the untuned build does.
    verdict = verify_tuned(ort, tvm_off, ort, ["y"], rtol=1e-3, atol=1e-4)
    assert verdict.reference == ONNXRUNTIME and verdict.check.verified
    # Elements the untuned build got right are still held to onnxruntime.
    drifted = [np.array([0.2006, 0.2994, 0.5009], "float32")]
    verdict = verify_tuned(drifted, tvm_off, ort, ["y"], rtol=1e-3, atol=1e-4)
    assert verdict.reference == UNTUNED_TVM and not verdict.check.verified


def test_outputs_of_the_wrong_shape_or_number_are_never_excused():
    ort = [np.array([0.2, 0.3], "float32")]
    wrong_shape = [np.array([[0.2, 0.3]], "float32")]
    verdict = verify_tuned(wrong_shape, wrong_shape, ort, ["y"], rtol=1e-3, atol=1e-4)
    assert verdict.reference == ONNXRUNTIME and not verdict.check.verified
    two = [np.array([0.2, 0.3], "float32")] * 2
    verdict = verify_tuned(two, two, ort, ["y"], rtol=1e-3, atol=1e-4)
    assert verdict.reference == ONNXRUNTIME and not verdict.check.verified
    nan = [np.array([np.nan, 0.3], "float32")]
    verdict = verify_tuned(nan, nan, ort, ["y"], rtol=1e-3, atol=1e-4)
    assert verdict.reference == ONNXRUNTIME and not verdict.check.verified


class SleepyRunner:
    def __init__(self, seconds):
        self.seconds, self.runs, self.timed_repeats = seconds, 0, []

    def run(self, inputs):
        import time
        time.sleep(self.seconds)
        self.runs += 1

    def median_latency_ms(self, inputs, repeats):
        self.timed_repeats.append(repeats)
        return self.seconds * 1e3


def test_a_slow_build_is_timed_less_and_one_too_slow_keeps_its_probe_run():
    from harl.evaluate import latencies_within_ms

    fast, slow, slower = SleepyRunner(0.0), SleepyRunner(0.05), SleepyRunner(0.3)
    samples = latencies_within_ms({"fast": fast, "slow": slow, "slower": slower}, {},
                                  rounds=4, max_repeats=5, seconds=1.0)
    assert fast.timed_repeats == [5] * 4  # capped
    assert slow.timed_repeats in ([1] * 4, [2] * 4)  # 1.0 s / (4 rounds x 2 runs x >= 50 ms)
    assert slower.timed_repeats == [] and slower.runs == 1  # over budget: its one run
    assert len(samples["slower"]) == 1 and samples["slower"][0] >= 300
    assert len(samples["fast"]) == len(samples["slow"]) == 4


def test_float16_outputs_get_float16_tolerances():
    from harl.config import VerifyConfig

    config = VerifyConfig()
    assert config.tolerances(["float32", "int64"]) == (1e-3, 1e-4)
    assert config.tolerances(["float32", np.float16]) == (1e-2, 1e-2)
    loose = VerifyConfig(rtol=0.1, atol=0.05)
    assert loose.tolerances(["float16"]) == (0.1, 0.05)


def test_each_turn_starts_after_the_other_runtimes_threads_settle():
    import time

    from harl.evaluate import interleaved_latencies_ms

    class ClockedRunner:
        def __init__(self, log, key):
            self.log, self.key = log, key

        def median_latency_ms(self, inputs, repeats):
            self.log.append((self.key, time.perf_counter()))
            return 1.0

    log = []
    runners = {key: ClockedRunner(log, key) for key in ("tuned", "onnxruntime")}
    interleaved_latencies_ms(runners, {}, rounds=2, repeats_per_round=1, settle_s=0.05)
    assert [key for key, _ in log] == ["tuned", "onnxruntime"] * 2
    gaps = [later - earlier for (_, earlier), (_, later) in zip(log[:-1], log[1:], strict=True)]
    assert min(gaps) >= 0.05
