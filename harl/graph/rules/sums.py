"""Rules moving a matmul across a sum: factoring two matmuls into one, and the inverse.

x @ A + x @ B = x @ (A + B) with constant A and B (one matmul instead of two, the sum folded
into a new constant), x @ W + y @ W = (x + y) @ W with a shared constant W, and its inverse,
(x + y) @ W -> x @ W + y @ W. TVM's ExpandMatmulOfSum distributes `x @ (A + B)` only where A
or B is not known at compile time; with harl's weights bound as constants a sum of weights is
folded before any rule sees it, so its inverse over a sum of activations is the one that
applies here.
"""

from __future__ import annotations

from harl.graph.rule import Graph, Match, Rule, const, const_value, is_var, rewrite_vars, shape_of


def _op(value) -> str | None:
    return getattr(getattr(value, "op", None), "name", None)


def _const_matmul(graph: Graph, var):
    """(x, W as numpy) when `var` is bound to `x @ W` with a constant W and used once."""
    value = graph.var2val.get(var) if is_var(var) else None
    if _op(value) != "relax.matmul" or graph.uses.get(var.name) != 1:
        return None
    w = const_value(value.args[1])
    return (value.args[0], w) if w is not None and is_var(value.args[0]) else None


class FactorMatmulOfSum(Rule):
    """x @ A + x @ B -> x @ (A + B); x @ W + y @ W -> (x + y) @ W."""

    name = "factor_matmul_of_sum"
    doc = ("factor a sum of two matmuls with constant weights into one: shared input (weights "
           "added) or shared weight (inputs added)")

    def _sites(self, graph: Graph):
        out = []
        for binding in graph.bindings:
            if _op(binding.value) != "relax.add":
                continue
            left, right = (_const_matmul(graph, a) for a in binding.value.args)
            if left is None or right is None or left[1].shape != right[1].shape:
                continue
            same_input = left[0].same_as(right[0])
            same_weight = (left[1] == right[1]).all() and shape_of(left[0]) == shape_of(right[0])
            if same_input or same_weight:
                out.append((binding, left, right, "input" if same_input else "weight"))
        return out

    def matches(self, mod) -> list[Match]:
        return [Match(self.name, (b.var.name,), f"shared {kind}")
                for b, _left, _right, kind in self._sites(Graph(mod))]

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        _b, (x, a), (y, b), kind = next(s for s in self._sites(graph)
                                        if s[0].var.name == match.vars[0])
        dtype = str(a.dtype)

        def edit(bb):
            if kind == "input":
                return relax.op.matmul(x, const(a + b, dtype))
            total = bb.emit(relax.op.add(x, y), name_hint=f"{match.vars[0]}_sum")
            return relax.op.matmul(total, const(a, dtype))

        return rewrite_vars(mod, {match.vars[0]: edit})


class ExpandMatmulOfSum(Rule):
    """(x + y) @ W -> x @ W + y @ W, W constant, x and y of the same shape."""

    name = "expand_matmul_of_sum"
    doc = ("distribute a matmul with a constant weight over the sum of two tensors of one "
           "shape (the inverse of factoring by a shared weight)")

    def _sites(self, graph: Graph):
        out = []
        for binding in graph.bindings:
            if _op(binding.value) != "relax.matmul" or const_value(binding.value.args[1]) is None:
                continue
            total = binding.value.args[0]
            value = graph.var2val.get(total) if is_var(total) else None
            if _op(value) == "relax.add" and all(is_var(a) for a in value.args) \
                    and shape_of(value.args[0]) == shape_of(value.args[1]) == shape_of(total):
                out.append(binding)
        return out

    def matches(self, mod) -> list[Match]:
        return [Match(self.name, (b.var.name,), f"sum {b.value.args[0].name}")
                for b in self._sites(Graph(mod))]

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        binding = graph.by_name[match.vars[0]]
        x, y = graph.var2val[binding.value.args[0]].args
        w = binding.value.args[1]

        def edit(bb):
            left = bb.emit(relax.op.matmul(x, w), name_hint=f"{match.vars[0]}_left")
            right = bb.emit(relax.op.matmul(y, w), name_hint=f"{match.vars[0]}_right")
            return relax.op.add(left, right)

        return rewrite_vars(mod, {match.vars[0]: edit})
