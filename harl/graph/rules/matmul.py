"""Rules on matmuls with constant weights: merging parallel ones, folding a constant scale."""

from __future__ import annotations

import numpy as np

import harl.graph.rules.merge as merge
from harl.graph.rule import (
    Graph,
    Match,
    Rule,
    const,
    const_value,
    is_var,
    rewrite_vars,
    shape_of,
    var_and_const,
)


def _weighted_matmul():
    from tvm.relax.dpl import is_const, is_op, wildcard

    return is_op("relax.matmul")(wildcard(), is_const())


class MergeParallelMatmul(Rule):
    """x @ W1, x @ W2, ... (with their bias adds and ReLUs) -> split(x @ [W1 W2 ...])."""

    name = "merge_parallel_matmul"
    doc = ("merge matmuls that share an input and have constant 2-D weights (Q/K/V, gate/up) "
           "into one on the concatenated weights, biases included, and a split")

    def _groups(self, graph: Graph) -> dict[str, list]:
        pattern = _weighted_matmul()
        groups: dict[str, list] = {}
        for binding in graph.bindings:
            found = graph.match(pattern, binding)
            if found is None:
                continue
            x, w = binding.value.args
            if len(shape_of(w)) != 2 or not is_var(x):
                continue
            groups.setdefault(x.name, []).append(binding)
        return {x: group for x, group in groups.items() if len(group) >= 2}

    def _branches(self, graph: Graph, group) -> list[merge.Branch]:
        branches = [merge.follow(graph, b, channels=shape_of(b.value.args[1])[1], axis=-1)
                    for b in group]
        return merge.uniform(branches, graph)

    def matches(self, mod) -> list[Match]:
        graph = Graph(mod)
        out = []
        for x, group in self._groups(graph).items():
            widths = "+".join(str(shape_of(b.value.args[1])[1]) for b in group)
            out.append(Match(self.name, tuple(b.var.name for b in group),
                             f"input {x}, widths {widths}"))
        return out

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        group = [graph.by_name[name] for name in match.vars]
        branches = self._branches(graph, group)
        x = group[0].value.args[0]
        weights = [const_value(b.value.args[1]) for b in group]
        return merge.merge(mod, branches, weights=weights, axis=-1,
                           make_op=lambda w: relax.op.matmul(x, w))


class FoldScaleMatmul(Rule):
    """(x @ W [+ b]) * c -> x @ (W c) [+ b c], and (x * s) @ W -> x @ (s W)."""

    name = "fold_scale_matmul"
    doc = ("fold a multiplication (or division) by a constant into the constant weight of the "
           "matmul before it (per output column, through its bias add) or after it (a scalar)")

    def _sites(self, graph: Graph):
        """(root binding, matmul binding, scale as a flat array, bias binding or None, where)"""
        sites = []
        for binding in graph.bindings:
            if _op(binding.value) == "relax.matmul":
                site = self._before(graph, binding)
            elif _op(binding.value) in ("relax.multiply", "relax.divide"):
                site = self._after(graph, binding)
            else:
                site = None
            if site is not None:
                sites.append(site)
        return sites

    def _after(self, graph: Graph, binding):
        """A scale on a matmul's output (maybe through its bias add)."""
        tensor, scale = scaled(binding.value)
        if tensor is None:
            return None
        inner = graph.var2val.get(tensor)
        bias_binding = None
        if _op(inner) == "relax.add" and graph.uses.get(tensor.name) == 1:
            var, bias = var_and_const(inner)
            if var is not None:
                bias_binding = graph.by_name.get(tensor.name)
                tensor = var
                inner = graph.var2val.get(tensor)
        if _op(inner) != "relax.matmul" or graph.uses.get(tensor.name) != 1:
            return None
        w = const_value(inner.args[1])
        if w is None or w.ndim != 2 or not _per_column(scale, w.shape[1]):
            return None
        if bias_binding is not None and not _per_column(
                var_and_const(bias_binding.value)[1], w.shape[1]):
            return None
        return binding, graph.by_name[tensor.name], scale, bias_binding, "after"

    def _before(self, graph: Graph, binding):
        """A scalar scale on a matmul's input."""
        x, w = binding.value.args
        if const_value(w) is None or const_value(w).ndim != 2 or not is_var(x):
            return None
        tensor, scale = scaled(graph.var2val.get(x))
        if tensor is None or scale.size != 1 or graph.uses.get(x.name) != 1:
            return None
        return binding, binding, scale, None, "before"

    def matches(self, mod) -> list[Match]:
        return [Match(self.name, (root.var.name,), f"scale {where} {mm.var.name}")
                for root, mm, _scale, _bias, where in self._sites(Graph(mod))]

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        root, mm, scale, bias_binding, where = next(
            s for s in self._sites(graph) if s[0].var.name == match.vars[0])
        x, w_expr = mm.value.args
        w = const_value(w_expr)
        dtype = str(w.dtype)
        if where == "before":
            x = scaled(graph.var2val[x])[0]
        scale = scale.reshape(-1)
        new = relax.op.matmul(x, const(w * scale.reshape(1, -1), dtype))
        if bias_binding is not None:
            bias = var_and_const(bias_binding.value)[1]
            new = relax.op.add(new, const(bias * scale.reshape(-1), dtype))
        return rewrite_vars(mod, {root.var.name: lambda _bb: new})


class HoistScale(Rule):
    """f(a) * s -> f(a * s) for a scalar constant s, f a matmul (its left operand), a
    transpose, a reshape, or an add of a constant c (which becomes c s)."""

    name = "hoist_scale"
    doc = ("move a scalar constant scale from an operator's output to its input (a matmul's "
           "left operand, a transpose, a reshape, a bias add), toward a weight it folds into "
           "(attention's 1/sqrt(d) up to the Q projection)")

    _THROUGH = ("relax.matmul", "relax.permute_dims", "relax.reshape", "relax.add")

    def _sites(self, graph: Graph):
        """(root binding, the binding of the operator the scale moves through, the scale)"""
        sites = []
        for binding in graph.bindings:
            tensor, scale = scaled(binding.value)
            if tensor is None or scale.size != 1 or graph.uses.get(tensor.name) != 1:
                continue
            inner = graph.by_name.get(tensor.name)
            op = _op(inner.value) if inner is not None else None
            if op not in self._THROUGH:
                continue
            if op == "relax.add" and var_and_const(inner.value)[0] is None:
                continue
            if op != "relax.add" and not is_var(inner.value.args[0]):
                continue
            sites.append((binding, inner, scale))
        return sites

    def matches(self, mod) -> list[Match]:
        return [Match(self.name, (root.var.name,),
                      f"through {_op(inner.value).split('.')[-1]} {inner.var.name}")
                for root, inner, _scale in self._sites(Graph(mod))]

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        _root, inner, scale = next(s for s in self._sites(graph)
                                   if s[0].var.name == match.vars[0])
        call = inner.value
        dtype = str(inner.var.ty.dtype)
        factor = const(scale.reshape(()), dtype)

        def edit(bb):
            if _op(call) == "relax.add":
                var, c = var_and_const(call)
                moved = bb.emit(relax.op.multiply(var, factor), name_hint=f"{var.name}_scaled")
                return relax.op.add(moved, const(c * scale.reshape(()), dtype))
            moved = bb.emit(relax.op.multiply(call.args[0], factor),
                            name_hint=f"{call.args[0].name}_scaled")
            return relax.Call(call.op, [moved, *call.args[1:]], call.attrs)

        return rewrite_vars(mod, {match.vars[0]: edit})


def _op(value) -> str | None:
    return getattr(getattr(value, "op", None), "name", None)


def scaled(value):
    """(the tensor, the scale) for `tensor * const`, `const * tensor` or `tensor / const`
    where the constant does not broadcast the tensor to a larger shape; (None, None)
    otherwise."""
    name = _op(value)
    pairs = []
    if name == "relax.multiply":
        pairs = [(a, const_value(b)) for a, b in (value.args, value.args[::-1])]
    elif name == "relax.divide":
        c = const_value(value.args[1])
        if c is not None and np.all(c != 0):
            pairs = [(value.args[0], (1 / c).astype(c.dtype))]
    for a, c in pairs:
        if c is not None and is_var(a) and shape_of(a) == shape_of(value):
            return a, c
    return None, None


def _per_column(value, columns: int) -> bool:
    """Whether a constant scales a matmul's output per column (a scalar, or one value per
    column broadcast along the last axis)."""
    if value is None:
        return False
    return value.size == 1 or (value.size == columns and value.shape[-1] == columns)
