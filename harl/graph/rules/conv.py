"""Rules on 2-D convolutions with constant weights: merging parallel ones (enlarging smaller
kernels with zeros, as TASO does), and folding a constant scale into their weights."""

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


def plain_conv(graph: Graph, binding) -> bool:
    """A conv2d in NCHW/OIHW, ungrouped, on a variable, with a constant weight."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    if graph.match(is_op("relax.nn.conv2d")(wildcard(), is_const()), binding) is None:
        return False
    attrs = binding.value.attrs
    return (int(attrs.groups) == 1 and str(attrs.data_layout) == "NCHW"
            and str(attrs.kernel_layout) == "OIHW" and str(attrs.out_layout) == "NCHW"
            and is_var(binding.value.args[0]))


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


class MergeParallelConv(Rule):
    """conv(x, W1), conv(x, W2), ... (with bias adds, ReLUs) -> split(conv(x, [W1; W2; ...]))."""

    name = "merge_parallel_conv"
    doc = ("merge 2-D convs that share an input, stride and output size into one on the "
           "concatenated weights (a smaller kernel enlarged with zeros to the largest one, its "
           "padding grown to match), biases and ReLUs included, and a split")

    def _groups(self, graph: Graph) -> list[tuple[tuple[int, int], list]]:
        """(the merged kernel size, the conv bindings) of each group of two or more."""
        by_site: dict[tuple, list] = {}
        for binding in graph.bindings:
            if not plain_conv(graph, binding):
                continue
            attrs = binding.value.attrs
            key = (binding.value.args[0].name, _ints(attrs.strides), _ints(attrs.dilation),
                   _spatial(binding.var), str(binding.value.ty.dtype))
            by_site.setdefault(key, []).append(binding)
        groups = []
        for convs in by_site.values():
            if len(convs) < 2:
                continue
            kernel = (max(shape_of(c.value.args[1])[2] for c in convs),
                      max(shape_of(c.value.args[1])[3] for c in convs))
            by_padding: dict[tuple, list] = {}
            for conv in convs:
                padding = _enlarged_padding(conv, kernel)
                if padding is not None:
                    by_padding.setdefault(padding, []).append(conv)
            groups += [(kernel, same) for same in by_padding.values() if len(same) >= 2]
        return groups

    def matches(self, mod) -> list[Match]:
        graph = Graph(mod)
        out = []
        for kernel, convs in self._groups(graph):
            sizes = "+".join(f"{shape_of(c.value.args[1])[2]}x{shape_of(c.value.args[1])[3]}"
                             for c in convs)
            out.append(Match(self.name, tuple(c.var.name for c in convs),
                             f"input {convs[0].value.args[0].name}, kernels {sizes} -> "
                             f"{kernel[0]}x{kernel[1]}"))
        order = {b.var.name: i for i, b in enumerate(graph.bindings)}
        return sorted(out, key=lambda m: order[m.vars[0]])

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        convs = [graph.by_name[name] for name in match.vars]
        kernel = (max(shape_of(c.value.args[1])[2] for c in convs),
                  max(shape_of(c.value.args[1])[3] for c in convs))
        padding = _enlarged_padding(convs[0], kernel)
        weights = []
        for conv in convs:
            w = const_value(conv.value.args[1])
            top, left = (kernel[0] - w.shape[2]) // 2, (kernel[1] - w.shape[3]) // 2
            weights.append(np.pad(w, ((0, 0), (0, 0), (top, kernel[0] - w.shape[2] - top),
                                      (left, kernel[1] - w.shape[3] - left))))
        branches = merge.uniform(
            [merge.follow(graph, c, channels=shape_of(c.var)[1], axis=1) for c in convs], graph)
        first = convs[0].value
        x = first.args[0]

        def make_op(weight):
            return relax.op.nn.conv2d(x, weight, strides=_ints(first.attrs.strides),
                                      padding=padding, dilation=_ints(first.attrs.dilation),
                                      groups=1, data_layout="NCHW", kernel_layout="OIHW",
                                      out_dtype=str(first.ty.dtype))

        return merge.merge(mod, branches, weights=weights, make_op=make_op, axis=1)


def _spatial(var) -> tuple[int, ...]:
    """An NCHW tensor's shape without its channels."""
    n, _c, h, w = shape_of(var)
    return n, h, w


def _enlarged_padding(conv, kernel: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """The conv's padding (top, left, bottom, right) once its kernel is enlarged to `kernel`
    with zeros around it, or None when that cannot keep its output (dilated, or an odd
    difference in size)."""
    w = shape_of(conv.value.args[1])
    dh, dw = kernel[0] - w[2], kernel[1] - w[3]
    if (dh or dw) and (dh % 2 or dw % 2 or _ints(conv.value.attrs.dilation) != (1, 1)):
        return None
    top, left, bottom, right = _ints(conv.value.attrs.padding)
    return top + dh // 2, left + dw // 2, bottom + dh // 2, right + dw // 2


class FoldScaleConv(Rule):
    """conv(x, W) [+ b] times c (a scalar or one value per output channel) -> conv(x, W c)
    [+ b c]."""

    name = "fold_scale_conv"
    doc = ("fold a multiplication (or division) by a constant, scalar or per output channel, "
           "into the constant weight (and bias) of the 2-D conv before it")

    def _sites(self, graph: Graph):
        """(root binding, conv binding, scale, bias binding or None)"""
        from harl.graph.rules.matmul import scaled

        sites = []
        for binding in graph.bindings:
            tensor, scale = scaled(binding.value)
            if tensor is None:
                continue
            inner, bias = graph.by_name.get(tensor.name), None
            if inner is not None and _op(inner.value) == "relax.add" \
                    and graph.uses.get(tensor.name) == 1:
                a, b = var_and_const(inner.value)
                channels = shape_of(tensor)[1] if len(shape_of(tensor)) == 4 else -1
                if a is not None and _per_channel(b, channels):
                    bias, inner = inner, graph.by_name.get(a.name)
            if inner is None or not plain_conv(graph, inner) \
                    or graph.uses.get(inner.var.name) != 1:
                continue
            if _per_channel(scale, shape_of(inner.var)[1]):
                sites.append((binding, inner, scale, bias))
        return sites

    def matches(self, mod) -> list[Match]:
        return [Match(self.name, (root.var.name,), f"scale after {conv.var.name}")
                for root, conv, _scale, _bias in self._sites(Graph(mod))]

    def apply(self, mod, match: Match):
        from tvm import relax

        graph = Graph(mod)
        root, conv, scale, bias = next(s for s in self._sites(graph)
                                       if s[0].var.name == match.vars[0])
        w = const_value(conv.value.args[1])
        per_out = np.broadcast_to(scale.reshape(-1), (w.shape[0],))
        call = conv.value
        new = relax.Call(call.op, [call.args[0], const(w * per_out.reshape(-1, 1, 1, 1),
                                                         str(w.dtype))], call.attrs)
        if bias is not None:
            b = var_and_const(bias.value)[1]
            new = relax.op.add(new, const(b * per_out.reshape(-1, 1, 1), str(b.dtype))
                               if b.ndim == 3 else
                               const(b * per_out.reshape(1, -1, 1, 1), str(b.dtype)))
        return rewrite_vars(mod, {root.var.name: lambda _bb: new})


def _op(value) -> str | None:
    return getattr(getattr(value, "op", None), "name", None)


def _per_channel(value, channels: int) -> bool:
    """Whether a constant broadcast against an NCHW tensor varies along C only (or not at
    all)."""
    if value is None:
        return False
    if value.size == 1:
        return True
    full = (1,) * (4 - value.ndim) + value.shape if value.ndim <= 4 else ()
    return value.size == channels and full == (1, channels, 1, 1)
