"""Checks of an ONNX model before harl imports it: its opset, its external weights and its
declared output shapes, each failing as a one-line HarlError."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harl.errors import HarlError
from harl.frontend.large_models import graph_tensors


def check_opset(proto, path: Path) -> None:
    """Refuse an ONNX opset newer than the installed onnx package knows: its checker, shape
    inference and TVM's importer would read the graph by older rules."""
    import onnx

    known = onnx.defs.onnx_opset_version()
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > known:
            raise HarlError(f"{path} uses ONNX opset {opset.version}, newer than the {known} "
                            f"that onnx {onnx.__version__} here knows; export it with opset "
                            f"{known} or lower, or upgrade onnx")


def load_external_weights(proto, path: Path) -> None:
    """Read the weights that `proto` keeps in files beside `path` into it; a file missing,
    unreadable or shorter than its tensors need is a one-line HarlError."""
    import onnx
    from onnx import external_data_helper, helper

    external = [tensor for tensor in graph_tensors(proto.graph)
                if external_data_helper.uses_external_data(tensor)]
    if not external:
        return
    try:
        external_data_helper.load_external_data_for_model(proto, str(path.parent))
    except (onnx.checker.ValidationError, OSError, ValueError) as err:
        raise HarlError(f"{path}: its weights, kept in a file beside it, cannot be read: "
                        f"{first_line(err)}") from None
    for tensor in external:
        kind = onnx.TensorProto.DataType.Name(tensor.data_type)
        if kind in ("STRING", "UNDEFINED") or "4" in kind:  # 4-bit kinds: two to a byte
            continue
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
        expected = int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
        if len(tensor.raw_data) != expected:
            raise HarlError(f"{path}: its weights' file holds {len(tensor.raw_data)} bytes of "
                            f"tensor {tensor.name!r}, which needs {expected} (a file cut "
                            "short, or not this model's?)")


def check_declared_outputs(proto, path: Path) -> None:
    """Refuse a graph whose declared output shapes disagree with what ONNX's shape inference
    computes from its inputs (a hand-edited or mis-exported model): the tuned kernels would
    compute the inferred shapes, not the declared ones. Dims unknown on either side pass."""
    import onnx

    from harl.frontend.large_models import shape_probe

    def dims(value):
        shape = value.type.tensor_type.shape if value.type.HasField("tensor_type") else None
        if shape is None or not value.type.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in shape.dim]

    declared = {output.name: dims(output) for output in proto.graph.output}
    probe = shape_probe(proto)
    for output in probe.graph.output:
        if output.type.HasField("tensor_type"):
            output.type.tensor_type.ClearField("shape")
    try:
        inferred = {output.name: dims(output)
                    for output in onnx.shape_inference.infer_shapes(probe).graph.output}
    except Exception:  # noqa: BLE001  (inference failing is no fault of the declared shapes)
        return
    for name, want in declared.items():
        got = inferred.get(name)
        if want is None or got is None:
            continue
        if len(want) != len(got) or any(a is not None and b is not None and a != b
                                        for a, b in zip(want, got, strict=False)):
            shown = [d if d is not None else "?" for d in want]
            computed = [d if d is not None else "?" for d in got]
            raise HarlError(f"{path}: output {name!r} is declared with shape {shown}, but its "
                            f"graph computes {computed}; fix the model's declared output shape")


def first_line(err: BaseException) -> str:
    """The first line of an error's message (its type's name where it has none)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
