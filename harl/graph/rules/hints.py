"""Per-node decisions of the lowering, as rules: a conv's blocked layout and a fusion fence.

Neither changes what the searched graph computes. Each is a hint, kept in main's attributes
(HINTS_ATTR: JSON of {variable name: {key: value}}), that the lowering reads: the conv layout
pass (harl.graph.rules.nchwc) leaves a conv hinted `nchw` in NCHW and blocks one hinted `half`
in half the lanes it would give it; after that pass, `with_fences` computes each fenced node
alone: its op is legalised to a PrimFunc marked opaque (`op_pattern` 8), which TVM's FuseOps
keeps out of every fused group (AnnotateTIROpPattern keeps an `op_pattern` already set). The
lowered graph is plain Relax and TIR, so plain TVM builds the same fused functions.

These are GO's per-node decisions beyond rule matches (the conv layout and the fusion
boundary); as rules, any search over rules can take them (harl.graph.rules.NODE_RULES)."""

from __future__ import annotations

import json

from harl.graph.rule import Graph, Match, Rule, const_value, is_var, op_name

HINTS_ATTR = "harl.node_hints"
"""the attribute of main holding the hints"""
CONV_LAYOUT = "conv_layout"
"""a conv's hint key: `nchw` (not blocked) or `half` (half the lanes)"""
FENCE = "fence"
"""a node's hint key: computed alone, outside any fused group"""
ANCHORS = frozenset({"relax.nn.conv2d", "relax.matmul", "relax.linear"})
"""ops whose epilogue a fence can cut off: a fence is offered on an op reading one of them"""
BLOCKED_SUFFIX = "_nchwc"
"""the conv layout pass names a node's blocked twin as the node, with this suffix"""
OPAQUE = 8
"""TVM's kOpaque op pattern: FuseOps fuses nothing into or after such a PrimFunc"""


def node_hints(mod) -> dict[str, dict]:
    """The hints of `mod`'s main, for the variables it still binds (itself or, after the conv
    layout pass, its blocked twin)."""
    text = (mod["main"].attrs or {}).get(HINTS_ATTR)
    if text is None:
        return {}
    bound = {b.var.name for block in mod["main"].body.blocks for b in block.bindings}
    return {name: hint for name, hint in json.loads(str(text)).items()
            if name in bound or name + BLOCKED_SUFFIX in bound}


def with_hint(mod, name: str, key: str, value) -> object:
    """`mod` with `key: value` added to variable `name`'s hint (`mod` unchanged)."""
    import tvm

    hints = node_hints(mod)
    hints[name] = {**hints.get(name, {}), key: value}
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    out["main"] = mod["main"].with_attr(HINTS_ATTR, json.dumps(hints, sort_keys=True))
    return out


def blockable_conv(value) -> bool:
    """A conv2d in NCHW/OIHW (grouped or not) on a variable, with a constant weight: one the
    conv layout pass may block (and a conv hint may name)."""
    if op_name(value) != "relax.nn.conv2d":
        return False
    attrs = value.attrs
    return (str(attrs.data_layout) == "NCHW" and str(attrs.kernel_layout) == "OIHW"
            and str(attrs.out_layout or "NCHW") == "NCHW" and is_var(value.args[0])
            and const_value(value.args[1]) is not None)


class _ConvLayoutHint(Rule):
    """Hint one conv's layout (`value`) to the conv layout pass; a conv takes one hint."""

    value = ""

    def matches(self, mod) -> list[Match]:
        graph, hints = Graph(mod), node_hints(mod)
        return [Match(self.name, (b.var.name,), self.value) for b in graph.bindings
                if blockable_conv(b.value) and CONV_LAYOUT not in hints.get(b.var.name, {})]

    def apply(self, mod, match: Match):
        return with_hint(mod, match.vars[0], CONV_LAYOUT, self.value)


class KeepConvNCHW(_ConvLayoutHint):
    """A conv the blocked layout pass leaves in NCHW."""

    name = "conv_keep_nchw"
    doc = "keep one 2-D conv in NCHW where the conv layout pass blocks the others"
    value = "nchw"


class HalveConvBlock(_ConvLayoutHint):
    """A conv the blocked layout pass blocks in half the lanes it would give it."""

    name = "conv_half_block"
    doc = "block one 2-D conv's channels in half the lanes the conv layout pass would take"
    value = "half"


class FenceFusion(Rule):
    """One op that reads a conv or matmul computed alone: the anchor's fused group ends
    before it, and the ops after it start a group of their own."""

    name = "fusion_fence"
    doc = "compute one op after a conv or matmul outside any fused group"

    def matches(self, mod) -> list[Match]:
        from tvm import relax

        graph, hints = Graph(mod), node_hints(mod)
        found = []
        for binding in graph.bindings:
            name, value = op_name(binding.value), binding.value
            if (not name or name in ANCHORS or name == "relax.call_tir"
                    or FENCE in hints.get(binding.var.name, {})):
                continue
            read = [graph.by_name.get(a.name) for a in value.args if isinstance(a, relax.Var)]
            if any(b is not None and op_name(b.value) in ANCHORS for b in read):
                found.append(Match(self.name, (binding.var.name,), name.removeprefix("relax.")))
        return found

    def apply(self, mod, match: Match):
        return with_hint(mod, match.vars[0], FENCE, True)


def with_fences(mod):
    """`mod` with each fenced node (or its blocked twin, which the conv layout pass binds in its
    place) computed by an opaque PrimFunc of its legalised op; `mod` itself where nothing is
    fenced or every fence is already applied. An op that does not legalise to one PrimFunc's
    call stays as it is."""
    import tvm
    from tvm import relax

    fenced = {name for name, hint in node_hints(mod).items() if hint.get(FENCE)}
    bindings = {b.var.name: b.value for block in mod["main"].body.blocks
                for b in block.bindings}
    names = set()
    for name in fenced:
        for candidate in (name + BLOCKED_SUFFIX, name):
            if op_name(bindings.get(candidate)) not in ("", "relax.call_tir"):
                names.add(candidate)
                break
    if not names:
        return mod

    @relax.expr_functor.mutator
    class Fencer(relax.PyExprMutator):
        def visit_var_binding_(self, binding):
            value = binding.value
            legalize = (tvm.ir.Op.get(value.op.name).get_attr("FLegalize")
                        if binding.var.name in names else None)
            if legalize is None:
                super().visit_var_binding_(binding)
                return
            call = self.builder_.normalize(legalize(self.builder_, self.visit_expr(value)))
            if op_name(call) != "relax.call_tir":
                super().visit_var_binding_(binding)
                return
            # a copy of its own, so that a PrimFunc other calls share stays fusable for them
            callee = call.args[0]
            opaque = self.builder_.add_func(
                self.builder_.get()[callee].with_attr("op_pattern", OPAQUE), callee.name_hint)
            call = relax.Call(call.op, [opaque, *call.args[1:]], call.attrs, call.ty_args)
            self.builder_.emit_normalized(
                relax.VarBinding(binding.var, self.builder_.normalize(call)))

    fencer = Fencer(mod)
    main = fencer.visit_expr(mod["main"])
    out = fencer.builder_.get()
    out["main"] = main
    return relax.transform.DeadCodeElimination(["main"])(out)
