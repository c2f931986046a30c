"""Merging parallel branches that share an input into one wider operator and a split.

Attention's Q/K/V projections, a gated MLP's gate and up projections, and the 1x1 and 3x3
convs of an Inception or SqueezeNet module each read the same tensor with their own constant
weights. Concatenating the weights along the output axis (in numpy: harl imports weights as
constants, so the merged weight is a constant too and no concat runs at inference) gives one
operator whose output a split cuts back into the branches. Each branch's bias add and ReLU
come along when every branch has them as its only user, so that they fuse with the merged
operator (TVM's CombineParallelMatmul does the same for matmuls, but only on weights that
are function parameters and on every group at once; a rule must apply at one chosen group).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harl.graph.rule import Graph, const, const_value, rewrite_vars, shape_of


@dataclass(frozen=True)
class Branch:
    """One operator reading the shared input, and the bias add and ReLU that follow it."""

    op: str
    """the operator's bound variable"""
    root: str
    """the branch's last variable (the operator, its bias add, or its ReLU)"""
    bias: np.ndarray | None
    """the bias, flattened to the output channels"""
    relu: bool
    call: object
    """the operator's relax.Call"""


def follow(graph: Graph, op_binding, *, channels: int, axis: int) -> Branch:
    """The branch starting at `op_binding`: its bias add by a constant broadcast along `axis`
    (of `channels` values), then its ReLU, each taken when it is the only user of the one
    before it."""
    from tvm import relax

    name, root, bias, relu = op_binding.var.name, op_binding.var.name, None, False
    user = graph.sole_user(root)
    if user is not None and _is_op(user.value, "relax.add"):
        other = [a for a in user.value.args
                 if not (isinstance(a, relax.Var) and a.name == root)]
        value = const_value(other[0]) if len(other) == 1 else None
        rank = len(shape_of(op_binding.var))
        if value is not None and _along(value.shape, rank, axis, channels):
            bias, root = value.reshape(-1), user.var.name
            user = graph.sole_user(root)
    if user is not None and _is_op(user.value, "relax.nn.relu"):
        relu, root = True, user.var.name
    return Branch(name, root, bias, relu, op_binding.value)


def uniform(branches: list[Branch], graph: Graph) -> list[Branch]:
    """The branches with ReLU kept only if all of them have one (else each stops before it)."""
    if all(b.relu for b in branches):
        return branches
    out = []
    for b in branches:
        if b.relu:
            relu_input = graph.by_name[b.root].value.args[0].name
            b = Branch(b.op, relu_input, b.bias, False, b.call)
        out.append(b)
    return out


def merge(mod, branches: list[Branch], *, weights: list[np.ndarray], make_op, axis: int):
    """`mod` with `branches` replaced by one operator on the concatenated `weights` (output
    channels along axis 0 of the weight for convs, 1 for matmuls) and a split along the
    output's `axis`. `make_op(weight_const)` builds the merged operator's call."""
    from tvm import relax

    sizes = [_out_channels(b, axis) for b in branches]
    dtype = str(branches[0].call.ty.dtype)
    w_axis = 1 if branches[0].call.op.name == "relax.matmul" else 0
    weight = const(np.concatenate(weights, axis=w_axis), dtype)
    made: dict[str, object] = {}

    def emit_merged(bb):
        first = branches[0].op
        out = bb.emit(make_op(weight), name_hint=f"{first}_merged")
        if any(b.bias is not None for b in branches):
            bias = np.concatenate([b.bias if b.bias is not None else np.zeros(n, dtype)
                                   for b, n in zip(branches, sizes, strict=True)])
            shape = [1] * len(shape_of(out))  # the channels along `axis`, 1 elsewhere
            shape[axis] = bias.size
            out = bb.emit(relax.op.add(out, const(bias.reshape(shape), dtype)),
                          name_hint=f"{first}_bias")
        if all(b.relu for b in branches):
            out = bb.emit(relax.op.nn.relu(out), name_hint=f"{first}_relu")
        made["split"] = bb.emit(
            relax.op.split(out, indices_or_sections=list(np.cumsum(sizes)[:-1]), axis=axis),
            name_hint=f"{first}_split")

    graph = Graph(mod)
    edits = {}
    first_value = graph.by_name[branches[0].op].value

    def edit_first(bb):
        emit_merged(bb)
        if branches[0].root == branches[0].op:
            return relax.TupleGetItem(made["split"], 0)
        return first_value

    edits[branches[0].op] = edit_first
    for i, b in enumerate(branches):
        if i == 0 and b.root == b.op:
            continue
        edits[b.root] = (lambda bb, i=i: relax.TupleGetItem(made["split"], i))
    return rewrite_vars(mod, edits)


def _out_channels(branch: Branch, axis: int) -> int:
    shape = shape_of(branch.call)
    return shape[axis % len(shape)]


def _along(shape, rank: int, axis: int, channels: int) -> bool:
    """Whether a constant of `shape` broadcast against a rank-`rank` tensor varies only along
    `axis` (with `channels` values there)."""
    if int(np.prod(shape)) != channels or len(shape) > rank:
        return False
    full = (1,) * (rank - len(shape)) + tuple(shape)
    return all(d == (channels if i == axis % rank else 1) for i, d in enumerate(full)) \
        or channels == 1


def _is_op(value, name: str) -> bool:
    op = getattr(value, "op", None)
    return getattr(op, "name", None) == name
