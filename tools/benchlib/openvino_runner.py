"""OpenVINO's CPU runtime in fp32, timed beside onnxruntime as a second reference (issue 58).

An optional package (`pip install openvino`): the benchmark tools time it when it is
importable and go on without it otherwise; harl itself never imports it.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

import numpy as np

from harl.evaluate import median_wall_ms
from harl.frontend.large_models import serialised

if TYPE_CHECKING:
    from harl.frontend.onnx_model import OnnxModel

OPENVINO = "openvino"

INSTALL_HINT = "pip install openvino"


def openvino_installed() -> bool:
    """Whether the openvino package can be imported here (found without importing it)."""
    return importlib.util.find_spec("openvino") is not None


def openvino_wanted(wanted: bool, say=print) -> bool:
    """Whether the tools should time OpenVINO: `wanted` (no `--no-openvino`) and installed.
    Says once when it is wanted but missing, so that a table without it is not a surprise."""
    if wanted and not openvino_installed():
        say(f"bench: openvino is not installed ({INSTALL_HINT}): timing without it")
        return False
    return wanted


def openvino_config(threads: int) -> dict[str, str]:
    """The CPU plugin's settings: fp32 (on CPUs with AMX OpenVINO would otherwise run in bf16,
    which neither TVM nor onnxruntime does), one latency-bound stream, and `threads` threads,
    TVM's count, so the comparison is at equal cores."""
    return {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": str(threads)}


class OpenVinoModel:
    """OpenVINO on the CPU, run as `harl.evaluate.OnnxRuntimeModel` is: outputs as numpy arrays
    in the ONNX graph's output order, and a wall-clock median latency."""

    def __init__(self, model: OnnxModel, threads: int) -> None:
        import openvino as ov

        core = ov.Core()
        source = serialised(model.proto)
        if source is None and (model.shapes_folded or model.ops_lowered):
            raise ValueError(f"{model.path}: a rewritten graph past 2 GB has no file to run")
        # As onnxruntime: the model as harl loaded it, else its file (weights' files beside it).
        network = core.read_model(source if source is not None else str(model.path))
        self.compiled = core.compile_model(network, "CPU", openvino_config(threads))
        self.outputs = [self.compiled.output(name) for name in model.output_names]
        self.request = self.compiled.create_infer_request()

    def setting(self, name: str):
        """A setting of the compiled model as OpenVINO applied it (e.g. INFERENCE_NUM_THREADS)."""
        return self.compiled.get_property(name)

    def run(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs copied out of the request's buffers (the next run overwrites them); the
        inputs are read in place, as onnxruntime reads contiguous numpy inputs."""
        result = self.request.infer(inputs, share_inputs=True, share_outputs=True)
        return [np.array(result[port]) for port in self.outputs]

    def median_latency_ms(self, inputs: dict[str, np.ndarray], repeats: int) -> float:
        return median_wall_ms(lambda: self.run(inputs), repeats)
