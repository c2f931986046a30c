"""Convs in a blocked channel layout (NCHW{b}c, weights OIHW{b}i{b}o), as onnxruntime's CPU
convs and TVM's x86 conv schedules run them: b channels, one vector of the target, sit
innermost, so a schedule reads a conv's weights and writes its outputs as whole vectors.

The layout is carried from conv to conv through elementwise ops, pools, channel concats and
per-channel constants, and transformed back only where an op needs NCHW. TVM 0.27 cannot
legalise a blocked conv2d, and its ConvertLayout fails on a pool after one, so harl places the
layout itself and writes each blocked conv as a `call_tir` of conv2d_nchwc: the rewritten graph
is plain Relax and TIR, which plain TVM builds (tools/build_with_tvm.py reads the work dir's
model_rewritten.json)."""

from __future__ import annotations

from harl.graph.rule import Graph, Match, Rule, const, const_value, op_name, shape_of, unique_names
from harl.graph.rules.conv import plain_conv
from harl.graph.rules.hints import BLOCKED_SUFFIX, CONV_LAYOUT, blockable_conv, node_hints
from harl.graph.rules.nchwc_compute import (
    block_map,
    blocked_depthwise_weight,
    blocked_weight,
    conv2d_nchwc,
    depthwise_conv2d_nchwc,
    per_channel,
    unblock_map,
)

LAYOUTS = ("imported", "nchwc")
"""`[graph] conv_layout` values: the imported graph's layouts, or blocked channels"""

UNARY = frozenset({"relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.nn.silu",
                   "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.exp", "relax.negative",
                   "relax.sqrt", "relax.rsqrt", "relax.abs", "relax.erf"})
"""elementwise ops of one tensor, computed in the blocked layout as they are"""
BINARY = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.divide",
                    "relax.maximum", "relax.minimum", "relax.power"})
"""elementwise ops of two tensors, computed blocked where the other one is blocked alike, a
per-channel constant or a scalar"""
POOLS = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d"})


def channel_block(target) -> int | None:
    """Float32 lanes of `target`'s widest vectors (16 with AVX-512, 8 with AVX2, 4 with SSE2 or
    NEON); None for a target that is not a CPU with vectors (a GPU keeps its layouts)."""
    from tvm.target.codegen import target_has_features

    if target.kind.name != "llvm":
        return None
    for feature, lanes in (("avx512f", 16), ("avx2", 8), ("avx", 8), ("sse2", 4), ("neon", 4)):
        try:
            if target_has_features(feature, target):
                return lanes
        except Exception:  # noqa: BLE001,S112  (a feature LLVM lacks for this architecture)
            continue
    return None


MIN_LANES = 4
"""the narrowest block a conv's output channels are cut into (a 128-bit vector of float32)"""


def output_lanes(channels: int, block: int) -> int | None:
    """The block of a conv's `channels` outputs: `block` where it divides them, else the widest
    half, quarter, ... of it (down to MIN_LANES) that does (24 or 1000 channels with 16 lanes:
    8), else None (the conv stays in NCHW)."""
    lanes = block
    while lanes >= MIN_LANES:
        if channels % lanes == 0:
            return lanes
        lanes //= 2
    return None


def to_nchwc(mod, block: int):
    """`mod` with its NCHW convs of constant weights, ungrouped or depthwise, computed in
    NCHW{lanes}c (module docstring): lanes `block`, or where it does not divide a conv's output
    channels and another conv reads them, the widest fraction of it that does
    (`output_lanes`); a conv at the tail (a classifier) keeps NCHW there. A spatial mean (a
    global average pool) stays blocked too. An ungrouped conv whose input channels `block` does
    not divide (a 3-channel stem) reads them as one block, i.e. in NHWC. A conv's hint
    (harl.graph.rules.hints) keeps it in NCHW or halves its `block`."""
    import tvm
    from tvm import relax

    source = _without_dropout(mod)
    layouts = {name: hint[CONV_LAYOUT] for name, hint in node_hints(mod).items()
               if CONV_LAYOUT in hint}
    out = _with_main_mutated(
        _blocker_class()(source, block, _read_by_convs(source["main"]), layouts), source)
    return unique_names(tvm.transform.Sequential(
        [relax.transform.DeadCodeElimination(["main"]), relax.transform.Normalize()])(out))


def _with_main_mutated(mutator, mod):
    """`mod` with its main rewritten by `mutator` (made on `mod`), unused bindings dropped."""
    from tvm.relax.analysis import remove_all_unused

    main = remove_all_unused(mutator.visit_expr(mod["main"]))
    out = mutator.builder_.get()
    out["main"] = main
    return out


def _without_dropout(mod):
    """`mod` with each inference-time dropout's output replaced by its input (a dropout's
    (output, mask) tuple stops layout passes)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Drop(relax.PyExprMutator):
        def visit_tuple_getitem_(self, op):
            item = super().visit_tuple_getitem_(op)
            source = item.tuple_value
            if isinstance(source, relax.Var):
                source = self.lookup_binding(source)
            if item.index == 0 and op_name(source) == "relax.nn.dropout":
                return source.args[0]
            return item

    return _with_main_mutated(Drop(mod), mod)


CARRIERS = UNARY | BINARY | POOLS | {"relax.concat", "relax.call_tir"}
"""ops a blocked value passes through to the next conv in its layout (call_tir: the importer's
Clip)"""


def _read_by_convs(func) -> set:
    """The variables of `func` whose values a conv reads, directly or through ops that carry
    the blocked layout (CARRIERS, tuples, aliases): a conv whose output is one of them keeps
    its output blocked even where that takes narrower blocks."""
    from tvm import relax

    read = set()
    bindings = [b for block in func.body.blocks for b in block.bindings]
    for binding in reversed(bindings):  # readers before what they read
        value = binding.value
        if op_name(value) == "relax.nn.conv2d":
            read.add(value.args[0])
        elif binding.var in read and (isinstance(value, relax.Tuple | relax.Var)
                                      or op_name(value) in CARRIERS):
            read.update(relax.analysis.free_vars(value))
    return read


def _topi_binary_of(func):
    """relax.op.maximum or minimum where `func` is TOPI's maximum or minimum of a tensor and a
    scalar tensor (how TVM's importer writes Clip), else None."""
    import tvm_ffi
    from tvm import relax, te, topi

    params = list(func.params)
    if len(params) != 3 or getattr(params[1], "shape", None) is None or len(params[1].shape):
        return None
    for relax_op, topi_op in ((relax.op.maximum, topi.maximum), (relax.op.minimum, topi.minimum)):
        x = te.placeholder(params[0].shape, params[0].dtype)
        y = te.placeholder((), params[1].dtype)
        made = te.create_prim_func([x, y, topi_op(x, y)])
        if tvm_ffi.structural_equal(made.body, func.body, map_free_vars=True):
            return relax_op
    return None


def _blocker_class():
    """The mutator behind to_nchwc (made on first use: TVM's decorator needs TVM imported)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Blocker(relax.PyExprMutator):
        """Visits main's bindings in order. `blocked` maps an original variable computed in
        NCHWc to that value; its NCHW value is emitted only where an op needs it (`flat`). A
        function's output is computed blocked and handed out in NCHW."""

        def __init__(self, mod, block: int, read_by_convs: set, layouts: dict) -> None:
            super().__init__(mod)
            self.block = block
            self.read_by_convs = read_by_convs  # see _read_by_convs
            self.layouts = layouts  # a conv's hinted layout by its variable's name
            self.blocked: dict = {}
            self.flat: set = set()
            self.reblocked: dict = {}  # (var, lanes) -> its transform into blocks, made once

        def nchw(self, var) -> None:
            """Emit `var`'s NCHW value from its blocked one, once, and map `var` to it."""
            if var in self.blocked and var not in self.flat:
                lanes = shape_of(self.blocked[var])[4]
                value = self.builder_.emit(relax.op.layout_transform(
                    self.blocked[var], unblock_map(lanes)), name_hint=var.name)
                self.set_var_remap(var, value)
                self.flat.add(var)

        def in_blocks(self, var, lanes: int):
            """`var` in NCHW{lanes}c: its blocked value, or a transform of its NCHW one (made
            once, however many ops read it)."""
            found = self.blocked.get(var)
            if found is not None and shape_of(found)[4] == lanes:
                return found
            if (var, lanes) not in self.reblocked:
                self.nchw(var)
                self.reblocked[var, lanes] = self.builder_.emit(relax.op.layout_transform(
                    self.visit_expr(var), block_map(lanes)), name_hint=f"{var.name}_nchwc")
            return self.reblocked[var, lanes]

        def visit_var_binding_(self, binding):
            value = binding.value
            inner = isinstance(binding.var, relax.DataflowVar)  # not an output of the function
            if inner and isinstance(value, relax.Var) and value in self.blocked:  # an alias
                self.blocked[binding.var] = self.blocked[value]
                return
            blocked = (self.blocked_call(value, binding.var) if isinstance(value, relax.Call)
                       else None)
            if blocked is not None:
                twin = self.builder_.emit(blocked, name_hint=binding.var.name + BLOCKED_SUFFIX)
                if inner:
                    self.blocked[binding.var] = twin
                    return
                value = relax.op.layout_transform(twin, unblock_map(shape_of(twin)[4]))
                super().visit_var_binding_(relax.VarBinding(binding.var, value))
                return
            for var in relax.analysis.free_vars(value):
                self.nchw(var)
            super().visit_var_binding_(binding)

        def blocked_call(self, call, var):
            """`call` (bound to `var`) computed on blocked values, or None where it stays in
            NCHW."""
            name, args = op_name(call), list(call.args)
            if name == "relax.nn.conv2d":
                hint = self.layouts.get(var.name)
                block = self.block // 2 if hint == "half" else self.block
                return (None if hint == "nchw"
                        else self.conv(call, block, narrow=var in self.read_by_convs))
            if name in UNARY and args and args[0] in self.blocked:
                return relax.Call(call.op, [self.blocked[args[0]], *args[1:]], call.attrs)
            if name in BINARY and len(args) == 2:
                return self.binary(call, args)
            if (name in POOLS and args[0] in self.blocked
                    and str(call.attrs.layout) == "NCHW"):
                return self.pool(call, self.blocked[args[0]])
            if name == "relax.concat" and int(call.attrs.axis) == 1:
                return self.concat(call)
            if (name == "relax.mean" and args[0] in self.blocked and call.attrs.keepdims
                    and sorted(int(a) for a in call.attrs.axis) == [2, 3]):
                return relax.op.mean(self.blocked[args[0]], axis=[2, 3], keepdims=True)
            if name == "relax.call_tir":
                return self.clip_bound(call)
            return None

        def clip_bound(self, call):
            """TVM's ONNX importer writes Clip (ReLU6) as call_tir of TOPI's maximum and
            minimum against a scalar: the same op on the blocked value."""
            callee, (args, *_) = call.args[0], call.args[1:]
            fields = list(getattr(args, "fields", ()))
            if len(fields) != 2 or fields[0] not in self.blocked:
                return None
            bound = const_value(fields[1])
            if bound is None or bound.ndim != 0:
                return None
            op = _topi_binary_of(self.builder_.get()[callee])
            return None if op is None else op(self.blocked[fields[0]], fields[1])

        def conv(self, call, block: int, narrow: bool):
            """A conv in blocks of `block` lanes, or (`narrow`) the widest fraction of it that
            divides its output channels; None where neither does."""
            if not blockable_conv(call):
                return None
            attrs, weight = call.attrs, const_value(call.args[1])
            out_lanes = output_lanes(weight.shape[0], block)
            if out_lanes is None or (out_lanes != block and not narrow):
                return None
            ints = [[int(v) for v in getattr(attrs, key)]
                    for key in ("strides", "padding", "dilation")]
            out_dtype, groups = str(call.ty.dtype), int(attrs.groups)
            if groups == weight.shape[0] == shape_of(call.args[0])[1] and weight.shape[1] == 1:
                data = self.in_blocks(call.args[0], out_lanes)
                kernel = const(blocked_depthwise_weight(weight, out_lanes), str(weight.dtype))
                return self.builder_.call_te(depthwise_conv2d_nchwc, data, kernel, *ints,
                                             out_dtype, primfunc_name_hint="dwconv2d_nchwc")
            if groups != 1:
                return None
            in_c = weight.shape[1]
            source = self.blocked.get(call.args[0])  # its lanes divide in_c: they blocked it
            in_lanes = (shape_of(source)[4] if source is not None
                        else block if in_c % block == 0 else in_c)
            data = self.in_blocks(call.args[0], in_lanes)
            kernel = const(blocked_weight(weight, in_lanes, out_lanes), str(weight.dtype))
            return self.builder_.call_te(conv2d_nchwc, data, kernel, *ints, out_dtype,
                                         primfunc_name_hint="conv2d_nchwc")

        def binary(self, call, args):
            blocked = [self.blocked.get(a) for a in args]
            first = next((b for b in blocked if b is not None), None)
            if first is None:
                return None
            lanes = shape_of(first)[4]
            shape = shape_of(args[blocked.index(first)])
            new = []
            for arg, value in zip(args, blocked, strict=True):
                constant = const_value(arg)
                if value is not None and shape_of(value)[4] == lanes:
                    new.append(value)
                elif constant is not None:
                    packed = per_channel(constant, shape[1], lanes)
                    if packed is None:
                        return None
                    new.append(const(packed, str(constant.dtype)))
                elif isinstance(arg, relax.Var) and shape_of(arg) == shape:
                    new.append(self.in_blocks(arg, lanes))
                else:
                    return None
            return relax.Call(call.op, new, call.attrs)

        def pool(self, call, value):
            attrs, name = call.attrs, op_name(call)
            layout = f"NCHW{shape_of(value)[4]}c"
            common = {key: [int(v) for v in getattr(attrs, key)]
                      for key in ("pool_size", "strides", "padding", "dilation")}
            if name == "relax.nn.max_pool2d":
                return relax.op.nn.max_pool2d(value, **common, ceil_mode=bool(attrs.ceil_mode),
                                              layout=layout, out_layout=layout)
            return relax.op.nn.avg_pool2d(value, **common, ceil_mode=bool(attrs.ceil_mode),
                                          count_include_pad=bool(attrs.count_include_pad),
                                          layout=layout, out_layout=layout)

        def concat(self, call):
            parts = call.args[0]
            if isinstance(parts, relax.Var):
                parts = self.lookup_binding(parts)
            if not isinstance(parts, relax.Tuple):
                return None
            fields = list(parts.fields)
            lanes = {shape_of(self.blocked[f])[4] for f in fields if f in self.blocked}
            if len(lanes) != 1:
                return None
            (lane,) = lanes
            if not all(isinstance(f, relax.Var) and len(shape_of(f)) == 4
                       and shape_of(f)[1] % lane == 0 for f in fields):
                return None
            return relax.op.concat([self.in_blocks(f, lane) for f in fields], axis=1)

    return Blocker


class ConvertLayoutNCHWc(Rule):
    """Every NCHW conv2d of the graph in NCHW{block}c (module docstring)."""

    name = "convert_layout_nchwc"
    doc = ("compute the whole graph's 2-D convs in a blocked channel layout (NCHW{b}c, b the "
           "target's float32 vector lanes)")

    def __init__(self, block: int = 16) -> None:
        self.block = block

    def matches(self, mod) -> list[Match]:
        """One match where the graph has an ungrouped NCHW conv with constant weights."""
        graph = Graph(mod)
        convs = tuple(b.var.name for b in graph.bindings if plain_conv(graph, b))
        return ([Match(self.name, convs, f"{len(convs)} convs, {self.block} channels a block")]
                if convs else [])

    def apply(self, mod, match: Match):
        del match  # one match: the whole graph
        return to_nchwc(mod, self.block)
