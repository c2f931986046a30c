"""Models past protobuf's 2 GB: their weights live in files beside the graph, and a proto that
holds them cannot be serialised, so it is checked, shape-inferred and given to onnxruntime
another way (ONNX's checker and onnxruntime read such a model from its file; shape inference
needs no weights)."""

from __future__ import annotations

from pathlib import Path

PROTOBUF_LIMIT = 2**31 - 1
"""bytes a serialised protobuf message may take"""

WEIGHT_BYTES_KEPT = 1 << 20
"""tensors up to this size keep their values in a shape probe: shape inference reads small
integer tensors (a Reshape's target shape, a Slice's bounds), never a layer's weights"""

EXTERNAL_MIN_BYTES = 1024
"""tensors from this size go to the weights' file when a model is saved beside one (ONNX's
default)"""

_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                "uint64_data", "string_data")


def serialised(proto) -> bytes | None:
    """`proto`'s bytes, or None past protobuf's 2 GB. Serialised once here for the caller to
    use: protobuf (upb) finds a message's size only by serialising it."""
    from google.protobuf.message import EncodeError

    if sum(len(tensor.raw_data) for tensor in proto.graph.initializer) > PROTOBUF_LIMIT:
        return None  # told without encoding it all
    try:
        data = proto.SerializeToString()
    except EncodeError:
        return None
    return data if len(data) <= PROTOBUF_LIMIT else None


def shape_probe(proto):
    """A copy of `proto` for shape inference; past 2 GB without the values of its large
    tensors (their names, types and dims stay)."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    if serialised(proto) is None:
        for tensor in graph_tensors(probe.graph):
            if tensor.ByteSize() > WEIGHT_BYTES_KEPT:
                for field in _DATA_FIELDS:
                    tensor.ClearField(field)
    return probe


def save_beside_weights(proto, path: Path) -> None:
    """Save `proto` at `path`, its tensors of EXTERNAL_MIN_BYTES or more in `path`.data, which
    is written afresh. `proto` loses those tensors' values."""
    import onnx
    from onnx.external_data_helper import set_external_data

    data = path.with_name(path.name + ".data")
    data.unlink(missing_ok=True)  # ONNX appends to a weights' file that exists
    # Marked here, not by onnx.save's own conversion, which refuses a file of that name in
    # the current directory, wherever the model goes.
    for tensor in graph_tensors(proto.graph):
        if len(tensor.raw_data) >= EXTERNAL_MIN_BYTES:
            set_external_data(tensor, data.name)
    onnx.save(proto, str(path))


def onnxruntime_source(proto, scratch: Path) -> bytes | str:
    """What onnxruntime opens `proto` from: its bytes, or past 2 GB `proto` saved in
    `scratch` beside its weights (and then without them)."""
    data = serialised(proto)
    if data is not None:
        return data
    path = scratch / "model.onnx"
    save_beside_weights(proto, path)
    return str(path)


def graph_tensors(graph):
    """The initializers and the attributes' tensors of `graph` and its subgraphs."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for subgraph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from graph_tensors(subgraph)
