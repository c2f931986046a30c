"""The rule interface of the graph level, and the view of a Relax graph that rules read.

A rule is a semantics-preserving rewrite of the dataflow graph of a Relax module's `main`.
`matches` lists every place where it applies (its conditions, such as constant weights or
equal shapes, are checked there), in program order; `apply` rewrites at exactly one of them:
one action of a search. A match names the bound variables it rewrites, so it stays valid
for the module it was found in and is recognised again after unrelated rewrites.

Rules read bindings (with `tvm.relax.dpl` patterns where one says it best, matched through
the function's variable bindings) and write their replacement with `rewrite_vars`: new
values for named variables, new bindings emitted through Relax's own BlockBuilder, dead
bindings dropped by `remove_all_unused`. Where TVM has the rewrite as a pass
(FuseTransposeMatmul, ConvertLayout), the rule runs that pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Match:
    """One place where a rule applies: the rule and the variables it rewrites, in order."""

    rule: str
    vars: tuple[str, ...]
    """names of the bound variables whose values the rewrite replaces (the first one anchors
    it)"""
    note: str = ""
    """what is rewritten there, for people (shapes, kernel sizes)"""

    def __str__(self) -> str:
        where = ", ".join(self.vars)
        return f"{self.rule}@{where}" + (f" ({self.note})" if self.note else "")


class Rule(ABC):
    """A rewrite of a Relax dataflow graph that can be applied at one chosen match."""

    name: str = ""
    """short unique name (the registry's key)"""
    doc: str = ""
    """what the rewrite does, in one line"""

    @abstractmethod
    def matches(self, mod) -> list[Match]:
        """Every place in `mod`'s main function where the rule applies, in program order."""

    @abstractmethod
    def apply(self, mod, match: Match):
        """`mod` rewritten at `match` (one of `self.matches(mod)`); `mod` is left unchanged."""

    def apply_all(self, mod, *, limit: int = 1000):
        """`mod` with the rule applied at its first match until none is left (at most `limit`
        times)."""
        for _ in range(limit):
            found = self.matches(mod)
            if not found:
                break
            mod = self.apply(mod, found[0])
        return mod


class Graph:
    """The bindings of a module's main function, with what rules ask of them: the value bound
    to a variable, how often each variable is used, and whether a value is a constant."""

    def __init__(self, mod):
        from tvm import relax

        self.mod = mod
        self.func = mod["main"]
        self.bindings = [b for block in self.func.body.blocks for b in block.bindings
                         if isinstance(block, relax.DataflowBlock)]
        self.var2val = relax.analysis.get_var2val(self.func)
        self.by_name = {b.var.name: b for b in self.bindings}
        self.uses: dict[str, int] = {}
        values = [b.value for b in self.bindings] + [self.func.body.body]
        for block in self.func.body.blocks:
            if not isinstance(block, relax.DataflowBlock):
                values += [b.value for b in block.bindings]
        for value in values:
            for var in relax.analysis.free_vars(value):
                self.uses[var.name] = self.uses.get(var.name, 0) + 1

    def match(self, pattern, binding) -> dict | None:
        """The pattern's sub-expressions in `binding`'s value, or None if it does not match."""
        return pattern.extract_matched_expr(binding.value, self.var2val)

    def users(self, name: str) -> list:
        """The bindings whose values use the variable `name`, in program order."""
        from tvm import relax

        return [b for b in self.bindings
                if any(v.name == name for v in relax.analysis.free_vars(b.value))]

    def sole_user(self, name: str):
        """The one binding that uses `name`, if it is used exactly once (not as an output)."""
        users = self.users(name)
        if self.uses.get(name, 0) == 1 and len(users) == 1:
            return users[0]
        return None


def const_value(expr) -> np.ndarray | None:
    """A Relax constant's value as numpy, or None when `expr` is not a constant."""
    import tvm

    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) else None


def var_and_const(call) -> tuple[object, np.ndarray | None]:
    """(the variable, the constant's value) of a binary call on one of each, in either order;
    (None, None) otherwise."""
    args = getattr(call, "args", ())
    if len(args) == 2:
        for a, b in (args, args[::-1]):
            value = const_value(b)
            if is_var(a) and value is not None:
                return a, value
    return None, None


def op_name(expr) -> str:
    """The name of the Relax op `expr` calls ("relax.add"); "" for anything else (a call_tir's
    is "relax.call_tir")."""
    import tvm

    op = getattr(expr, "op", None)
    return op.name if isinstance(op, tvm.ir.Op) else ""


def is_var(expr) -> bool:
    """Whether `expr` is a Relax variable."""
    from tvm import relax

    return isinstance(expr, relax.Var)


def shape_of(expr) -> tuple[int, ...]:
    """The static shape of a Relax tensor expression."""
    return tuple(int(d) for d in expr.ty.shape.values)


def const(value: np.ndarray, dtype: str):
    """A Relax constant holding `value` as `dtype`."""
    from tvm import relax

    return relax.const(np.ascontiguousarray(value, dtype=dtype), dtype)


def rewrite_vars(mod, edits: dict[str, Callable[[object], object]]):
    """`mod` with the bound variables named in `edits` given new values.

    Each edit takes the BlockBuilder, may emit new bindings through it (they land right before
    the variable's own binding), and returns the variable's new value, which must have the same
    type. Bindings left unused afterwards are removed, and variables given a name already
    taken are renamed apart.
    """
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Rewriter(PyExprMutator):
        def visit_var_binding_(self, binding):
            edit = edits.get(binding.var.name)
            if edit is None:
                super().visit_var_binding_(binding)
                return
            value = self.builder_.normalize(edit(self.builder_))
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))

    func = _Rewriter(mod).visit_expr(mod["main"])
    func = relax.analysis.remove_all_unused(func)
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    out["main"] = func
    return unique_names(relax.transform.Normalize()(out))


def unique_names(mod):
    """`mod` with every bound variable of its main function named once (a pass such as
    ConvertLayout may reuse names; matches name the variables they rewrite)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    seen: set[str] = set()

    @mutator
    class _Renamer(PyExprMutator):
        def _fresh(self, var, make):
            name = var.name
            if name in seen:
                name = next(f"{var.name}_{k}" for k in range(1, 1 << 30)
                            if f"{var.name}_{k}" not in seen)
                var = make(name, var.ty)
            seen.add(name)
            return var

        def visit_var_def_(self, var):
            return self._fresh(var, relax.Var)

        def visit_dataflow_var_def_(self, var):
            return self._fresh(var, relax.DataflowVar)

    names = [b.var.name for block in mod["main"].body.blocks for b in block.bindings]
    if len(names) == len(set(names)):
        return mod
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    out["main"] = _Renamer(mod).visit_expr(mod["main"])
    return out

