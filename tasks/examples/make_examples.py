"""Generate small ONNX example models (MLP, CNN, transformer block) for harl.

Usage: python tasks/examples/make_examples.py [--out-dir DIR]

Weights are random normal with scale 1/sqrt(fan_in) from a fixed seed, so
re-running the script reproduces the files byte-for-byte.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
SEED = 0


class GraphBuilder:
    """Accumulates nodes and initializers for one ONNX graph."""

    def __init__(self, seed: int = SEED) -> None:
        """Create an empty builder with its own seeded generator."""
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, prefix: str) -> str:
        """Return a fresh unique tensor name."""
        self._count += 1
        return f"{prefix}_{self._count}"

    def const(self, name: str, value: np.ndarray) -> str:
        """Register an initializer and return its name."""
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], fan_in: int) -> str:
        """Register a random normal float32 weight scaled by 1/sqrt(fan_in)."""
        scale = 1.0 / math.sqrt(fan_in)
        value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const(name, value)

    def op(
        self, op_type: str, inputs: list[str], out: str | None = None, **attrs
    ) -> str:
        """Append a node and return the name of its (single) output."""
        out = out or self._name(op_type.lower())
        self.nodes.append(
            helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs)
        )
        return out

    def linear(
        self, x: str, prefix: str, n_in: int, n_out: int, out: str | None = None
    ) -> str:
        """Append MatMul + Add with a [n_in, n_out] weight and [n_out] bias."""
        w = self.weight(f"{prefix}.weight", (n_in, n_out), n_in)
        b = self.weight(f"{prefix}.bias", (n_out,), n_in)
        return self.op("Add", [self.op("MatMul", [x, w]), b], out)

    def layer_norm(self, x: str, prefix: str, dim: int) -> str:
        """Append LayerNormalization over the last axis with unit scale, zero bias."""
        scale = self.const(f"{prefix}.weight", np.ones(dim, dtype=np.float32))
        bias = self.const(f"{prefix}.bias", np.zeros(dim, dtype=np.float32))
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)

    def model(
        self, name: str, in_shape: list[int], out_shape: list[int]
    ) -> onnx.ModelProto:
        """Wrap the graph into a model with input "input" and output "output"."""
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, in_shape)],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)],
            initializer=self.inits,
        )
        model = helper.make_model(
            graph,
            producer_name="harl-examples",
            opset_imports=[helper.make_opsetid("", OPSET)],
        )
        model.ir_version = IR_VERSION
        return model


def make_mlp() -> onnx.ModelProto:
    """MLP 256 -> 512 -> 128 -> 10 with ReLU activations."""
    g = GraphBuilder()
    h = g.op("Relu", [g.linear("input", "fc1", 256, 512)])
    h = g.op("Relu", [g.linear(h, "fc2", 512, 128)])
    g.linear(h, "fc3", 128, 10, out="output")
    return g.model("mlp", [1, 256], [1, 10])


def make_cnn() -> onnx.ModelProto:
    """Two-conv CNN on [1, 3, 32, 32] followed by global pooling and a 10-way Gemm."""
    g = GraphBuilder()
    w1 = g.weight("conv1.weight", (16, 3, 3, 3), 3 * 9)
    b1 = g.weight("conv1.bias", (16,), 3 * 9)
    h = g.op("Conv", ["input", w1, b1], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    h = g.op("Relu", [h])
    w2 = g.weight("conv2.weight", (32, 16, 3, 3), 16 * 9)
    b2 = g.weight("conv2.bias", (32,), 16 * 9)
    h = g.op(
        "Conv", [h, w2, b2], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]
    )
    h = g.op("Relu", [h])
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1)
    wf = g.weight("fc.weight", (10, 32), 32)
    bf = g.weight("fc.bias", (10,), 32)
    g.op("Gemm", [h, wf, bf], out="output", transB=1)
    return g.model("cnn", [1, 3, 32, 32], [1, 10])


def _split_heads(g: GraphBuilder, x: str, shape: str, perm: list[int]) -> str:
    """Reshape [B, S, H*D] -> [B, S, H, D] and transpose with perm."""
    return g.op("Transpose", [g.op("Reshape", [x, shape])], perm=perm)


def _attention(g: GraphBuilder, x: str, seq: int, hidden: int, heads: int) -> str:
    """Multi-head self-attention on [1, seq, hidden]; returns the projected output."""
    head_dim = hidden // heads
    split = g.const(
        "attn.split_shape", np.array([1, seq, heads, head_dim], dtype=np.int64)
    )
    merge = g.const("attn.merge_shape", np.array([1, seq, hidden], dtype=np.int64))
    q = _split_heads(g, g.linear(x, "attn.q", hidden, hidden), split, [0, 2, 1, 3])
    k = _split_heads(g, g.linear(x, "attn.k", hidden, hidden), split, [0, 2, 3, 1])
    v = _split_heads(g, g.linear(x, "attn.v", hidden, hidden), split, [0, 2, 1, 3])
    scale = g.const("attn.scale", np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
    scores = g.op("Mul", [g.op("MatMul", [q, k]), scale])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, merge])
    return g.linear(ctx, "attn.out", hidden, hidden)


def _gelu(g: GraphBuilder, x: str) -> str:
    """Exact GELU via Erf: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    sqrt2 = g.const("gelu.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    one = g.const("gelu.one", np.array(1.0, dtype=np.float32))
    half = g.const("gelu.half", np.array(0.5, dtype=np.float32))
    erf = g.op("Erf", [g.op("Div", [x, sqrt2])])
    return g.op("Mul", [g.op("Mul", [x, g.op("Add", [erf, one])]), half])


def make_transformer_block(
    seq: int = 32, hidden: int = 64, heads: int = 2, ffn: int = 128
) -> onnx.ModelProto:
    """Pre-LN transformer encoder block on [1, seq, hidden] with a GELU FFN."""
    g = GraphBuilder()
    attn = _attention(g, g.layer_norm("input", "ln1", hidden), seq, hidden, heads)
    x1 = g.op("Add", ["input", attn])
    h = _gelu(g, g.linear(g.layer_norm(x1, "ln2", hidden), "ffn.fc1", hidden, ffn))
    g.op("Add", [x1, g.linear(h, "ffn.fc2", ffn, hidden)], out="output")
    return g.model("transformer_block", [1, seq, hidden], [1, seq, hidden])


MODELS = {
    "mlp": make_mlp,
    "cnn": make_cnn,
    "transformer_block": make_transformer_block,
}


def run_once(path: Path) -> np.ndarray:
    """Run the model once in onnxruntime on seeded random input; return the output."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    data = np.random.default_rng(SEED).standard_normal(inp.shape).astype(np.float32)
    return sess.run(["output"], {inp.name: data})[0]


def main() -> None:
    """Write, check and smoke-run all example models."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, build in MODELS.items():
        path = args.out_dir / f"{name}.onnx"
        model = build()
        onnx.checker.check_model(model, full_check=True)
        onnx.save(model, path)
        out = run_once(path)
        std = float(out.std())
        if not std > 1e-3:
            raise SystemExit(f"{name}: degenerate output (std={std:.3g})")
        print(f"{name}: {path} output shape={list(out.shape)} std={std:.4f}")


if __name__ == "__main__":
    main()
