"""Every bundled example tunes at the README's budget, verifies, and is reused by plain TVM.

Slow (several minutes per model on 2 cores): `python -m pytest -q -m slow`.
"""

import json
import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT, assert_plain_tvm_rebuilds


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer_block"])
def test_example_tunes_verifies_and_reloads(model, tmp_path):
    onnx_path = EXAMPLES / f"{model}.onnx"
    proc = subprocess.run([sys.executable, "-m", "harl.tune", str(onnx_path), "--trials", "64",
                           "--work-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verified"] is True
    assert report["latency_ms"]["tuned"] < report["latency_ms"]["untuned"]
    assert_plain_tvm_rebuilds(onnx_path, tmp_path, timeout=600)
