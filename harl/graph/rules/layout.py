"""Conv layout rules: NCHW to NHWC for one conv, or for the whole graph with TVM's
ConvertLayout (which carries the layout through the operators between convs and transposes
only at its borders)."""

from __future__ import annotations

from harl.graph.rule import Graph, Match, Rule, const, const_value, rewrite_vars, unique_names
from harl.graph.rules.conv import plain_conv


class ConvToNHWC(Rule):
    """conv2d_NCHW(x, W) -> transpose(conv2d_NHWC(transpose(x), W as OHWI)) at one conv."""

    name = "conv_nhwc"
    doc = ("compute one 2-D conv in NHWC layout (its weight stored OHWI), transposing its "
           "input and output")

    def matches(self, mod) -> list[Match]:
        graph = Graph(mod)
        return [Match(self.name, (b.var.name,), "NCHW -> NHWC")
                for b in graph.bindings if plain_conv(graph, b)]

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        call = graph.by_name[match.vars[0]].value
        x, w = call.args[0], const_value(call.args[1])
        attrs = call.attrs

        def edit(bb):
            xt = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]), name_hint=f"{match.vars[0]}_in")
            out = bb.emit(relax.op.nn.conv2d(
                xt, const(w.transpose(0, 2, 3, 1), str(w.dtype)),
                strides=[int(s) for s in attrs.strides], padding=[int(p) for p in attrs.padding],
                dilation=[int(d) for d in attrs.dilation], groups=int(attrs.groups),
                data_layout="NHWC", kernel_layout="OHWI", out_dtype=str(call.ty.dtype)),
                name_hint=f"{match.vars[0]}_nhwc")
            return relax.op.permute_dims(out, [0, 3, 1, 2])

        return rewrite_vars(mod, {match.vars[0]: edit})


class ConvertLayoutNHWC(Rule):
    """Every NCHW conv2d of the graph to NHWC, by TVM's ConvertLayout."""

    name = "convert_layout_nhwc"
    doc = ("convert the whole graph's 2-D convs to NHWC with TVM's ConvertLayout, which keeps "
           "the layout through the operators between them")

    def matches(self, mod) -> list[Match]:
        """One match when the graph has an NCHW conv and TVM's pass converts it (the pass
        fails on some graphs, e.g. one with a dropout's tuple in it: then none)."""
        graph = Graph(mod)
        convs = tuple(b.var.name for b in graph.bindings if plain_conv(graph, b))
        if not convs:
            return []
        try:
            self._convert(mod)
        except RuntimeError:  # TVM's errors (InternalError, ...) are RuntimeErrors
            return []
        return [Match(self.name, convs, f"{len(convs)} convs")]

    def apply(self, mod, match: Match):
        del match  # one match: the whole graph
        return self._convert(mod)

    @staticmethod
    def _convert(mod):
        import tvm
        from tvm import relax

        passes = [relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]}),
                  relax.transform.FoldConstant(), relax.transform.Normalize()]
        return unique_names(tvm.transform.Sequential(passes)(mod))
