"""tools/benchlib/openvino_runner.py: OpenVINO's fp32 CPU runtime as a timed reference beside
onnxruntime; the tests that run it skip themselves where openvino is not installed."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT

sys.path.insert(0, str(ROOT / "tools"))

from benchlib import openvino_runner  # noqa: E402
from benchlib.openvino_runner import (  # noqa: E402
    OPENVINO,
    OpenVinoModel,
    openvino_installed,
    openvino_wanted,
)
from benchlib.timing import ONNXRUNTIME, TimingSettings, checked_openvino  # noqa: E402

from harl.evaluate import OnnxRuntimeModel, check_outputs, interleaved_latencies_ms  # noqa: E402
from harl.frontend.onnx_model import load_onnx  # noqa: E402

needs_openvino = pytest.mark.skipif(not openvino_installed(),
                                    reason="openvino is not installed (pip install openvino)")

THREADS = 2


@needs_openvino
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_openvino_matches_onnxruntime_in_fp32_and_times_beside_it(name):
    model = load_onnx(EXAMPLES / f"{name}.onnx")
    inputs = model.random_inputs(0)
    reference = OnnxRuntimeModel(model, threads=THREADS)
    runner = OpenVinoModel(model, threads=THREADS)
    # fp32 whatever the CPU (bf16 on AMX otherwise), at the thread count asked, one stream
    assert str(runner.setting("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    assert int(runner.setting("INFERENCE_NUM_THREADS")) == THREADS
    assert str(runner.setting("PERFORMANCE_HINT")) == "LATENCY"
    expected = reference.run(inputs)
    outputs = runner.run(inputs)
    check = check_outputs(outputs, expected, list(model.output_names), rtol=1e-3, atol=1e-4)
    assert check.verified, check
    # copies: the next run does not overwrite what the last one returned
    kept = [output.copy() for output in outputs]
    again = runner.run({key: value * 2 for key, value in inputs.items()})
    assert all(np.array_equal(a, b) for a, b in zip(outputs, kept, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(again, kept, strict=True))
    samples = interleaved_latencies_ms({ONNXRUNTIME: reference, OPENVINO: runner}, inputs,
                                       rounds=1, repeats_per_round=1, settle_s=0.0)
    assert len(samples[OPENVINO]) == 1 and samples[OPENVINO][0] > 0


@needs_openvino
def test_openvino_is_left_out_where_its_outputs_differ_from_onnxruntimes():
    model = load_onnx(EXAMPLES / "mlp.onnx")
    inputs = model.random_inputs(0)
    expected = OnnxRuntimeModel(model, threads=THREADS).run(inputs)
    said = []
    runner = checked_openvino(model, inputs, expected, THREADS, TimingSettings(), said.append)
    assert runner is not None and said == []
    wrong = [value + 1.0 for value in expected]
    assert checked_openvino(model, inputs, wrong, THREADS, TimingSettings(), said.append) is None
    assert len(said) == 1 and "openvino's outputs differ from onnxruntime's" in said[0]


def test_a_missing_openvino_is_said_once_and_the_timing_goes_on(monkeypatch):
    monkeypatch.setattr(openvino_runner, "openvino_installed", lambda: False)
    said = []
    assert openvino_wanted(True, said.append) is False
    assert said == ["bench: openvino is not installed (pip install openvino): timing without it"]
    assert openvino_wanted(False, said.append) is False and len(said) == 1
