"""ONNX operators TVM's Relax importer lacks or imports poorly, rewritten before the import.

- RNN, GRU and LSTM are unrolled over their sequence, whose length the fixed input shapes give:
  the input projection of every step is one MatMul per gate, and each step one MatMul of the
  hidden state by all its gates' weights (`harl.frontend.recurrent`).
- ConvInteger becomes a Conv in int32 of its operands minus their zero points: exact, since
  the sums are integers.
- Sum and Mean of two or more inputs become pairwise Adds (Mean then divides by the count),
  Max and Min pairwise Wheres of a Greater or a Less. TVM's importer stacks the inputs into a
  new tensor and reduces over it: a task of its own that copies every input, where an Add or a
  Where fuses into the op before it (ResNet's residual adds are Sums in Caffe2's exports,
  tf2onnx writes TensorFlow's AddN as one, and a clamp by a tensor is a Max and a Min). TVM
  computes its own max as a select of the greater, so the Where is what it computed before.
- Pow of a float tensor by a constant 3 or 4 becomes Muls: TVM calls libm's `powf` for every
  element (LLVM turns only a square into a product), some 16x slower than the product on this
  CPU, and no schedule vectorises a call. GPT-2's tanh GELU cubes its input.
- BatchNormalization (inference) becomes x * s + t, with s = scale / sqrt(var + epsilon) and
  t = B - mean * s computed here, as onnxruntime folds it. TVM rewrites a batch norm into
  (x - mean) / sqrt(var + epsilon) * scale + B on the statistics: four ops per element, and
  the arithmetic on the constants is built and run with LLVM by every later FoldConstant
  (DenseNet-121, whose batch norms follow concats: 372 builds, 20 s). One right after a
  float32 Conv without bias is left to TVM, which folds it into the conv's weights.
- Sigmoid, Gelu, Mish (and Tanh of a Softplus, as torch exports Mish) and Softplus in float32
  become operators whose Exp, Erf or Tanh TVM's fast math takes, where TVM's own lowering
  calls libm for every element (`harl.frontend.activations`).

The rewritten graph is what harl tunes and builds; verification still runs the original model
in onnxruntime, so a lowering that computed something else would fail the check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from harl.frontend import activations
from harl.frontend.graph_writer import (
    KEPT,
    GraphWriter,
    graph_constants,
    node_attrs,
    node_input,
    tensor_readers,
    tensor_shapes,
)
from harl.frontend.recurrent import lower_recurrent
from harl.tvm_adapter import onnx_convert_map

_MISSING_OPS = ("RNN", "GRU", "LSTM", "ConvInteger")
"""operators harl rewrites where TVM's importer lacks them"""
_UNFUSED_OPS = {"Mean": 7, "Sum": 7, "Max": 9, "Min": 9}
"""operators TVM's importer builds as a stack of the inputs and a reduction (see above), and
the first opset that has their pairwise form (Add broadcasts from 7, onnxruntime runs no older
Add; Where is new in 9)"""
_POWERS_AS_MULS = (3, 4)
"""constant exponents a Pow is rewritten for (see above)"""
_FLOAT_TYPES = (1, 10, 11, 16)
"""ONNX element types FLOAT, FLOAT16, DOUBLE, BFLOAT16"""


def lowerable_ops(proto) -> list[str]:
    """Operator types of `proto`'s graph that harl may rewrite: those TVM's importer lacks,
    those it imports as a stack and a reduction, a Pow by a constant 3 or 4, activations whose
    libm calls TVM's fast math can take, and a BatchNormalization TVM may not fold into a
    conv."""
    supported = onnx_convert_map()
    nodes = [node for node in proto.graph.node if node.domain in ("", "ai.onnx")]
    present = {node.op_type for node in nodes}
    opset = onnx_opset(proto)
    ops = {op for op in present if (op in _MISSING_OPS and op not in supported)
           or (op in _UNFUSED_OPS and opset >= _UNFUSED_OPS[op])}
    constants = graph_constants(proto.graph)
    if any(_power(constants.get(node.input[1])) for node in nodes if node.op_type == "Pow"):
        ops.add("Pow")
    ops |= activations.fast_math_activations(nodes, tensor_readers(proto.graph), opset)
    producers = {name: node for node in nodes for name in node.output}
    if any(_maybe_unfolded(producers.get(node.input[0]), constants)
           for node in nodes if node.op_type == "BatchNormalization"):
        ops.add("BatchNormalization")
    return sorted(ops)


def onnx_opset(proto) -> int:
    """The version of the default ONNX domain `proto` imports."""
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


_REWRITE_LINES = {
    "Pow": "Pow by a constant 3 or 4 rewritten as Muls (TVM calls powf per element)",
    "Sigmoid": "Sigmoid written as 1 / (1 + Exp(-x)), whose Exp TVM's fast math takes",
    "Gelu": "Gelu written in Erf or Tanh, which TVM's fast math takes (its gelu calls erff per "
            "element)",
    "Mish": "Mish written as a ratio of Exps, which TVM's fast math takes (its softplus calls "
            "logf per element)",
    "Softplus": "Softplus written with Exps (under a Tanh, Mish's ratio; else a series for its "
                "log), which TVM's fast math takes (its softplus calls logf per element)",
    "BatchNormalization": "BatchNormalization TVM would not fold into a conv written as x * "
                          "scale + shift",
}
"""the run's line for each rewrite of one operator type, in the order it is said"""


def describe_lowered(ops) -> str:
    """What the rewrite of `ops` (from `lowerable_ops`) did, for the run's output."""
    missing = [op for op in ops if op in _MISSING_OPS]
    adds = [op for op in ops if op in ("Sum", "Mean")]
    wheres = [op for op in ops if op in ("Max", "Min")]
    parts = []
    if missing:
        parts.append(f"TVM's importer lacks {', '.join(missing)}: rewritten into operators "
                     "it has")
    for unfused, pairwise in ((adds, "Adds"), (wheres, "Wheres")):
        if unfused:
            parts.append(f"{' and '.join(unfused)} rewritten as pairwise {pairwise}, which fuse "
                         "into the op before them (TVM's importer stacks the inputs and reduces)")
    parts += [text for op, text in _REWRITE_LINES.items() if op in ops]
    return "; ".join(parts)


def lower_ops(proto, ops: list[str], input_shapes: dict[str, tuple[int, ...]], where: str
              ) -> tuple[object, list[str]]:
    """A copy of `proto` with the nodes of the types `ops` rewritten, and the types of those
    it rewrote (a lowering may keep a node whole: a Mean of unknown type); `input_shapes` fix
    the graph inputs' shapes, from which the recurrent layers' sequence lengths are inferred."""
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    shapes = tensor_shapes(model, input_shapes)
    graph = GraphWriter(model.graph, shapes, where, onnx_opset(model))
    nodes, rewritten = [], set()
    for node in model.graph.node:
        if node.op_type in ops and node.domain in ("", "ai.onnx"):
            graph.begin(node)
            kept = _LOWERINGS[node.op_type](graph, node) is KEPT
            replacement = graph.take_nodes()
            if not kept:
                nodes.extend(replacement)
                rewritten.add(node.op_type)
                continue
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(graph.initializers)
    return model, sorted(rewritten)


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


def _pairwise_adds(graph: GraphWriter, inputs: list[str], output: str | None = None) -> str:
    """Add(Add(x0, x1), ...) of `inputs`, the last Add into `output`; one input: an Identity.
    The Adds broadcast as Sum and Mean do (from opset 8; before, their inputs have one shape;
    see `lowerable_ops`)."""
    if len(inputs) == 1:
        return graph.op("Identity", inputs, output=output)
    total = inputs[0]
    for i, addend in enumerate(inputs[1:], start=2):
        total = graph.op("Add", [total, addend], output=output if i == len(inputs) else None)
    return total


def _lower_sum(graph: GraphWriter, node) -> None:
    """Sum(x0, x1, ...) = Add(Add(x0, x1), ...)."""
    _pairwise_adds(graph, list(node.input), node.output[0])


def _lower_mean(graph: GraphWriter, node) -> None:
    """Mean(x0, ..., xn-1) = Sum(x0, ..., xn-1) / n, in the inputs' type."""
    inputs = list(node.input)
    if len(inputs) == 1:
        _pairwise_adds(graph, inputs, node.output[0])
        return
    if not graph.elem_type(inputs[0]):  # type unknown: the Mean is kept whole
        return KEPT
    count = graph.constant_node(np.asarray(len(inputs), graph.np_type(inputs[0])), "count")
    graph.op("Div", [_pairwise_adds(graph, inputs), count], output=node.output[0])


def _pairwise_extreme(graph: GraphWriter, node, comparison: str) -> None:
    """Max(x0, x1, ...) = Where(Greater(m, x2), m, x2) with m = Where(Greater(x0, x1), x0, x1),
    and so on (Min: Less); one input: an Identity. The comparison and the Where broadcast as Max
    and Min do."""
    inputs = list(node.input)
    if len(inputs) == 1:
        graph.op("Identity", inputs, output=node.output[0])
        return
    best = inputs[0]
    for i, other in enumerate(inputs[1:], start=2):
        wins = graph.op(comparison, [best, other], "wins")
        best = graph.op("Where", [wins, best, other],
                        output=node.output[0] if i == len(inputs) else None)


def _power(exponent) -> int | None:
    """The exponent of `_POWERS_AS_MULS` a constant (a TensorProto, or None) holds, if any."""
    from onnx import numpy_helper

    if exponent is None:
        return None
    value = numpy_helper.to_array(exponent)
    if value.size != 1 or value.dtype.kind not in "iuf":
        return None
    power = value.item()
    return int(power) if power in _POWERS_AS_MULS else None


def _lower_pow(graph: GraphWriter, node):
    """Pow(x, 3) = (x * x) * x and Pow(x, 4) = (x * x) * (x * x), for a float x; any other
    Pow, or one whose exponent would broadcast x to a higher rank, is kept."""
    base, exponent = node.input[0], node.input[1]
    power = _power(graph.constants.get(exponent))
    rank = graph.constant_value(exponent).ndim if power else 0
    if (not power or graph.elem_type(base) not in _FLOAT_TYPES
            or (rank and len(graph.dims(base)) < rank)):
        return KEPT
    square = graph.op("Mul", [base, base], "square")
    graph.op("Mul", [square, base if power == 3 else square], output=node.output[0])
    return None


def _lower_batch_norm(graph: GraphWriter, node):
    """BatchNormalization(x, scale, B, mean, var) = x * s + t per channel (axis 1), s and t
    computed in float64 from the constant statistics; kept where TVM folds it into the conv
    before it, in training mode, where a statistic is not a constant vector, or where shape
    inference could not tell x's rank or type."""
    x = node.input[0]
    attrs = node_attrs(node)
    stats = [graph.constant_value(name) for name in node.input[1:5]]
    rank = len(graph.dims(x))
    if (attrs.get("training_mode", 0) or any(node.output[1:]) or rank < 2
            or not graph.elem_type(x) or any(value is None or value.ndim != 1 for value in stats)
            or _folded_into_conv(graph, x)):
        return KEPT
    scale, bias, mean, var = (value.astype(np.float64) for value in stats)
    factor = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
    shift = bias - mean * factor
    dtype = graph.np_type(x)
    per_channel = [1, -1] + [1] * (rank - 2)
    factor = graph.constant_node(factor.reshape(per_channel).astype(dtype), "factor")
    shift = graph.constant_node(shift.reshape(per_channel).astype(dtype), "shift")
    graph.op("Add", [graph.op("Mul", [x, factor]), shift], output=node.output[0])
    return None


def _folded_into_conv(graph: GraphWriter, x: str) -> bool:
    """Whether TVM folds a batch norm of `x` into the conv that computes it: a 2-D float32
    Conv without bias whose output nothing else reads."""
    from onnx import TensorProto

    return (_conv_without_bias(graph.producers.get(x)) and len(graph.dims(x)) == 4
            and graph.elem_type(x) == TensorProto.FLOAT and len(graph.readers.get(x, ())) == 1)


def _maybe_unfolded(producer, constants: dict) -> bool:
    """Whether a batch norm of `producer`'s output may be one TVM does not fold into a conv:
    `producer` is no Conv without bias, or its weight is a constant other than float32 (the
    lowering checks the rest: `_folded_into_conv`)."""
    from onnx import TensorProto

    if not _conv_without_bias(producer):
        return True
    weight = constants.get(producer.input[1])
    return weight is not None and weight.data_type != TensorProto.FLOAT


def _conv_without_bias(node) -> bool:
    return (node is not None and node.op_type == "Conv" and node.domain in ("", "ai.onnx")
            and len([name for name in node.input if name]) == 2)


_LOWERINGS: dict[str, Callable] = {
    "RNN": lower_recurrent, "GRU": lower_recurrent, "LSTM": lower_recurrent,
    "ConvInteger": _lower_conv_integer, "Sum": _lower_sum, "Mean": _lower_mean,
    "Max": functools.partial(_pairwise_extreme, comparison="Greater"),
    "Min": functools.partial(_pairwise_extreme, comparison="Less"),
    "Pow": _lower_pow, "BatchNormalization": _lower_batch_norm,
    "Sigmoid": activations.lower_sigmoid, "Gelu": activations.lower_gelu,
    "Mish": activations.lower_mish, "Softplus": activations.lower_softplus,
    "Tanh": activations.lower_tanh}
