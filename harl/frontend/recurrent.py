"""RNN, GRU and LSTM unrolled over their sequence into operators TVM's importer has (the equations
of the ONNX operator specification; see harl.frontend.lowering)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harl.frontend.graph_writer import GraphWriter, node_attrs, node_input

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

    def __init__(self, graph: GraphWriter, node) -> None:
        self.g, self.node = graph, node
        attrs = node_attrs(node)
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
        x = node_input(node, 0)
        dims = graph.dims(x)
        if len(dims) != 3 or any(not d for d in dims) or not graph.elem_type(x):
            raise graph.unknown(f"the shape of its input {x!r} is not known statically ({dims})")
        self.dtype = graph.np_type(x)  # of the constants the layer's arithmetic adds
        self.seq, self.batch = (dims[0], dims[1]) if self.layout == 0 else (dims[1], dims[0])
        w_dims = graph.dims(node_input(node, 2))
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
            if name == "sigmoid" and dtype == np.float32:
                return g.sigmoid_by_exp(x)
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
        lens = node_input(self.node, 4)
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
        x = node_input(node, 0)
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
        w = self._direction_slice(node_input(node, 1), d)  # [G * H, input]
        r = self._direction_slice(node_input(node, 2), d)  # [G * H, H]
        bias = node_input(node, 3)
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
                bias_k = self._rows(b, k * H)
                if k != 2 or b_inside is None:  # the recurrent bias too, unless kept inside
                    bias_k = g.op("Add", [bias_k, self._rows(b, (G + k) * H)])
                p = g.op("Add", [p, bias_k])
            projections.append(p)
        h = self._initial(5, d)
        c = self._initial(6, d) if self.kind == "LSTM" else None
        peep = node_input(node, 7) if self.kind == "LSTM" else ""
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
        state = node_input(self.node, index)
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


def lower_recurrent(graph: GraphWriter, node) -> None:
    """Replace one RNN, GRU or LSTM node by its unrolled steps."""
    _Recurrent(graph, node).unroll()
