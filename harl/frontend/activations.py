"""Activations rewritten into operators whose transcendental parts TVM's fast math takes.

On CPU targets harl's import runs TVM's FastMathTransform (`onnx_model.for_inference`): Exp,
Erf and Tanh in float32 become polynomials that vectorise. Activations TVM imports as ops of
their own, or that need a log, keep a libm call per element, which no schedule vectorises:

- Sigmoid (float32) becomes 1 / (1 + Exp(-x)), which is what TVM computes for it, calling
  `expf` (SiLU, x * sigmoid(x), is EfficientNet's activation; LSTM and GRU gates are sigmoids).
- Gelu (opset 20, which torch 2.13's exporter writes by default) becomes TVM's own formula
  in Erf, x * (0.5 + Erf(x / sqrt(2)) * 0.5), or in Tanh for `approximate="tanh"`:
  TVM's gelu calls `erff` per element (a 1x32x112x112 tensor: 4.2 ms, onnxruntime 0.17).
- Mish, and Tanh(Softplus(x)) as torch exports it, become x * n / (n + 2) with n = e * (e + 2),
  e = Exp(x): tanh(log(1 + e)) is that ratio, so the Softplus's `logf` per element goes.
  Exp's argument is capped at 20, where the ratio is 1 in float32 (above 44 n overflows).
- Any other Softplus (float32) becomes max(x, 0) + log(1 + u), u = Exp(-|x|), TVM's own
  form, with the log as 2 atanh(s) = 2 s (1 + s^2 / 3 + ... + s^10 / 11), s = u / (2 + u) in
  [0, 1/3]: within 3.1e-7 of float64's softplus, relative, over [-80, 100] (TVM's log(1 + u)
  loses all relative precision below x = -17, where 1 + u rounds to 1).

The rewritten graph is checked against the original in onnxruntime like every lowering.
"""

from __future__ import annotations

import math

import numpy as np

from harl.frontend.graph_writer import KEPT, GraphWriter, node_attrs

_MISH_EXP_CAP = 20.0
"""Exp's argument cap in the Mish ratio: 1 - 2 / (n + 2) rounds to 1 in float32 from x = 9"""
_ATANH_TERMS = 6
"""terms of the atanh series in a Softplus's log: the seventh is 1.4e-7 of the sum at most"""
_BROADCASTING_ADD = 7
"""the first opset whose Add and Div broadcast a scalar without an attribute"""


def fast_math_activations(nodes, readers: dict, opset: int) -> set[str]:
    """The activation types among `nodes` this module may rewrite (`readers`: see
    `graph_writer.tensor_readers`); each lowering checks its node's element type."""
    ops = set()
    for node in nodes:
        if node.op_type in ("Sigmoid", "Gelu", "Mish", "Softplus"):
            ops.add(node.op_type)
        if node.op_type == "Softplus" and _under_tanh(node, readers, opset):
            ops.add("Tanh")
    return ops


def lower_sigmoid(graph: GraphWriter, node):
    """Sigmoid(x) = 1 / (1 + Exp(-x)) for a float32 x (TVM's fast exp is float32's only)."""
    if not _is_float32(graph, node.input[0]) or graph.opset < _BROADCASTING_ADD:
        return KEPT
    graph.sigmoid_by_exp(node.input[0], output=node.output[0])
    return None


def lower_gelu(graph: GraphWriter, node):
    """Gelu(x) in Erf (or Tanh) as TVM legalises it, for a float32 x."""
    x = node.input[0]
    if not _is_float32(graph, x):
        return KEPT
    half = graph.constant_node(np.float32(0.5), "half")
    if node_attrs(node).get("approximate", b"none") == b"tanh":  # onnx gives strings as bytes
        one = graph.constant_node(np.float32(1.0), "one")
        cubic = graph.constant_node(np.float32(0.044715), "cubic")
        slope = graph.constant_node(np.float32(math.sqrt(2.0 / math.pi)), "slope")
        inner = graph.op("Add", [one, graph.op("Mul", [graph.op("Mul", [cubic, x]), x])])
        tanh = graph.op("Tanh", [graph.op("Mul", [graph.op("Mul", [slope, x]), inner])])
        graph.op("Mul", [graph.op("Mul", [half, x]), graph.op("Add", [one, tanh])],
                 output=node.output[0])
        return None
    scale = graph.constant_node(np.float32(0.5**0.5), "rsqrt2")
    erf = graph.op("Erf", [graph.op("Mul", [x, scale])])
    graph.op("Mul", [x, graph.op("Add", [half, graph.op("Mul", [erf, half])])],
             output=node.output[0])
    return None


def lower_mish(graph: GraphWriter, node):
    """Mish(x) = x * tanh(softplus(x)), the tanh written as a ratio of exps (see above)."""
    x = node.input[0]
    if not _is_float32(graph, x) or graph.opset < 9:  # Where is new in opset 9
        return KEPT
    graph.op("Mul", [x, _tanh_of_softplus(graph, x)], output=node.output[0])
    return None


def lower_softplus(graph: GraphWriter, node):
    """A float32 Softplus read only by a Tanh goes: the Tanh's rewrite computes both; any other
    becomes max(x, 0) + 2 atanh(u / (2 + u)), u = Exp(-|x|) (see above)."""
    x = node.input[0]
    if _goes_into_its_tanh(graph, node):
        return None
    if not _is_float32(graph, x) or graph.opset < _BROADCASTING_ADD:
        return KEPT
    two = graph.constant_node(np.float32(2.0), "two")
    u = graph.op("Exp", [graph.op("Neg", [graph.op("Abs", [x])])])
    s = graph.op("Div", [u, graph.op("Add", [u, two])], "s")
    s2 = graph.op("Mul", [s, s], "s2")
    series = graph.constant_node(np.float32(2.0 / (2 * _ATANH_TERMS - 1)), "term")
    for k in reversed(range(_ATANH_TERMS - 1)):  # Horner's rule from the last term
        term = graph.constant_node(np.float32(2.0 / (2 * k + 1)), "term")
        series = graph.op("Add", [graph.op("Mul", [series, s2]), term])
    graph.op("Add", [graph.op("Relu", [x]), graph.op("Mul", [s, series])],
             output=node.output[0])
    return None


def lower_tanh(graph: GraphWriter, node):
    """Tanh(Softplus(x)) = n / (n + 2), n = e * (e + 2), e = Exp(x) (`lower_softplus` dropped
    the Softplus); any other Tanh is kept (TVM's fast math takes it)."""
    softplus = graph.producers.get(node.input[0])
    if (softplus is None or softplus.op_type != "Softplus"
            or not _goes_into_its_tanh(graph, softplus)):
        return KEPT
    _tanh_of_softplus(graph, softplus.input[0], output=node.output[0])
    return None


def _tanh_of_softplus(graph: GraphWriter, x: str, output: str | None = None) -> str:
    cap = graph.constant_node(np.float32(_MISH_EXP_CAP), "cap")
    two = graph.constant_node(np.float32(2.0), "two")
    capped = graph.op("Where", [graph.op("Greater", [x, cap]), cap, x], "capped")
    exp = graph.op("Exp", [capped])
    n = graph.op("Mul", [exp, graph.op("Add", [exp, two])], "n")
    return graph.op("Div", [n, graph.op("Add", [n, two])], output=output)


def _goes_into_its_tanh(graph: GraphWriter, softplus) -> bool:
    """Whether `softplus` is dropped and its Tanh computes both: the one test both lowerings
    ask, so that neither acts without the other."""
    return (_is_float32(graph, softplus.input[0])
            and _under_tanh(softplus, graph.readers, graph.opset))


def _under_tanh(softplus, readers: dict, opset: int) -> bool:
    """Whether `softplus`'s output is read by one Tanh and nothing else (a graph output is a
    reader of no node), in an opset with Where."""
    reading = readers.get(softplus.output[0], [])
    return (opset >= 9 and softplus.domain in ("", "ai.onnx") and len(reading) == 1
            and reading[0] is not None and reading[0].op_type == "Tanh"
            and reading[0].domain in ("", "ai.onnx"))


def _is_float32(graph: GraphWriter, tensor: str) -> bool:
    from onnx import TensorProto

    return graph.elem_type(tensor) == TensorProto.FLOAT
