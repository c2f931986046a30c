"""Writing ONNX nodes that replace one node of a graph: fresh names, constants, and what shape
inference tells of the graph's tensors (used by harl.frontend.lowering)."""

from __future__ import annotations

import numpy as np

from harl.errors import HarlError
from harl.frontend.large_models import shape_probe

KEPT = object()
"""what a lowering returns for a node it leaves as it is"""


class ShapeUnknown(HarlError):
    """A shape the rewrite needs is not known statically (it may be once shapes are folded)."""


def tensor_shapes(model, input_shapes) -> dict[str, tuple[list[int | None], int]]:
    """Name -> (dims, ONNX element type) of every tensor shape inference can tell."""
    import onnx

    probe = shape_probe(model)
    set_input_shapes(probe, input_shapes)
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    except Exception:  # noqa: BLE001  (onnx raises several kinds; shapes stay unknown)
        inferred = probe
    shapes = {}
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    for value in values:
        tensor_type = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
        shapes[value.name] = (dims, tensor_type.elem_type)
    for tensor in inferred.graph.initializer:
        shapes[tensor.name] = (list(tensor.dims), tensor.data_type)
    return shapes


def set_input_shapes(proto, shapes: dict[str, tuple[int, ...]]) -> None:
    """Write `shapes` (name -> dims) into the matching graph inputs of `proto`, in place."""
    for graph_input in proto.graph.input:
        if graph_input.name in shapes:
            shape = graph_input.type.tensor_type.shape
            shape.ClearField("dim")
            for size in shapes[graph_input.name]:
                shape.dim.add().dim_value = size


def tensor_readers(graph) -> dict[str, list]:
    """Tensor name -> the nodes that read it, with None for each graph output it is; a node
    with subgraphs (If, Loop, Scan) reads what any node inside them reads."""
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in (*node.input, *_subgraph_inputs(node)):
            readers.setdefault(name, []).append(node)
    for output in graph.output:
        readers.setdefault(output.name, []).append(None)
    return readers


def _subgraph_inputs(node) -> set[str]:
    """Names the nodes of `node`'s subgraphs read, at any depth (outer-scope tensors among
    them; names a subgraph defines itself are harmless extras)."""
    from onnx import AttributeProto

    names = set()
    for attr in node.attribute:
        graphs = ([attr.g] if attr.type == AttributeProto.GRAPH
                  else attr.graphs if attr.type == AttributeProto.GRAPHS else [])
        for subgraph in graphs:
            for inner in subgraph.node:
                names.update(inner.input)
                names |= _subgraph_inputs(inner)
            names.update(output.name for output in subgraph.output)
    return names


def graph_constants(graph) -> dict:
    """Name -> TensorProto of the graph's initializers and Constant nodes' values (a
    sequence_lens, an exponent), and of Identities of them (TorchScript's exports pass many
    weights through one)."""
    constants = {t.name: t for t in graph.initializer}
    for node in graph.node:  # in order: an Identity's input is defined before it
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
        elif node.op_type == "Identity" and node.input[0] in constants:
            constants[node.output[0]] = constants[node.input[0]]
    return constants


class GraphWriter:
    """Emits the nodes and constants that replace one node, under names nothing else uses."""

    def __init__(self, graph, shapes, where: str, opset: int) -> None:
        self.shapes = shapes
        self.opset = opset
        self.where = where
        self.constants = graph_constants(graph)
        self.producers = {name: node for node in graph.node for name in node.output if name}
        """tensor name -> the node that computes it"""
        self.readers = tensor_readers(graph)
        """tensor name -> the nodes that read it, None for a graph output"""
        self.taken = {name for node in graph.node for name in (*node.input, *node.output)}
        self.taken |= {node.name for node in graph.node} | set(self.constants)
        self.taken |= {v.name for v in (*graph.input, *graph.output)}
        self.initializers = []
        self.nodes = []
        self.prefix = ""
        self.node = None

    def begin(self, node) -> None:
        self.node = node
        self.prefix = node.name or f"{node.op_type}_{node.output[0]}"

    def take_nodes(self) -> list:
        nodes, self.nodes = self.nodes, []
        return nodes

    def fail(self, why: str) -> HarlError:
        """The one-line error that the node being rewritten cannot be."""
        return HarlError(f"{self.where}: {self.node.op_type} node {self.prefix!r}: {why}")

    def unknown(self, why: str) -> ShapeUnknown:
        """The error that a shape the rewrite needs is not known (yet)."""
        return ShapeUnknown(f"{self.where}: {self.node.op_type} node {self.prefix!r}: {why}")

    def name(self, hint: str) -> str:
        base = f"{self.prefix}/{hint}"
        name, n = base, 1
        while name in self.taken:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return name

    def const(self, value, dtype, hint: str = "const") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def constant_node(self, value: np.ndarray, hint: str) -> str:
        """A Constant node holding `value`, not an initializer: before IR version 4 an
        initializer must also be a graph input, and the saved graph would fail onnx's checker."""
        from onnx import numpy_helper

        return self.op("Constant", [], hint, value=numpy_helper.from_array(np.asarray(value)))

    def op(self, op_type: str, inputs: list[str], hint: str | None = None,
           output: str | None = None, **attrs) -> str:
        from onnx import helper

        output = output or self.name(hint or op_type)
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=self.name(op_type),
                                           **attrs))
        return output

    def op_outputs(self, op_type: str, inputs: list[str], count: int, **attrs) -> list[str]:
        from onnx import helper

        outputs = [self.name(f"{op_type}_{i}") for i in range(count)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self.name(op_type),
                                           **attrs))
        return outputs

    def sigmoid_by_exp(self, x: str, output: str | None = None) -> str:
        """1 / (1 + Exp(-x)) of a float32 `x`: TVM's own sigmoid computes the same, calling
        libm's `expf` for every element, where the Exp takes TVM's fast math (see
        harl.frontend.lowering)."""
        one = self.constant_node(np.float32(1.0), "one")
        exp = self.op("Exp", [self.op("Neg", [x])])
        return self.op("Div", [one, self.op("Add", [one, exp])], output=output)

    def dims(self, tensor: str) -> list[int | None]:
        return list(self.shapes.get(tensor, ([], 0))[0])

    def elem_type(self, tensor: str) -> int:
        """`tensor`'s ONNX element type, 0 where shape inference could not tell it."""
        return self.shapes.get(tensor, ([], 0))[1]

    def np_type(self, tensor: str):
        from onnx import helper

        elem_type = self.elem_type(tensor)
        if not elem_type:
            raise self.fail(f"the element type of {tensor!r} is unknown")
        return helper.tensor_dtype_to_np_dtype(elem_type)

    def constant_value(self, tensor: str) -> np.ndarray | None:
        from onnx import numpy_helper

        found = self.constants.get(tensor)
        return None if found is None else numpy_helper.to_array(found)


def node_attrs(node) -> dict:
    """A node's attributes by name, as Python values."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def node_input(node, index: int) -> str:
    """A node's input `index`, "" where it is absent (optional inputs)."""
    return node.input[index] if len(node.input) > index else ""
