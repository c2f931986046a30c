"""Models past protobuf's 2 GB: their weights live in files beside the graph, and a proto that
holds them cannot be serialised, so it is checked, shape-inferred and given to onnxruntime
another way (ONNX's checker and onnxruntime read such a model from its file; shape inference
needs no weights)."""

from __future__ import annotations

from pathlib import Path

PROTOBUF_LIMIT = 2**31 - 1
"""bytes a serialised protobuf message may take"""

WEIGHT_BYTES_KEPT = 1 << 20
"""initializers up to this size keep their values in a shape probe: shape inference reads small
integer tensors (a Reshape's target shape, a Slice's bounds), never a layer's weights"""


def fits_protobuf(proto) -> bool:
    """Whether `proto` can be serialised (protobuf refuses even to size one past 2 GB)."""
    from google.protobuf.message import EncodeError

    try:
        return proto.ByteSize() <= PROTOBUF_LIMIT
    except EncodeError:
        return False


def shape_probe(proto):
    """A copy of `proto` for shape inference; past 2 GB without the values of its large
    initializers (their names, types and dims stay)."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    if not fits_protobuf(proto):
        for tensor in probe.graph.initializer:
            if len(tensor.raw_data) > WEIGHT_BYTES_KEPT:
                tensor.ClearField("raw_data")
    return probe


def onnxruntime_source(proto, scratch: Path) -> bytes | str:
    """What onnxruntime opens `proto` from: its bytes, or past 2 GB a copy saved in `scratch`
    with the weights in a file beside it."""
    import onnx

    if fits_protobuf(proto):
        return proto.SerializeToString()
    path = scratch / "model.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # saving moves the weights out of the proto it is given
    onnx.save(copy, str(path), save_as_external_data=True, location="model.onnx.data")
    return str(path)
