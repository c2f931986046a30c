"""Convs in blocked channel layouts (harl.graph.rules.nchwc): the layout carried from conv to
conv, outputs as onnxruntime's, and a run (blocked by default on a CPU) end to end."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import tvm_ffi
from conftest import (
    assert_matches_onnxruntime,
    assert_plain_tvm_rebuilds,
    harl_tune,
    op_count,
    save_model,
    three_convs,
)
from onnx import TensorProto, helper, numpy_helper

from harl.config import VerifyConfig
from harl.frontend.onnx_model import import_model, load_onnx
from harl.graph.config import GraphConfig
from harl.graph.pipeline import REWRITTEN_FILE, GraphStage, laid_out, same_graph
from harl.graph.rules.nchwc import ConvertLayoutNCHWc, channel_block, output_lanes, to_nchwc
from harl.target import parse_target


def small_cnn(path):
    """A 3-channel stem with bias and ReLU6, a max pool, a 1x1 and a depthwise branch
    concatenated, a dropout, a 3x3 conv with a residual add, an average pool, a conv to 8
    channels, a global average pool and a classifier: every op the layout is carried through,
    and one conv whose output channels a 16-lane block does not divide."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32),
                                       name)

    weights = [weight("w0", 16, 3, 3, 3), weight("b0", 16), weight("w1", 16, 16, 1, 1),
               weight("wd", 16, 1, 3, 3), weight("w2", 16, 32, 3, 3), weight("w3", 8, 16, 1, 1),
               weight("fc", 8, 10)]
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w0", "b0"], ["stem"], pads=[1, 1, 1, 1]),
        node("Clip", ["stem", "lo", "hi"], ["relu6"]),
        node("MaxPool", ["relu6"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["pool", "w1"], ["a0"]),
        node("Relu", ["a0"], ["a"]),
        node("Conv", ["pool", "wd"], ["d0"], pads=[1, 1, 1, 1], group=16),
        node("Relu", ["d0"], ["d"]),
        node("Concat", ["a", "d"], ["cat"], axis=1),
        node("Dropout", ["cat"], ["drop"]),
        node("Conv", ["drop", "w2"], ["c"], pads=[1, 1, 1, 1]),
        node("Add", ["c", "pool"], ["res"]),
        node("AveragePool", ["res"], ["avg"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["avg", "w3"], ["e"]),
        node("GlobalAveragePool", ["e"], ["g"]),
        node("Flatten", ["g"], ["flat"]),
        node("MatMul", ["flat", "fc"], ["y"]),
    ]
    bounds = [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
              numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    return save_model(path, nodes,
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                      weights + bounds)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    model = load_onnx(small_cnn(tmp_path_factory.mktemp("nchwc") / "small_cnn.onnx"))
    return model, import_model(model)[1]


@pytest.mark.parametrize(("block", "convs_left"), [(16, 1), (4, 0)])
def test_blocked_graph_computes_what_onnxruntime_does(cnn, block, convs_left):
    model, mod = cnn
    blocked = to_nchwc(mod, block)
    # the 8-channel conv at 16 lanes: no conv reads it, so it keeps NCHW (no narrower block)
    assert op_count(blocked, "relax.nn.conv2d") == convs_left
    # Into the blocks at the stem, out of them after the global pool (at 16 lanes: before the
    # 8-channel conv), nowhere else.
    assert op_count(blocked, "relax.layout_transform") == 2
    assert_matches_onnxruntime(blocked, model, parse_target("llvm"), rtol=1e-4, atol=1e-5)
    assert tvm_ffi.structural_equal(to_nchwc(blocked, block), blocked)  # what a resume redoes


def binding_shapes(mod) -> set[tuple[int, ...]]:
    """The static shapes of the tensors main's bindings compute."""
    shapes = set()
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            shape = getattr(binding.var.ty, "shape", None)
            if shape is not None and hasattr(shape, "values"):
                shapes.add(tuple(int(d) for d in shape.values))
    return shapes


def test_convs_that_feed_convs_take_narrower_blocks_where_the_lanes_do_not_divide(tmp_path):
    """A bottleneck as MobileNet-V2's: two 1x1 convs to 24 channels, their sum read by a conv
    (blocked at 8 lanes where 16 do not divide 24: the layout stays blocked between convs)."""
    rng = np.random.default_rng(0)
    shapes = {"w0": (24, 16, 1, 1), "w1": (24, 16, 1, 1), "w2": (16, 24, 3, 3)}
    weights = [numpy_helper.from_array((0.2 * rng.standard_normal(shape)).astype(np.float32),
                                       name) for name, shape in shapes.items()]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a0"]),
             helper.make_node("Relu", ["a0"], ["a"]),
             helper.make_node("Conv", ["x", "w1"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("Conv", ["s", "w2"], ["y"], pads=[1, 1, 1, 1])]
    model = load_onnx(save_model(
        tmp_path / "bottleneck.onnx", nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], weights))
    blocked = to_nchwc(import_model(model)[1], 16)
    assert op_count(blocked, "relax.nn.conv2d") == 0
    assert (1, 3, 8, 8, 8) in binding_shapes(blocked)  # 24 channels in 3 blocks of 8
    assert op_count(blocked, "relax.layout_transform") == 2  # the input in, the output out
    assert_matches_onnxruntime(blocked, model, parse_target("llvm"), rtol=1e-4, atol=1e-5)


def test_output_channels_the_lanes_do_not_divide_take_the_widest_block_that_does():
    assert [output_lanes(c, 16) for c in (16, 48, 24, 1000, 12, 6)] == [16, 16, 8, 8, 4, None]
    assert output_lanes(24, 8) == 8 and output_lanes(12, 8) == 4 and output_lanes(10, 4) is None


def test_a_conv_whose_output_is_the_models_hands_it_out_in_nchw(tmp_path):
    model = load_onnx(three_convs(tmp_path / "three_convs.onnx"))
    blocked = to_nchwc(import_model(model)[1], 16)
    assert op_count(blocked, "relax.nn.conv2d") == 0
    assert op_count(blocked, "relax.layout_transform") == 2
    assert_matches_onnxruntime(blocked, model, parse_target("llvm"), rtol=1e-4, atol=1e-5)


def test_an_input_two_convs_read_is_blocked_once(tmp_path):
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((0.2 * rng.standard_normal((16, 16, 3, 3)))
                                       .astype(np.float32), name) for name in ("w0", "w1")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = load_onnx(save_model(
        tmp_path / "two_readers.onnx", nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], weights))
    blocked = to_nchwc(import_model(model)[1], 16)
    assert op_count(blocked, "relax.layout_transform") == 2  # the input in, the sum out
    assert_matches_onnxruntime(blocked, model, parse_target("llvm"), rtol=1e-4, atol=1e-5)


def test_rule_matches_the_graphs_convs(cnn):
    _, mod = cnn
    (match,) = ConvertLayoutNCHWc(block=8).matches(mod)
    assert len(match.vars) == 4  # the ungrouped convs
    assert op_count(ConvertLayoutNCHWc(block=8).apply(mod, match), "relax.nn.conv2d") == 0


def test_block_is_the_targets_float32_lanes():
    import tvm

    def lanes(**target):
        return channel_block(tvm.target.Target({"kind": "llvm", **target}))

    assert lanes(mcpu="skylake-avx512") == 16
    assert lanes(mcpu="znver3") == 8  # AVX2 only
    assert lanes() == 4  # x86-64's SSE2
    assert lanes(mtriple="aarch64-linux-gnu") == 4
    assert channel_block(tvm.target.Target({"kind": "cuda", "arch": "sm_80"})) is None


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="conv_layout must be one of imported, nchwc"):
        GraphConfig(conv_layout="nhwc")


def test_a_run_lays_out_its_graph_as_configured(cnn, tmp_path):
    import tvm

    _, mod = cnn
    stale = tmp_path / REWRITTEN_FILE
    stale.write_text("an earlier run's graph")
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    assert laid_out(mod, target, GraphConfig(conv_layout="imported"), tmp_path) is mod
    assert not stale.exists()
    blocked = laid_out(mod, target, GraphConfig(), tmp_path)  # nchwc by default
    assert op_count(blocked, "relax.nn.conv2d") == 1
    assert tvm_ffi.structural_equal(tvm.ir.load_json(stale.read_text()), blocked)
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    assert laid_out(mod, cuda, GraphConfig(), tmp_path) is mod


class FlatCost:
    """A graph cost model under which every graph costs 1 ms (no rewrite pays); the graphs it
    priced are kept in `priced`."""

    def __init__(self) -> None:
        self.priced = []

    def estimate(self, graph):
        self.priced.append(graph)
        return SimpleNamespace(total_ms=1.0)


def test_the_graph_search_prices_graphs_as_the_run_compiles_them(cnn, tmp_path, monkeypatch):
    """Both searches cost each candidate after the conv layout pass, the tuned tasks' layout,
    and the second keeps the blocked graph being tuned when it finds the same graph."""
    import tvm

    model, mod = cnn
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    flat = FlatCost()
    monkeypatch.setattr(GraphStage, "_cost_model", lambda self, own_model: flat)
    config = GraphConfig(method="greedy", greedy_max_evals=4)
    stage = GraphStage(config, work_dir=tmp_path, target=target, model=model,
                       verify=VerifyConfig(), seed=0, prepack_weights=False)
    current = laid_out(stage.first(mod), target, config, tmp_path)
    assert stage.second(mod, current) is current
    assert stage.entry["changed_by_second_search"] is False
    assert len(flat.priced) > 2
    assert all(same_graph(to_nchwc(graph, 16), graph) for graph in flat.priced)


@pytest.mark.parametrize("layout", ["nchwc", "imported"])
def test_the_searches_choose_conv_layouts_only_where_no_pass_blocks_them(cnn, tmp_path, layout,
                                                                         monkeypatch):
    import tvm

    from harl.graph.search.greedy import greedy

    seen = []

    def recording(mod, cost, *, rules, max_evals):
        seen.extend(rule.name for rule in rules)
        return greedy(mod, cost, rules=rules, max_evals=1)

    monkeypatch.setattr("harl.graph.search.greedy.greedy", recording)
    monkeypatch.setattr(GraphStage, "_cost_model", lambda self, own_model: FlatCost())
    model, mod = cnn
    config = GraphConfig(method="greedy", conv_layout=layout)
    GraphStage(config, work_dir=tmp_path, target=tvm.target.Target(
        {"kind": "llvm", "mcpu": "skylake-avx512"}), model=model, verify=VerifyConfig(), seed=0,
        prepack_weights=False).first(mod)
    assert "merge_parallel_conv" in seen
    assert ("conv_nhwc" in seen) == (layout == "imported")


def test_a_run_tunes_the_blocked_graph_by_default_and_plain_tvm_rebuilds_it(tmp_path):
    import tvm

    model = small_cnn(tmp_path / "small_cnn.onnx")
    work_dir = tmp_path / "run"
    run = harl_tune(model, "--trials", 6, "--work-dir", work_dir, "--quiet")
    assert run.returncode == 0, run.stderr
    report = json.loads((work_dir / "report.json").read_text())
    assert report["verified"] is True
    assert report["config"]["graph"]["conv_layout"] == "nchwc"
    saved = tvm.ir.load_json((work_dir / REWRITTEN_FILE).read_text())
    assert "conv2d_nchwc" in [gv.name_hint for gv in saved.get_global_vars()]
    assert_plain_tvm_rebuilds(model, work_dir)
