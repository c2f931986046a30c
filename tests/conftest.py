"""Shared fixtures: small ONNX models made on the fly and paths to the bundled examples."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import te, topi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

from harl.database import open_database
from harl.evaluate import CompiledModel, OnnxRuntimeModel, check_outputs, compile_model
from harl.graph.rule import Match, Rule
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "tasks" / "examples"

# As harl.tune does: a TuneContext made here would otherwise import every target's intrinsics
# (a minute and more inside pytest); a GPU test loads its own (tests/test_cuda_build.py).
load_tensor_intrinsics(parse_target("llvm"))


@pytest.fixture(autouse=True)
def private_store(tmp_path_factory, monkeypatch):
    """Each test's runs keep their measurements in a store of their own (harl.store), never the
    user's, so that no test learns from another's runs."""
    monkeypatch.setenv("HARL_STORE", str(tmp_path_factory.mktemp("store")))


def harl_tune(*args, timeout=600) -> subprocess.CompletedProcess:
    """`python -m harl.tune ARGS` in a fresh process, exactly as a user runs it."""
    return subprocess.run([sys.executable, "-m", "harl.tune", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def assert_plain_tvm_rebuilds(model, work_dir, *extra, applied: str | None = None,
                              timeout=300) -> str:
    """`python tools/build_with_tvm.py MODEL WORK_DIR [EXTRA]` exits 0, its build matching
    onnxruntime (and `applied`, as "3/3", tuned functions applied where given; "all": as many
    as the log holds, a count that depends on the CPU's conv layout); its output."""
    tool = subprocess.run([sys.executable, str(ROOT / "tools" / "build_with_tvm.py"), str(model),
                           str(work_dir), *map(str, extra)],
                          capture_output=True, text=True, timeout=timeout)
    assert tool.returncode == 0, tool.stdout + tool.stderr
    assert "outputs match: True" in tool.stdout
    if applied == "all":
        counts = re.search(r"tuned functions applied: (\d+)/(\d+)", tool.stdout)
        assert counts and counts[1] == counts[2], tool.stdout
    elif applied is not None:
        assert f"tuned functions applied: {applied}" in tool.stdout
    return tool.stdout


@pytest.fixture
def harl_messages(caplog):
    """A function that gives harl's messages logged so far in the test (INFO and above)."""
    caplog.set_level(logging.INFO, logger="harl")
    return lambda: [r.getMessage() for r in caplog.records if r.name.startswith("harl")]


TINY_GRAPH_CONFIG = """
[graph]
cost_samples = 0
greedy_max_evals = 20

[graph.eqsat]
iterations = 4
max_children = 6
time_limit_s = 20.0
ilp_time_limit_s = 5.0
ilp_solutions = 1

[graph.rl]
episodes = 2
horizon = 3
max_evals = 12

[graph.rl.ppo]
episodes_per_update = 2

[graph.worldmodel]
max_evals = 10
rounds = 2
real_episodes = 2
dream_episodes = 4
horizon = 3

[graph.worldmodel.model]
epochs = 5

[graph.worldmodel.ppo]
episodes_per_update = 2

[graph.go]
passes = 2
max_evals = 8
finetune_episodes = 2
segment = 8

[graph.go.ppo]
hidden = 16
layers = 2
episodes_per_update = 2

[verify]
timing_seconds = 1.0
latency_repeats = 4
"""
"""small budgets for every graph search and short timings: the graph level's end-to-end tests"""


def tiny_graph_config(directory: Path) -> Path:
    """`TINY_GRAPH_CONFIG` written to `directory`/tiny.toml."""
    path = directory / "tiny.toml"
    path.write_text(TINY_GRAPH_CONFIG)
    return path


def harl_tune_here(*args) -> subprocess.CompletedProcess:
    """The same command run in this process, its exit code, stdout and stderr as a fresh one's
    (harl's own output; not TVM's C++ logs). For tests of what a run does with a model rather
    than of the process: it saves the second import of TVM and torch (8-10 s a run)."""
    from harl.tune import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(map(str, args)))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def matmul_module(n: int = 32):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def op_count(mod, name: str) -> int:
    """How many bindings of `mod`'s main call the Relax op `name`."""
    return sum(1 for block in mod["main"].body.blocks for b in block.bindings
               if getattr(getattr(b.value, "op", None), "name", None) == name)


def global_average_pool():
    """SqueezeNet's `mean` task: a sum over 13x13, then a divide (rfactor sketches)."""
    x = te.placeholder((1, 1000, 13, 13), name="x")
    y = topi.divide(topi.sum(x, axis=[2, 3], keepdims=True), 169.0)
    return tvm.IRModule({"main": te.create_prim_func([x, y])})


def conv2d_module(size: int = 8, channels: int = 4):
    """A padded 3x3 conv2d: its pad block gets a sampled compute location."""
    data = te.placeholder((1, channels, size, size), name="data")
    weight = te.placeholder((channels, channels, 3, 3), name="weight")
    pad = te.compute((1, channels, size + 2, size + 2), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h <= size, w >= 1, w <= size), data[n, c, h - 1, w - 1], 0.0), name="pad")
    rc, rh, rw = (te.reduce_axis((0, e), name=x) for e, x in ((channels, "rc"), (3, "rh"),
                                                              (3, "rw")))
    out = te.compute((1, channels, size, size), lambda n, f, h, w: te.sum(
        pad[n, rc, h + rh, w + rw] * weight[f, rc, rh, rw], axis=[rc, rh, rw]), name="conv")
    return tvm.IRModule({"main": te.create_prim_func([data, weight, out])})


def assert_matches_onnxruntime(relax_mod, model, target, rtol: float, atol: float) -> None:
    """`relax_mod` compiled computes what onnxruntime computes for `model`."""
    compiled = CompiledModel(compile_model(relax_mod, target), target,
                             [spec.name for spec in model.inputs])
    inputs = model.random_inputs(0)
    check = check_outputs(compiled.run(inputs), OnnxRuntimeModel(model, threads=1).run(inputs),
                          list(model.output_names), rtol=rtol, atol=atol)
    assert check.verified, check


def shipped_prior_applies() -> bool:
    """Whether the cost-model prior in harl/data/ applies here (an llvm target on its
    instruction set and TVM), so that a harl run on llvm uses it for tasks in its range."""
    from harl.search.cost_prior import load_cost_prior
    from harl.target import parse_target

    return load_cost_prior(parse_target("llvm")) is not None


def trial_record_lines(work_dir: Path) -> list[str]:
    """The tuning log's lines that record trials: not harl's unscheduled-nest records, which are
    measured outside the budget (the JSON form of harl.naive_nests.is_naive_trace: the root
    block's lookup and nothing else)."""
    path = work_dir / "database_tuning_record.json"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line for line in lines if not _is_naive(json.loads(line)[1][0][0])]


def _is_naive(insts) -> bool:
    return len(insts) == 1 and insts[0][0] == "GetSBlock" and insts[0][2][0] == "root"


def fill_database(work_dir, runs: dict[int, list[list[float]]]):
    """A real JSON database: for each matmul size n, one record per run_secs list."""
    target = parse_target(None)
    database = open_database(work_dir)
    for n, trials in runs.items():
        mod = matmul_module(n)
        context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                                 num_threads=1).clone()
        workload = database.commit_workload(mod)
        space = context.generate_design_space()[0]
        args = ArgInfo.from_prim_func(mod["main"])
        for secs in trials:
            database.commit_tuning_record(ms.database.TuningRecord(
                space.trace, workload, [float(s) for s in secs], target, args))
    return target


def save_model(path: Path, nodes, inputs, outputs, initializers=(), opset: int = 17) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def three_convs(path):
    """Three conv2d tasks of 4.7-9.4 MFLOP: above the size whose unscheduled nest is measured
    before tuning, so a task the budget never reaches has no record at all."""
    rng = np.random.default_rng(0)
    shapes = {"w0": (16, 16, 3, 3), "w1": (32, 16, 3, 3), "w2": (32, 32, 3, 3)}
    weights = [numpy_helper.from_array((0.1 * rng.standard_normal(shape)).astype(np.float32),
                                       name) for name, shape in shapes.items()]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["b", "w2"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])]
    return save_model(path, nodes,
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])],
                      weights)


@pytest.fixture
def tiny_matmul(tmp_path) -> Path:
    """y = relu(x @ W), x: [1, 16], W: [16, 8]."""
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((16, 8)).astype("float32"), "W")
    return save_model(
        tmp_path / "tiny.onnx",
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [weight],
    )


def save_conv_bn_model(path: Path, conv_bias: bool = False, dtype: str = "float32",
                       batch: int | str = 1) -> Path:
    """y = relu(batch_norm(conv3x3(x))), x: [batch, 8, 16, 16], 16 output channels."""
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rng = np.random.default_rng(0)
    channels = 16
    tensors = {
        "W": rng.standard_normal((channels, 8, 3, 3)) / 8,
        "B": rng.standard_normal(channels),
        "scale": rng.uniform(0.5, 1.5, channels),
        "bias": rng.standard_normal(channels),
        "mean": rng.standard_normal(channels),
        "var": rng.uniform(0.5, 2.0, channels),
    }
    if not conv_bias:
        del tensors["B"]
    return save_model(
        path,
        [helper.make_node("Conv", ["x", "W", "B"] if conv_bias else ["x", "W"], ["c"],
                          pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"]),
         helper.make_node("Relu", ["b"], ["y"])],
        [helper.make_tensor_value_info("x", elem_type, [batch, 8, 16, 16])],
        [helper.make_tensor_value_info("y", elem_type, [batch, channels, 16, 16])],
        [numpy_helper.from_array(value.astype(dtype), name)
         for name, value in tensors.items()],
    )


@pytest.fixture
def conv_bn_model(tmp_path) -> Path:
    """A conv without bias, then a batch norm and a relu."""
    return save_conv_bn_model(tmp_path / "conv_bn.onnx")


def int64_tensor(name: str, values) -> TensorProto:
    """An int64 initializer (shapes, indices, axes)."""
    return numpy_helper.from_array(np.array(values, dtype="int64"), name)


def save_shape_computing_model(path: Path, pattern: str = "slice",
                               initializers_as_inputs: bool = False) -> Path:
    """A model that computes a shape in its graph from Shape(x), as exporters write `chunk`,
    `expand_as` or a padding to a multiple, then a relu (over a matmul for "slice").

    - "slice": the first half of x [1, 4, 16] along its last axis, @ W [8, 8]: TVM's importer
      leaves the slice without a shape;
    - "expand": x [2, 1, 4] expanded to [x's batch, 3, 4]: it gets a symbolic shape;
    - "pad": x [1, 8] padded at the end by its width / 4: the importer refuses it.
    With `initializers_as_inputs`, every initializer is also listed as a graph input, as older
    exporters write them.
    """
    ints = int64_tensor
    shape = [helper.make_node("Shape", ["x"], ["shape"])]
    if pattern == "slice":
        nodes = [*shape, helper.make_node("Gather", ["shape", "last"], ["size"]),
                 helper.make_node("Div", ["size", "two"], ["half"]),
                 helper.make_node("Slice", ["x", "zero", "half", "last"], ["h"]),
                 helper.make_node("MatMul", ["h", "W"], ["m"]),
                 helper.make_node("Relu", ["m"], ["y"])]
        weight = np.random.default_rng(0).standard_normal((8, 8)).astype("float32")
        tensors = [numpy_helper.from_array(weight, "W"), ints("zero", [0]), ints("last", [2]),
                   ints("two", [2])]
        x, y = [1, 4, 16], [1, 4, 8]
    elif pattern == "expand":
        nodes = [*shape, helper.make_node("Gather", ["shape", "zero"], ["batch"]),
                 helper.make_node("Concat", ["batch", "rest"], ["to"], axis=0),
                 helper.make_node("Expand", ["x", "to"], ["e"]),
                 helper.make_node("Relu", ["e"], ["y"])]
        tensors = [ints("zero", [0]), ints("rest", [3, 4])]
        x, y = [2, 1, 4], [2, 3, 4]
    else:
        nodes = [*shape, helper.make_node("Gather", ["shape", "one"], ["width"]),
                 helper.make_node("Div", ["width", "four"], ["k"]),
                 helper.make_node("Concat", ["zeros", "k"], ["pads"], axis=0),
                 helper.make_node("Pad", ["x", "pads"], ["p"]),
                 helper.make_node("Relu", ["p"], ["y"])]
        tensors = [ints("one", [1]), ints("four", [4]), ints("zeros", [0, 0, 0])]
        x, y = [1, 8], [1, 10]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)]
    if initializers_as_inputs:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in tensors]
    return save_model(path, nodes, inputs,
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], tensors)


@pytest.fixture
def shape_computing_model(tmp_path) -> Path:
    """See save_shape_computing_model ("slice")."""
    return save_shape_computing_model(tmp_path / "shape_computing.onnx")


@pytest.fixture
def value_shaped_model(tmp_path) -> Path:
    """x sliced up to the input `end`: the result's shape is known only from its value."""
    return save_model(
        tmp_path / "value_shaped.onnx",
        [helper.make_node("Slice", ["x", "start", "end", "axis"], ["h"]),
         helper.make_node("Relu", ["h"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("end", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None])],
        [int64_tensor("start", [0]), int64_tensor("axis", [1])],
    )


@pytest.fixture
def symbolic_model(tmp_path) -> Path:
    """Relu over an input of shape [batch, 4]."""
    return save_model(
        tmp_path / "symbolic.onnx",
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )


@pytest.fixture
def unsupported_op_model(tmp_path) -> Path:
    """A valid ONNX model using Celu, which TVM's ONNX importer does not convert."""
    return save_model(
        tmp_path / "celu.onnx",
        [helper.make_node("Celu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )


@pytest.fixture
def gru_model(tmp_path) -> Path:
    """A GRU (which TVM's importer lacks) over 5 steps, its last step taken by a Gather with a
    constant index (which TVM passes to the kernel as an int64 tensor), then a MatMul."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype("float32") * 0.5, name)

    return save_model(
        tmp_path / "gru.onnx",
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
         helper.make_node("GRU", ["xt", "W", "R", "B"], ["h_all", ""], hidden_size=8),
         helper.make_node("Gather", ["h_all", "last"], ["h_last"], axis=0),
         helper.make_node("Reshape", ["h_last", "flat"], ["h"]),
         helper.make_node("MatMul", ["h", "W_out"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [weight("W", 1, 24, 4), weight("R", 1, 24, 8), weight("B", 1, 48),
         int64_tensor("last", 4), int64_tensor("flat", [1, 8]), weight("W_out", 8, 3)],
    )


def run_relax(mod, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """A Relax module's outputs on `inputs`, built untuned for llvm (copied while the VM lives)."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    outs = [out] if hasattr(out, "numpy") else list(out)
    return [o.numpy().copy() for o in outs]


def random_relax_inputs(mod, seed: int = 0) -> list[np.ndarray]:
    """Standard-normal float32 inputs for a Relax module's static-shaped parameters."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([int(d) for d in p.ty.shape.values]).astype("float32")
            for p in mod["main"].params]


class BrokenRule(Rule):
    """A graph rule that always matches and whose every rewrite fails: a search must skip it."""

    name, doc = "broken", "raises"

    def matches(self, mod):
        return [Match(self.name, ("lv12",))]

    def apply(self, mod, match):
        raise RuntimeError("this rewrite always fails")


@derived_object
class FakeBuilder(PyBuilder):
    """Builds nothing: each candidate gets an empty folder of its own (for fake runners)."""

    def build(self, build_inputs):
        return [BuilderResult(os.path.join(tempfile.mkdtemp(prefix="harl_fake_"), "x.tar"), None)
                for _ in build_inputs]
