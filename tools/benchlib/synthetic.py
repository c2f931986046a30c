"""Random small ONNX models whose tuning records train harl's cost-model prior.

Each model holds a few independent branches (one input, one operator with its bias and
activation, one output each), so every branch becomes a tuning task of its own. Shapes are drawn
from ranges typical of CNNs and transformers. The prior must not have seen the workloads it is
judged on: `operator_keys` reads the convs and matmuls of any ONNX model in the same form as the
draws, and `train_cost_prior.py` refuses a synthetic model that shares one with a model harl is
benchmarked on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

CHANNELS = (8, 16, 24, 32, 40, 48, 80, 96, 112, 160, 192, 256, 320)
SPATIAL = (7, 10, 14, 17, 20, 28, 35, 40, 56, 80, 112)
DEPTHWISE_CHANNELS = (32, 72, 96, 144, 240, 384, 576)
ROWS = (1, 4, 16, 49, 64, 100, 128, 196, 256)
FEATURES = (64, 96, 192, 320, 384, 576, 768, 1000, 1280)
HEAD_DIM = (16, 32, 48, 64, 80)
SEQUENCE = (16, 49, 64, 100, 128, 196)
FLOP_RANGE = (1e6, 6e8)
"""the draws of the main models; others are redrawn: a trial of a bigger kernel costs seconds on
2 cores"""
SMALL_FLOP_RANGE = (1e5, 1e6)
"""the draws of the small models. Mixed with big ones, such a task mostly keeps its nest and gets
no trials; in models of their own they get the trials, and the prior learns where serial
schedules and the thread pool's wake-up decide"""


@dataclass(frozen=True)
class Branch:
    """One operator of a synthetic model, its ONNX nodes and tensors."""

    key: tuple
    flop: float


def _conv(rng: np.random.Generator) -> tuple[tuple, float]:
    c_in, c_out = (int(rng.choice(CHANNELS)) for _ in range(2))
    if rng.uniform() < 0.15:
        c_in = 3  # a network's first layer
    size, kernel = int(rng.choice(SPATIAL)), int(rng.choice((1, 1, 3, 3, 3, 5, 7)))
    stride = int(rng.choice((1, 1, 1, 2)))
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    return ("conv", c_in, c_out, size, kernel, stride, 1), 2.0 * c_in * c_out * kernel**2 * out**2


def _depthwise(rng: np.random.Generator) -> tuple[tuple, float]:
    channels, size = int(rng.choice(DEPTHWISE_CHANNELS)), int(rng.choice(SPATIAL))
    kernel, stride = int(rng.choice((3, 3, 5))), int(rng.choice((1, 2)))
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    return (("conv", channels, channels, size, kernel, stride, channels),
            2.0 * channels * kernel**2 * out**2)


def _dense(rng: np.random.Generator) -> tuple[tuple, float]:
    rows, k, n = int(rng.choice(ROWS)), int(rng.choice(FEATURES)), int(rng.choice(FEATURES))
    return ("matmul", rows, k, n), 2.0 * rows * k * n


def _batched(rng: np.random.Generator) -> tuple[tuple, float]:
    batch, seq, dim = int(rng.choice((2, 4, 8, 12))), int(rng.choice(SEQUENCE)), int(
        rng.choice(HEAD_DIM))
    if rng.uniform() < 0.5:  # scores: Q K^T
        return ("bmm", batch, seq, dim, seq), 2.0 * batch * seq * dim * seq
    return ("bmm", batch, seq, seq, dim), 2.0 * batch * seq * seq * dim


DRAWS = ((_conv, 0.45), (_depthwise, 0.15), (_dense, 0.25), (_batched, 0.15))


def draw_branches(rng: np.random.Generator, count: int,
                  flop_range: tuple[float, float] = FLOP_RANGE) -> list[Branch]:
    """`count` distinct operators, each of FLOPs within `flop_range`."""
    makers, weights = zip(*DRAWS, strict=True)
    branches: list[Branch] = []
    while len(branches) < count:
        key, flop = makers[rng.choice(len(makers), p=np.asarray(weights))](rng)
        repeated = any(b.key == key for b in branches)
        if repeated or not flop_range[0] <= flop <= flop_range[1]:
            continue
        branches.append(Branch(key, flop))
    return branches


def _nodes(index: int, key: tuple, rng: np.random.Generator):
    """ONNX nodes, input, output and initializers of one branch."""
    from onnx import TensorProto, helper, numpy_helper

    x, y = f"x{index}", f"y{index}"
    weight = lambda name, shape: numpy_helper.from_array(  # noqa: E731
        rng.uniform(-0.1, 0.1, shape).astype(np.float32), name)
    if key[0] == "conv":
        _, c_in, c_out, size, kernel, stride, groups = key
        w, b, z = f"w{index}", f"b{index}", f"z{index}"
        pad = kernel // 2
        nodes = [helper.make_node("Conv", [x, w, b], [z], kernel_shape=[kernel, kernel],
                                  strides=[stride, stride], pads=[pad] * 4, group=groups),
                 helper.make_node("Relu", [z], [y])]
        inits = [weight(w, (c_out, c_in // groups, kernel, kernel)), weight(b, (c_out,))]
        shape = [1, c_in, size, size]
    elif key[0] == "matmul":
        _, rows, k, n = key
        w, b, z = f"w{index}", f"b{index}", f"z{index}"
        nodes = [helper.make_node("MatMul", [x, w], [z]), helper.make_node("Add", [z, b], [y])]
        inits = [weight(w, (k, n)), weight(b, (n,))]
        shape = [rows, k]
    else:
        _, batch, m, k, n = key
        w = f"w{index}"
        nodes = [helper.make_node("MatMul", [x, w], [y])]
        inits = [weight(w, (batch, k, n))]
        shape = [batch, m, k]
    value = helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)
    out = helper.make_tensor_value_info(y, TensorProto.FLOAT, None)
    return nodes, value, out, inits


def write_model(path: Path, branches: list[Branch], seed: int) -> Path:
    """An ONNX model with one independent branch per operator."""
    import onnx
    from onnx import helper

    rng = np.random.default_rng(seed)
    nodes, inputs, outputs, inits = [], [], [], []
    for index, branch in enumerate(branches):
        n, x, y, w = _nodes(index, branch.key, rng)
        nodes += n
        inputs.append(x)
        outputs.append(y)
        inits += w
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def synthetic_models(folder: Path, count: int, branches: int = 3, seed: int = 0,
                     flop_range: tuple[float, float] = FLOP_RANGE,
                     name: str = "synthetic") -> list[Path]:
    """`count` models of `branches` operators each, the same for the same arguments."""
    rng = np.random.default_rng(seed)
    return [write_model(folder / f"{name}{i:02d}.onnx", draw_branches(rng, branches, flop_range),
                        seed * 1000 + i) for i in range(count)]


def _shapes(graph) -> dict[str, list[int]]:
    shapes = {init.name: list(init.dims) for init in graph.initializer}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        shapes.setdefault(value.name, [d.dim_value for d in dims])
    return shapes


def operator_keys(path: Path) -> set[tuple]:
    """The convs and matmuls of an ONNX model as `draw_branches` keys them (padding, bias and
    activation aside; leading dims of a matmul folded into its rows or batch)."""
    import onnx
    from onnx import helper

    graph = onnx.shape_inference.infer_shapes(onnx.load(str(path))).graph
    shapes = _shapes(graph)
    keys = set()
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        a, b = (shapes.get(name, []) for name in (list(node.input) + ["", ""])[:2])
        if node.op_type == "Conv" and len(a) == 4 and len(b) == 4:
            stride = list(attrs.get("strides", [1]))[0]
            keys.add(("conv", a[1], b[0], a[2], b[2], stride, attrs.get("group", 1)))
        elif node.op_type in ("MatMul", "Gemm") and len(a) >= 2 and len(b) >= 2:
            if attrs.get("transA"):
                a = a[::-1]
            if attrs.get("transB"):
                b = b[::-1]
            if len(b) == 2:
                keys.add(("matmul", int(np.prod(a[:-1])), a[-1], b[-1]))
            else:
                keys.add(("bmm", int(np.prod(a[:-2])), a[-2], a[-1], b[-1]))
    return keys
