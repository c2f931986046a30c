"""A Relax module's main function as a rewrite graph for the agent, over harl's graph rules.

Nodes are the function's parameters and the bindings of its dataflow blocks; an edge runs from
a variable to each binding that uses it. A node's features: its operator (one-hot over
`OP_VOCAB`, plus parameter, tuple, tuple item and other), its output's log shape (rank, log
elements, the last four dims' logs), its constant arguments (how many, log elements) and
whether the function returns it, and its log FLOPs (a matmul's or conv's multiply-adds from its
shapes, else its output's elements). An edge's feature is the log size of the tensor it carries.
The estimated latency of the fused task a node falls in is left out: it needs TVM's fusion
traced back to the bindings, which costs as much as pricing the graph again.

The actions are `harl.graph.search.common.actions` (every match of every rule), each binding
the nodes of the variables its match names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from harl.graph.rl.env import Action
from harl.graph.rule import Rule

OP_VOCAB = (
    "matmul", "add", "subtract", "multiply", "divide", "power", "sqrt", "rsqrt", "exp", "tanh",
    "sigmoid", "erf", "nn.relu", "nn.gelu", "nn.gelu_tanh", "nn.silu", "nn.softmax",
    "nn.layer_norm", "nn.batch_norm", "mean", "sum", "variance", "max", "permute_dims",
    "reshape", "split", "concat", "strided_slice", "take", "nn.conv2d", "nn.max_pool2d",
    "nn.avg_pool2d", "nn.adaptive_avg_pool2d", "nn.pad", "layout_transform", "astype", "clip",
    "expand_dims", "squeeze", "broadcast_to", "where")
"""Relax operators (without the `relax.` prefix) a node's one-hot names"""
KINDS = OP_VOCAB + ("param", "tuple", "tuple_get_item", "other")
SHAPE_DIMS = 4
"""the last this many dims of a node's output shape are features"""
LOG_SCALE = 10.0
"""logs are divided by this, so that features stay near 1"""
NODE_DIM = len(KINDS) + 2 + SHAPE_DIMS + 4
EDGE_DIM = 1


def _log(x: float) -> float:
    return math.log1p(max(0.0, x)) / LOG_SCALE


def _shape(expr) -> tuple[int, ...] | None:
    """The static shape of a tensor-typed expression; None for other types or symbolic dims."""
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return None
    try:
        return tuple(int(v) for v in values)
    except (TypeError, ValueError):
        return None


def _kind(value) -> str:
    from tvm import relax

    if isinstance(value, relax.Tuple):
        return "tuple"
    if isinstance(value, relax.TupleGetItem):
        return "tuple_get_item"
    name = getattr(getattr(value, "op", None), "name", "")
    name = name.removeprefix("relax.") if isinstance(name, str) else ""
    return name if name in OP_VOCAB else "other"


def _flop(kind: str, out, args: Sequence) -> float:
    """Multiply-adds of a matmul or conv2d from its shapes; else its output's elements."""
    elements = math.prod(_shape(out) or ())
    shapes = [_shape(a) for a in args[:2]]
    if kind == "matmul" and shapes[0]:
        return elements * shapes[0][-1]
    if kind == "nn.conv2d" and len(shapes) == 2 and shapes[1]:
        return elements * math.prod(shapes[1][1:])
    return elements


def _node_row(kind: str, out, constants: Sequence, is_output: bool,
              flop: float = 0.0) -> np.ndarray:
    row = np.zeros(NODE_DIM, dtype=np.float32)
    row[KINDS.index(kind)] = 1.0
    shape = _shape(out)
    base = len(KINDS)
    if shape is not None:
        row[base] = len(shape) / SHAPE_DIMS
        row[base + 1] = _log(math.prod(shape))
        for j, dim in enumerate(shape[-SHAPE_DIMS:][::-1]):
            row[base + 2 + j] = _log(dim)
    sizes = [math.prod(s) for s in map(_shape, constants) if s is not None]
    row[base + 2 + SHAPE_DIMS] = len(constants) / 4
    row[base + 3 + SHAPE_DIMS] = _log(sum(sizes))
    row[base + 4 + SHAPE_DIMS] = float(is_output)
    row[base + 5 + SHAPE_DIMS] = _log(flop)
    return row


class RelaxGraph:
    """`mod`'s main function under `rules` (see the module docstring)."""

    def __init__(self, mod, rules: Sequence[Rule]) -> None:
        self.mod, self.rules = mod, tuple(rules)
        self.rule_names = tuple(rule.name for rule in self.rules)
        self._features: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._actions: list[Action] | None = None
        self._matches: dict[Action, object] = {}
        self._key = None

    def _build(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        import tvm
        from tvm import relax

        if self._features is not None:
            return self._features
        func = self.mod["main"]
        index: dict[str, int] = {}
        rows, links, sizes = [], [], []
        outputs = {v.name for v in relax.analysis.free_vars(func.body.body)}
        for param in func.params:
            index[param.name] = len(rows)
            rows.append(_node_row("param", param, (), param.name in outputs))
        for block in func.body.blocks:
            for binding in block.bindings:
                value = binding.value
                args = list(getattr(value, "args", None) or getattr(value, "fields", None)
                            or ([value.tuple_value] if isinstance(value, relax.TupleGetItem)
                                else []))
                constants = [a for a in args if isinstance(a, tvm.ir.expr.Constant)]
                me, kind = len(rows), _kind(value)
                rows.append(_node_row(kind, binding.var, constants, binding.var.name in outputs,
                                      _flop(kind, binding.var, args)))
                for var in relax.analysis.free_vars(value):
                    if var.name in index:
                        links.append((index[var.name], me))
                        shape = _shape(var)
                        sizes.append(_log(math.prod(shape)) if shape is not None else 0.0)
                index[binding.var.name] = me
        self._index = index
        self._features = (np.stack(rows), np.array(links, dtype=np.int64).reshape(-1, 2),
                          np.array(sizes, dtype=np.float32).reshape(-1, EDGE_DIM))
        return self._features

    def node_features(self) -> np.ndarray:
        return self._build()[0]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        _, links, sizes = self._build()
        return links, sizes

    def actions(self) -> list[Action]:
        from harl.graph.search.common import actions

        if self._actions is None:
            self._build()
            position = {rule.name: i for i, rule in enumerate(self.rules)}
            self._actions = []
            for rule, match in actions(self.mod, self.rules):
                nodes = tuple(self._index[v] for v in match.vars if v in self._index)
                action = Action(position[rule.name], nodes, str(match))
                self._matches[action] = match
                self._actions.append(action)
        return self._actions

    def apply(self, action: Action) -> RelaxGraph | None:
        from harl.graph.search.common import try_apply

        self.actions()
        new = try_apply(self.rules[action.rule], self._matches[action], self.mod)
        return None if new is None else RelaxGraph(new, self.rules)

    def key(self) -> int:
        import tvm_ffi

        if self._key is None:
            self._key = tvm_ffi.structural_hash(self.mod["main"], map_free_vars=True)
        return self._key
