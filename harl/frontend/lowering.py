"""ONNX operators TVM's Relax importer lacks, rewritten into ones it has, before the import.

- RNN, GRU and LSTM are unrolled over their sequence, whose length the fixed input shapes give:
  the input projection of every step is one MatMul per gate, and each step one MatMul of the
  hidden state by all its gates' weights (`harl.frontend.recurrent`).
- ConvInteger becomes a Conv in int32 of its operands minus their zero points: exact, since
  the sums are integers.

The rewritten graph is what harl tunes and builds; verification still runs the original model
in onnxruntime, so a lowering that computed something else would fail the check.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harl.frontend.graph_writer import GraphWriter, node_attrs, node_input, tensor_shapes
from harl.frontend.recurrent import lower_recurrent

_ALL_OPS = ("RNN", "GRU", "LSTM", "ConvInteger")


def lowerable_ops(proto) -> list[str]:
    """Operator types of `proto`'s graph that TVM's importer lacks and harl rewrites."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    supported = _get_convert_map()
    present = {node.op_type for node in proto.graph.node if node.domain in ("", "ai.onnx")}
    return sorted(op for op in _ALL_OPS if op in present and op not in supported)


def lower_ops(proto, ops: list[str], input_shapes: dict[str, tuple[int, ...]], where: str):
    """A copy of `proto` with every node of the types `ops` rewritten; `input_shapes` fix the
    graph inputs' shapes, from which the recurrent layers' sequence lengths are inferred."""
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    shapes = tensor_shapes(model, input_shapes)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    graph = GraphWriter(model.graph, shapes, where, opset)
    nodes = []
    for node in model.graph.node:
        if node.op_type in ops and node.domain in ("", "ai.onnx"):
            graph.begin(node)
            _LOWERINGS[node.op_type](graph, node)
            nodes.extend(graph.take_nodes())
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(graph.initializers)
    return model


def _lower_conv_integer(graph: GraphWriter, node) -> None:
    """ConvInteger(x, w, x_zero, w_zero) = Conv(int32(x) - x_zero, int32(w) - w_zero)."""
    from onnx import TensorProto

    x, w = node_input(node, 0), node_input(node, 1)
    x_zero, w_zero = node_input(node, 2), node_input(node, 3)
    shifted = []
    for tensor, zero, per_channel in ((x, x_zero, False), (w, w_zero, True)):
        value = graph.op("Cast", [tensor], to=TensorProto.INT32)
        if zero:
            zero = graph.op("Cast", [zero], to=TensorProto.INT32)
            zero_rank = len(graph.dims(w_zero)) if w_zero in graph.shapes else None
            if per_channel and zero_rank is None:
                raise graph.unknown(f"the rank of its weight zero point {w_zero!r} is unknown")
            if per_channel and zero_rank == 1:  # one per output channel
                rank = len(graph.dims(w))
                if rank < 3:
                    raise graph.unknown(f"the rank of its weight {w!r} is unknown")
                zero = graph.op("Reshape", [zero, graph.const([-1] + [1] * (rank - 1),
                                                              np.int64, "shape")])
            value = graph.op("Sub", [value, zero])
        shifted.append(value)
    graph.op("Conv", shifted, output=node.output[0], **node_attrs(node))


_LOWERINGS: dict[str, Callable] = {"RNN": lower_recurrent, "GRU": lower_recurrent,
                                   "LSTM": lower_recurrent, "ConvInteger": _lower_conv_integer}
