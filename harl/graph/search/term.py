"""Relax dataflow graphs as egglog terms, and back.

Every value of a graph becomes one term of a single egglog sort: `Term.leaf(key)` for a
function parameter, a constant or a literal argument (a shape, a global function), and
`Term.op(key, args)` for a call, a tuple or a tuple item. The key names the operator together
with everything that is not a tensor argument (attributes, output types, argument types), so
two equal calls in two graphs get the same term and egglog's hash-consing shares them. A
`TermTable` keeps, per key, what is needed to rebuild the Relax expression and to price it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from egglog import EGraph, Expr, StringLike, Vec

LAUNCH_FLOP = 1e5
"""a call's fixed cost in the local estimate, in FLOP-equivalents (a kernel launch)"""


class Term(Expr):
    """A value of a Relax dataflow graph."""

    @classmethod
    def leaf(cls, key: StringLike) -> Term: ...

    @classmethod
    def op(cls, key: StringLike, args: Vec[Term]) -> Term: ...


@dataclass
class Spec:
    """What a key stands for: its kind ('param', 'const', 'lit', 'global', 'call', 'tuple',
    'item'), the Relax objects needed to rebuild it (for a global: the variable and, as
    `attrs`, its function), and its FLOPs as one task on its own."""

    kind: str
    obj: object = None
    attrs: object = None
    ty_args: tuple = ()
    index: int = 0
    flop: float = 0.0


def _digest(*parts) -> str:
    return hashlib.sha1("|".join(str(p) for p in parts).encode()).hexdigest()[:16]


def _numel(ty) -> float:
    try:
        return float(np.prod([int(d) for d in ty.shape.values]))
    except (AttributeError, TypeError, ValueError):
        return 0.0


def _call_flop(call) -> float:
    """FLOPs of one call: 2*out*K for a matmul, 2*out*(weight/out-channels) for a conv, the
    output size otherwise."""
    out = _numel(call.ty)
    name = getattr(call.op, "name", "")
    try:
        if name == "relax.matmul":
            return 2.0 * out * int(call.args[0].ty.shape.values[-1])
        if name.startswith("relax.nn.conv"):
            weight = [int(d) for d in call.args[1].ty.shape.values]
            return 2.0 * out * float(np.prod(weight)) / weight[0]
    except (AttributeError, TypeError, ValueError, IndexError):
        return out
    return out


@dataclass
class TermTable:
    """Keys to Relax objects, shared by every graph put into one e-graph."""

    specs: dict[str, Spec] = field(default_factory=dict)
    lets: int = 0

    def _leaf(self, key: str, spec: Spec) -> Term:
        self.specs.setdefault(key, spec)
        return Term.leaf(key)

    def _op(self, key: str, spec: Spec, args: list) -> Term:
        self.specs.setdefault(key, spec)
        vec = Vec(*args) if args else Vec[Term].empty()
        return Term.op(key, vec)

    def insert(self, egraph: EGraph, mod) -> tuple[Term, dict[str, Term]]:
        """Add `mod`'s main function to `egraph`, one let-bound term per binding (so shared
        values stay shared); return the term of its output and each bound variable's term."""
        import tvm
        import tvm_ffi
        from tvm import relax

        func = mod["main"]
        params = {p.name for p in func.params}
        refs: dict[str, Term] = {}

        def term(expr) -> Term:
            if isinstance(expr, relax.Var):
                if expr.name in refs:
                    return refs[expr.name]
                if expr.name in params:
                    return self._leaf(f"param:{expr.name}", Spec("param", expr.name))
                raise ValueError(f"unbound variable {expr.name}")
            if isinstance(expr, tvm.ir.expr.Constant):
                value = expr.value.numpy()
                key = "const:" + _digest(value.dtype, value.shape,
                                         hashlib.sha1(value.tobytes()).hexdigest())
                return self._leaf(key, Spec("const", expr))
            if isinstance(expr, relax.Tuple):
                fields = [term(f) for f in expr.fields]
                return self._op(f"tuple:{len(fields)}", Spec("tuple"), fields)
            if isinstance(expr, relax.TupleGetItem):
                return self._op(f"item:{expr.index}", Spec("item", index=expr.index),
                                [term(expr.tuple_value)])
            if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
                args = [term(a) for a in expr.args]
                key = expr.op.name + ":" + _digest(
                    expr.attrs, list(expr.ty_args), expr.ty, [a.ty for a in expr.args])
                return self._op(key, Spec("call", expr.op, expr.attrs, tuple(expr.ty_args),
                                          flop=_call_flop(expr)), args)
            if isinstance(expr, relax.GlobalVar):
                callee = mod[expr]
                key = f"global:{expr.name_hint}:{tvm_ffi.structural_hash(callee)}"
                return self._leaf(key, Spec("global", expr, attrs=callee))
            if isinstance(expr, relax.Call):
                raise ValueError("main calls something other than an operator")
            # shapes, primitive values, strings, data types: literal arguments
            return self._leaf("lit:" + _digest(type(expr).__name__,
                                               tvm_ffi.structural_hash(expr), expr),
                              Spec("lit", expr))

        for block in func.body.blocks:
            if not isinstance(block, relax.DataflowBlock):
                raise ValueError("main has a binding outside a dataflow block")
            for binding in block.bindings:
                if not isinstance(binding, relax.VarBinding):
                    raise ValueError("main has a match-cast binding")
                self.lets += 1
                refs[binding.var.name] = egraph.let(f"v{self.lets}", term(binding.value))
        return term(func.body.body), refs

    def local_cost(self, key: str) -> float:
        """A key's cost as one task on its own, in FLOP-equivalents (leaves, tuples: 0)."""
        spec = self.specs[key]
        return spec.flop + LAUNCH_FLOP if spec.kind == "call" else 0.0

    def rebuild(self, like, root: int, choice: dict[int, tuple[str, tuple[int, ...]]]):
        """The Relax module whose main computes the term chosen from e-class `root`
        (`choice`: e-class -> (key, child e-classes)); other functions, the parameters and
        attributes are those of `like`."""
        import tvm
        from tvm import relax

        func = like["main"]
        params = {p.name: p for p in func.params}
        bb = relax.BlockBuilder()
        done: dict[int, object] = {}
        callees: dict = {}

        def build(cls: int, emit=bb.emit):
            if cls in done:
                return done[cls]
            key, children = choice[cls]
            spec = self.specs[key]
            args = [build(c) for c in children]
            if spec.kind == "param":
                expr = params[spec.obj]
            elif spec.kind in ("const", "lit", "global"):
                expr = spec.obj
                if spec.kind == "global":
                    callees[spec.obj] = spec.attrs
            elif spec.kind == "tuple":
                expr = relax.Tuple(args)
            elif spec.kind == "item":
                expr = emit(relax.TupleGetItem(args[0], spec.index))
            else:
                expr = emit(relax.Call(spec.obj, args, spec.attrs, list(spec.ty_args)))
            done[cls] = expr
            return expr

        with bb.function("main", list(func.params), attrs=dict(func.attrs or {})):
            with bb.dataflow():
                out = build(root, emit=bb.emit_output)
                if self.specs[choice[root][0]].kind not in ("call", "item"):
                    out = bb.emit_output(out)  # a tuple or a leaf is bound as the output
            bb.emit_func_output(out)
        names = {gv.name_hint for gv in callees}
        functions = {gv: f for gv, f in like.functions_items()
                     if gv.name_hint not in names and gv.name_hint != "main"}
        out_mod = tvm.IRModule({**functions, **callees}, attrs=like.attrs)
        out_mod["main"] = bb.get()["main"]
        out_mod = relax.transform.DeadCodeElimination(["main"])(out_mod)
        return relax.transform.Normalize()(out_mod)

