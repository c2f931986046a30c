"""`python -m harl.tune --target cuda` on a visible GPU, and plain TVM reusing its log there."""

import json
import math

import pytest
from conftest import EXAMPLES, assert_plain_tvm_rebuilds, harl_tune, trial_record_lines

from harl.target import gpu_visible

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("mlp_cuda")
    proc = harl_tune(EXAMPLES / "mlp.onnx", "--target", "cuda", "--trials", 8,
                     "--trials-per-batch", 4, "--work-dir", work_dir)
    return proc, work_dir


def test_cuda_tune_verifies_the_model_it_tuned_on_the_gpu(cuda_run):
    proc, work_dir = cuda_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    assert report["gpu_target"] is True and json.loads(report["target"])["kind"] == "cuda"
    assert report["verified"] is True and report["max_abs_err"] <= 1e-3
    assert all(v > 0 for v in report["latency_ms"].values())
    assert report["trials_done"] >= 8
    assert len(trial_record_lines(work_dir)) == report["trials_done"]
    # On a GPU, TVM's DLight rules schedule what was not tuned: no picks.
    assert list(report["phase_seconds"]) == ["setup", "tuning", "store", "compile_verify",
                                             "timing"]
    # A failed candidate scores infinity; each task's best must be one that ran.
    assert all(0 < task["best_ms"] < math.inf for task in report["tasks"])


def test_plain_tvm_builds_and_runs_the_cuda_log_on_the_gpu(cuda_run):
    proc, work_dir = cuda_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_plain_tvm_rebuilds(EXAMPLES / "mlp.onnx", work_dir, applied="3/3")

