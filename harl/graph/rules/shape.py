"""Rules on data movement: a transpose folded into the matmul that reads it, and transposes,
reshapes and splits undone by the operator after them."""

from __future__ import annotations

from harl.graph.rule import Graph, Match, Rule, is_var, rewrite_vars, shape_of


def _op(value) -> str | None:
    return getattr(getattr(value, "op", None), "name", None)


def _axes(call) -> list[int]:
    """A permute_dims call's axes (reversed when it gives none)."""
    axes = call.attrs.axes
    rank = len(shape_of(call.args[0]))
    return list(range(rank))[::-1] if axes is None else [int(a) for a in axes]


class FuseTransposeMatmul(Rule):
    """x @ permute_dims(y, p) -> NT_matmul(x, permute_dims(y, q)), q being p with its last two
    axes swapped back (no transpose left when q is the identity)."""

    name = "fuse_transpose_matmul"
    doc = ("read a transposed right operand (attention's K^T) in place inside the matmul, "
           "leaving only the rest of the permutation: TVM's FuseTransposeMatmul at one site")

    def _sites(self, graph: Graph):
        out = []
        for binding in graph.bindings:
            if _op(binding.value) != "relax.matmul" or not is_var(binding.value.args[1]):
                continue
            transpose = graph.var2val.get(binding.value.args[1])
            if _op(transpose) != "relax.permute_dims" or not is_var(transpose.args[0]):
                continue
            if len(shape_of(transpose.args[0])) >= 2:
                out.append(binding)
        return out

    def matches(self, mod) -> list[Match]:
        return [Match(self.name, (b.var.name,), f"transpose {b.value.args[1].name}")
                for b in self._sites(Graph(mod))]

    def apply(self, mod, match: Match):
        """Run TVM's pass on a function holding only this matmul and its transpose, then call
        the kernel it made from the matched binding."""
        import tvm
        from tvm import relax

        graph = Graph(mod)
        binding = graph.by_name[match.vars[0]]
        x, wt = binding.value.args
        y = graph.var2val[wt].args[0]
        rest = _axes(graph.var2val[wt])
        rest[-1], rest[-2] = rest[-2], rest[-1]
        swap = list(range(len(rest)))
        swap[-1], swap[-2] = swap[-2], swap[-1]
        w_ty = relax.BlockBuilder().normalize(relax.op.permute_dims(y, rest)).ty
        a, b = relax.Var("a", x.ty), relax.Var("b", w_ty)
        bb = relax.BlockBuilder()
        with bb.function("main", [a, b]):
            with bb.dataflow():
                out = bb.emit_output(relax.op.matmul(a, relax.op.permute_dims(b, swap)))
            bb.emit_func_output(out)
        fused = relax.transform.FuseTransposeMatmul()(bb.get())
        kernel = next(func for gv, func in fused.functions_items()
                      if isinstance(func, tvm.tirx.PrimFunc))
        adder = relax.BlockBuilder(mod)
        kernel_var = adder.add_func(kernel.without_attr("global_symbol"), "NT_matmul")

        def edit(bb):
            w = y if rest == sorted(rest) else bb.emit(relax.op.permute_dims(y, rest),
                                                       name_hint=f"{match.vars[0]}_rhs")
            return relax.call_tir(kernel_var, [x, w], binding.var.ty)

        return rewrite_vars(adder.get(), {match.vars[0]: edit})


class _SameOpTwice(Rule):
    """A rule on an operator applied to its own result: its matches are such second calls."""

    op = ""  # the operator's name, e.g. "relax.reshape"

    def matches(self, mod) -> list[Match]:
        graph = Graph(mod)
        return [Match(self.name, (b.var.name,), f"after {b.value.args[0].name}")
                for b in graph.bindings if _op(b.value) == self.op
                and is_var(b.value.args[0])
                and _op(graph.var2val.get(b.value.args[0])) == self.op]


class CancelTransposePair(_SameOpTwice):
    """permute_dims(permute_dims(x, p), q) -> permute_dims(x, p then q), or x."""

    name = "cancel_transpose_pair"
    doc = "compose two transposes in a row into one, or none when they cancel"
    op = "relax.permute_dims"

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        outer = graph.by_name[match.vars[0]].value
        inner = graph.var2val[outer.args[0]]
        first, second = _axes(inner), _axes(outer)
        axes = [first[i] for i in second]
        x = inner.args[0]
        new = x if axes == sorted(axes) else relax.op.permute_dims(x, axes)
        return rewrite_vars(mod, {match.vars[0]: lambda _bb: new})


class CancelReshapePair(_SameOpTwice):
    """reshape(reshape(x, s), t) -> reshape(x, t), or x when t is x's shape."""

    name = "cancel_reshape_pair"
    doc = "merge two reshapes in a row into one, or none when the second undoes the first"
    op = "relax.reshape"

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        binding = graph.by_name[match.vars[0]]
        x = graph.var2val[binding.value.args[0]].args[0]
        shape = shape_of(binding.var)
        new = x if shape_of(x) == shape else relax.op.reshape(x, shape)
        return rewrite_vars(mod, {match.vars[0]: lambda _bb: new})


class CancelSplitConcat(Rule):
    """concat(split(x)[0], ..., split(x)[n-1]) along the split's axis -> x."""

    name = "cancel_split_concat"
    doc = ("drop a split whose parts are concatenated back in order along the same axis (as "
           "after merging the parallel branches of a SqueezeNet fire module)")

    def _sites(self, graph: Graph):
        out = []
        for binding in graph.bindings:
            if _op(binding.value) != "relax.concat":
                continue
            parts = list(getattr(binding.value.args[0], "fields", []))
            items = [graph.var2val.get(p) if is_var(p) else None for p in parts]
            if not items or any(type(i).__name__ != "TupleGetItem" for i in items):
                continue
            source = items[0].tuple_value
            split = graph.var2val.get(source) if is_var(source) else None
            if _op(split) != "relax.split" or any(
                    not i.tuple_value.same_as(source) or int(i.index) != k
                    for k, i in enumerate(items)):
                continue
            rank = len(shape_of(split.args[0]))
            if len(source.ty.fields) != len(items) or \
                    int(split.attrs.axis) % rank != int(binding.value.attrs.axis) % rank:
                continue
            out.append((binding, split.args[0]))
        return out

    def matches(self, mod) -> list[Match]:
        return [Match(self.name, (b.var.name,), f"of {x.name}")
                for b, x in self._sites(Graph(mod))]

    def apply(self, mod, match: Match):
        graph = Graph(mod)
        x = next(x for b, x in self._sites(graph) if b.var.name == match.vars[0])
        return rewrite_vars(mod, {match.vars[0]: lambda _bb: x})
