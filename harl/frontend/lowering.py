"""ONNX operators TVM's Relax importer lacks, rewritten into ones it has, before the import.

- RNN, GRU and LSTM are unrolled over their sequence, whose length the fixed input shapes give:
  the input projection of every step is one MatMul per gate, and each step one MatMul per gate
  on the hidden state (equations of the ONNX operator specification).
- ConvInteger becomes a Conv in int32 of its operands minus their zero points: exact, since
  the sums are integers.

The rewritten graph is what harl tunes and builds; verification still runs the original model
in onnxruntime, so a lowering that computed something else would fail the check.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harl.errors import HarlError

_ALL_OPS = ("RNN", "GRU", "LSTM", "ConvInteger")


class ShapeUnknown(HarlError):
    """A shape the rewrite needs is not known statically (it may be once shapes are folded)."""


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
    shapes = _tensor_shapes(model, input_shapes)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    graph = _Graph(model.graph, shapes, where, opset)
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


def _tensor_shapes(model, input_shapes) -> dict[str, tuple[list[int | None], int]]:
    """Name -> (dims, ONNX element type) of every tensor shape inference can tell."""
    import onnx

    from harl.frontend.onnx_model import set_input_shapes

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
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


class _Graph:
    """Emits the nodes and constants that replace one node, under names nothing else uses."""

    def __init__(self, graph, shapes, where: str, opset: int) -> None:
        self.shapes = shapes
        self.opset = opset
        self.where = where
        self.constants = {t.name: t for t in graph.initializer}
        for node in graph.node:  # Constant nodes hold values too (a sequence_lens, say)
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.constants[node.output[0]] = node.attribute[0].t
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
        return HarlError(f"{self.where}: {self.node.op_type} node {self.prefix!r}: {why}")

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

    def dims(self, tensor: str) -> list[int | None]:
        return list(self.shapes.get(tensor, ([], 0))[0])

    def np_type(self, tensor: str):
        from onnx import helper

        elem_type = self.shapes.get(tensor, ([], 0))[1]
        if not elem_type:
            raise self.fail(f"the element type of {tensor!r} is unknown")
        return helper.tensor_dtype_to_np_dtype(elem_type)

    def constant_value(self, tensor: str) -> np.ndarray | None:
        from onnx import numpy_helper

        found = self.constants.get(tensor)
        return None if found is None else numpy_helper.to_array(found)


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _input(node, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


# -- recurrent layers ----------------------------------------------------------------------------

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"),
                        "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# ONNX's activation functions of recurrent layers: (uses alpha, uses beta, default alpha, beta)
_ACTIVATION_PARAMS = {
    "relu": (False, False, 0, 0), "tanh": (False, False, 0, 0), "sigmoid": (False, False, 0, 0),
    "softsign": (False, False, 0, 0), "softplus": (False, False, 0, 0),
    "leakyrelu": (True, False, 0.01, 0), "thresholdedrelu": (True, False, 1.0, 0),
    "elu": (True, False, 1.0, 0), "hardsigmoid": (True, True, 0.2, 0.5),
    "affine": (True, True, 1.0, 0.0), "scaledtanh": (True, True, 1.0, 1.0),
}


class _Recurrent:
    """One RNN, GRU or LSTM node being unrolled."""

    def __init__(self, graph: _Graph, node) -> None:
        self.g, self.node = graph, node
        attrs = _attrs(node)
        self.kind = node.op_type
        self.gates = _GATES[self.kind]
        direction = attrs.get("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in ("forward", "reverse", "bidirectional"):
            raise graph.fail(f"unknown direction {direction!r}")
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        self.layout = int(attrs.get("layout", 0))
        self.linear_before_reset = int(attrs.get("linear_before_reset", 0))
        if int(attrs.get("input_forget", 0)):
            raise graph.fail("input_forget=1 is not supported")
        self.clip = attrs.get("clip")
        x = _input(node, 0)
        dims = graph.dims(x)
        if len(dims) != 3 or any(not d for d in dims) or not graph.shapes.get(x, ([], 0))[1]:
            raise ShapeUnknown(f"{graph.where}: {node.op_type} node {graph.prefix!r}: the shape "
                               f"of its input {x!r} is not known statically ({dims})")
        self.dtype = graph.np_type(x)  # of the constants the layer's arithmetic adds
        self.seq, self.batch = (dims[0], dims[1]) if self.layout == 0 else (dims[1], dims[0])
        w_dims = graph.dims(_input(node, 2))
        self.hidden = int(attrs.get("hidden_size") or (w_dims[-1] if w_dims else 0))
        if not self.hidden:
            raise graph.fail("its hidden size is unknown")
        self.activations = self._activations(attrs)
        self._check_sequence_lens()

    def _activations(self, attrs) -> list[list[Callable[[str], str]]]:
        """Per direction, the layer's activation functions (f, g, h as the kind has them)."""
        names = [n.decode() if isinstance(n, bytes) else n for n in attrs.get("activations", [])]
        per_direction = len(_DEFAULT_ACTIVATIONS[self.kind])
        if not names:
            names = list(_DEFAULT_ACTIVATIONS[self.kind]) * len(self.directions)
        if len(names) != per_direction * len(self.directions):
            raise self.g.fail(f"{len(names)} activations for {len(self.directions)} "
                              f"direction(s) of {per_direction}")
        alphas = list(attrs.get("activation_alpha", []))
        betas = list(attrs.get("activation_beta", []))
        functions = []
        for position, name in enumerate(names):
            params = _ACTIVATION_PARAMS.get(name.lower())
            if params is None:
                raise self.g.fail(f"activation {name!r} is not supported")
            uses_alpha, uses_beta, alpha, beta = params
            if uses_alpha and alphas:
                alpha = alphas.pop(0)
            if uses_beta and betas:
                beta = betas.pop(0)
            # onnxruntime clips the gates' pre-activations, not the LSTM cell state that h takes
            clip = None if self.kind == "LSTM" and position % per_direction == 2 else self.clip
            functions.append(self._activation(name.lower(), float(alpha), float(beta), clip))
        return [functions[i * per_direction:(i + 1) * per_direction]
                for i in range(len(self.directions))]

    def _activation(self, name: str, alpha: float, beta: float,
                    clip: float | None) -> Callable[[str], str]:
        g, dtype = self.g, self.dtype

        def apply(x: str) -> str:
            if clip is not None:
                x = g.op("Max", [g.op("Min", [x, g.const(clip, dtype, "clip")]),
                                 g.const(-clip, dtype, "clip")])
            if name in ("relu", "tanh", "sigmoid", "softsign", "softplus"):
                return g.op({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid",
                             "softsign": "Softsign", "softplus": "Softplus"}[name], [x])
            if name == "leakyrelu":
                return g.op("LeakyRelu", [x], alpha=alpha)
            if name == "thresholdedrelu":
                return g.op("ThresholdedRelu", [x], alpha=alpha)
            if name == "elu":
                return g.op("Elu", [x], alpha=alpha)
            if name == "hardsigmoid":
                return g.op("HardSigmoid", [x], alpha=alpha, beta=beta)
            if name == "affine":
                return g.op("Add", [g.op("Mul", [x, g.const(alpha, dtype)]),
                                    g.const(beta, dtype)])
            return g.op("Mul", [g.op("Tanh", [g.op("Mul", [x, g.const(beta, dtype)])]),
                                g.const(alpha, dtype)])  # scaledtanh
        return apply

    def _check_sequence_lens(self) -> None:
        lens = _input(self.node, 4)
        if not lens:
            return
        value = self.g.constant_value(lens)
        if value is None or not np.all(value == self.seq):
            raise self.g.fail("per-example sequence lengths (sequence_lens) are not supported "
                              "unless every one is the full sequence")

    # -- parts of one direction

    def _direction_slice(self, tensor: str, direction: int, axis: int = 0) -> str:
        """A constant's entry `direction` along `axis` (the constant folds away on import)."""
        return self.g.op("Gather", [tensor, self.g.const(direction, np.int64, "direction")],
                         axis=axis)

    def _split(self, tensor: str, count: int, axis: int, size: int = 1) -> list[str]:
        """`tensor` cut into `count` parts of `size` along `axis`, by one Split: not a Gather
        per part, whose index TVM would pass to the kernel as a tensor (which the tuner's
        runner fills with random, out-of-range integers), nor a Slice per part, each a task of
        its own."""
        g = self.g
        if count == 1:
            return [tensor]
        if g.opset < 13:
            return g.op_outputs("Split", [tensor], count, axis=axis, split=[size] * count)
        return g.op_outputs("Split", [tensor, g.const([size] * count, np.int64, "split")],
                            count, axis=axis)

    def _rows(self, tensor: str, start: int, count: int = 1) -> str:
        """Rows [start, start + count * hidden) of `tensor` (gates' weights or biases)."""
        index = self.g.const(np.arange(start, start + count * self.hidden), np.int64,
                             "gate_rows")
        return self.g.op("Gather", [tensor, index], axis=0)

    def unroll(self) -> None:
        g, node = self.g, self.node
        x = _input(node, 0)
        if self.layout == 1:
            x = g.op("Transpose", [x], perm=[1, 0, 2])  # -> [seq, batch, input]
        ys, hs, cs = [], [], []
        for d, direction in enumerate(self.directions):
            steps_h, last_h, last_c = self._direction(x, d, direction)
            ys.append(g.op("Reshape", [g.op("Concat", steps_h, axis=0),
                                       g.const([self.seq, 1, self.batch, self.hidden],
                                               np.int64, "shape")]))
            hs.append(last_h)
            if last_c is not None:
                cs.append(last_c)
        outputs = [(ys, 1, [2, 0, 1, 3]), (hs, 0, [1, 0, 2]), (cs, 0, [1, 0, 2])]
        for index, (parts, axis, perm) in enumerate(outputs):
            name = node.output[index] if len(node.output) > index else ""
            if not name:
                continue
            joined = parts[0] if len(parts) == 1 else g.op("Concat", parts, axis=axis)
            if self.layout == 1:
                g.op("Transpose", [joined], output=name, perm=perm)
            else:
                g.op("Identity", [joined], output=name)

    def _direction(self, x: str, d: int, direction: str):
        """The hidden state after each step in time order, the last hidden and cell states,
        each [1, batch, hidden].

        Each step multiplies the hidden state by the recurrent weights of all its gates at
        once (one kernel, not one per gate), except GRU's candidate gate without
        linear_before_reset, whose product takes the reset hidden state.
        """
        g, node, H, G = self.g, self.node, self.hidden, self.gates
        w = self._direction_slice(_input(node, 1), d)  # [G * H, input]
        r = self._direction_slice(_input(node, 2), d)  # [G * H, H]
        bias = _input(node, 3)
        b = self._direction_slice(bias, d) if bias else None  # [2 * G * H]
        gru_reset_first = self.kind == "GRU" and not self.linear_before_reset
        joint = 2 if gru_reset_first else G  # gates whose recurrent products are one MatMul
        r_joint = g.op("Transpose", [self._rows(r, 0, joint)])  # [H, joint * H]
        r_candidate = g.op("Transpose", [self._rows(r, 2 * H)]) if gru_reset_first else None
        # GRU's candidate with linear_before_reset keeps its recurrent bias inside the reset
        b_inside = (self._rows(b, (G + 2) * H) if b and self.kind == "GRU"
                    and self.linear_before_reset else None)
        projections = []  # per gate: x W^T + biases for every step, [seq, batch, H]
        for k in range(G):
            p = g.op("MatMul", [x, g.op("Transpose", [self._rows(w, k * H)])])
            if b:
                both = k != 2 or b_inside is None
                p = g.op("Add", [p, self._rows(b, k * H) if not both else
                                 g.op("Add", [self._rows(b, k * H),
                                              self._rows(b, (G + k) * H)])])
            projections.append(p)
        h = self._initial(5, d)
        c = self._initial(6, d) if self.kind == "LSTM" else None
        peep = _input(node, 7) if self.kind == "LSTM" else ""
        p_d = self._direction_slice(peep, d) if peep else None
        peepholes = [self._rows(p_d, k * H) for k in range(3)] if p_d else [None] * 3
        act = self.activations[d]
        order = range(self.seq) if direction == "forward" else range(self.seq - 1, -1, -1)
        by_gate = [self._split(p, self.seq, axis=0) for p in projections]
        by_time = {}
        for t in order:
            xs = [steps[t] for steps in by_gate]
            rec = self._split(g.op("MatMul", [h, r_joint]), joint, axis=2, size=H)
            pre = [g.op("Add", [xs[k], rec[k]]) for k in range(joint)]
            if self.kind == "RNN":
                h = act[0](pre[0])
            elif self.kind == "GRU":
                z, reset = act[0](pre[0]), act[0](pre[1])
                if gru_reset_first:
                    inner = g.op("MatMul", [g.op("Mul", [reset, h]), r_candidate])
                else:
                    recurrent = rec[2] if b_inside is None else g.op("Add", [rec[2], b_inside])
                    inner = g.op("Mul", [reset, recurrent])
                candidate = act[1](g.op("Add", [xs[2], inner]))
                # H = (1 - z) * candidate + z * H, written with one product
                h = g.op("Add", [candidate, g.op("Mul", [z, g.op("Sub", [h, candidate])])])
            else:
                h, c = self._lstm_step(pre, c, peepholes, act)
            by_time[t] = h
        return [by_time[t] for t in range(self.seq)], h, c

    def _initial(self, index: int, d: int) -> str:
        """Initial hidden (5) or cell (6) state of direction `d`, [1, batch, hidden]."""
        g, shape = self.g, [1, self.batch, self.hidden]
        state = _input(self.node, index)
        if not state:
            return g.const(np.zeros(shape), self.dtype, "zeros")
        entries = self._split(state, len(self.directions), axis=0 if self.layout == 0 else 1)
        return g.op("Reshape", [entries[d], g.const(shape, np.int64, "shape")])

    def _lstm_step(self, pre, c, peepholes, act) -> tuple[str, str]:
        """One LSTM step from its gates' pre-activations (order i, o, f, c)."""
        g = self.g
        p_i, p_o, p_f = peepholes
        if p_i is not None:
            pre[0] = g.op("Add", [pre[0], g.op("Mul", [p_i, c])])
            pre[2] = g.op("Add", [pre[2], g.op("Mul", [p_f, c])])
        i, f, cand = act[0](pre[0]), act[0](pre[2]), act[1](pre[3])
        c = g.op("Add", [g.op("Mul", [f, c]), g.op("Mul", [i, cand])])
        if p_o is not None:
            pre[1] = g.op("Add", [pre[1], g.op("Mul", [p_o, c])])
        o = act[0](pre[1])
        return g.op("Mul", [o, act[2](c)]), c


def _lower_recurrent(graph: _Graph, node) -> None:
    _Recurrent(graph, node).unroll()


# -- integer convolution ---------------------------------------------------------------------


def _lower_conv_integer(graph: _Graph, node) -> None:
    """ConvInteger(x, w, x_zero, w_zero) = Conv(int32(x) - x_zero, int32(w) - w_zero)."""
    from onnx import TensorProto

    x, w = _input(node, 0), _input(node, 1)
    x_zero, w_zero = _input(node, 2), _input(node, 3)
    shifted = []
    for tensor, zero, per_channel in ((x, x_zero, False), (w, w_zero, True)):
        value = graph.op("Cast", [tensor], to=TensorProto.INT32)
        if zero:
            zero = graph.op("Cast", [zero], to=TensorProto.INT32)
            zero_rank = len(graph.dims(w_zero)) if w_zero in graph.shapes else None
            if per_channel and zero_rank is None:
                raise ShapeUnknown(f"{graph.where}: ConvInteger node {graph.prefix!r}: the rank "
                                   f"of its weight zero point {w_zero!r} is unknown")
            if per_channel and zero_rank == 1:  # one per output channel
                rank = len(graph.dims(w))
                if rank < 3:
                    raise ShapeUnknown(f"{graph.where}: ConvInteger node {graph.prefix!r}: the "
                                       f"rank of its weight {w!r} is unknown")
                zero = graph.op("Reshape", [zero, graph.const([-1] + [1] * (rank - 1),
                                                              np.int64, "shape")])
            value = graph.op("Sub", [value, zero])
        shifted.append(value)
    graph.op("Conv", shifted, output=node.output[0], **_attrs(node))


_LOWERINGS: dict[str, Callable] = {"RNN": _lower_recurrent, "GRU": _lower_recurrent,
                                   "LSTM": _lower_recurrent, "ConvInteger": _lower_conv_integer}
