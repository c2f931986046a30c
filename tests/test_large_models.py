"""Models past protobuf's 2 GB: a small model stands for one where the limit is lowered, and one
real 2.25 GiB model runs end to end outside CI."""

import json

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import harl_tune, harl_tune_here, save_shape_computing_model
from onnx import TensorProto, helper, numpy_helper

from harl.frontend import large_models
from harl.frontend.graph_writer import tensor_shapes
from harl.frontend.large_models import serialised, shape_probe


@pytest.fixture
def limit_lowered(monkeypatch):
    """Protobuf's limit at 100 bytes: a model's float weights are large."""
    monkeypatch.setattr(large_models, "PROTOBUF_LIMIT", 100)
    monkeypatch.setattr(large_models, "WEIGHT_BYTES_KEPT", 64)


def shape_computing_model(path):
    """The "slice" model of conftest, its weight widened to 8x40 (1280 bytes: ONNX moves a
    tensor to the data file from 1 KB)."""
    model = onnx.load(str(save_shape_computing_model(path, "slice")))
    weight = np.random.default_rng(1).standard_normal((8, 40)).astype("float32")
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight, "W"))
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 40
    onnx.save(model, str(path))
    return path


def test_a_shape_probe_past_the_limit_keeps_the_weights_dims_not_their_values(
        tmp_path, limit_lowered):
    proto = onnx.load(str(shape_computing_model(tmp_path / "m.onnx")))
    assert serialised(proto) is None
    probe = {tensor.name: tensor for tensor in shape_probe(proto).graph.initializer}
    assert probe["W"].raw_data == b"" and list(probe["W"].dims) == [8, 40]
    assert probe["last"].raw_data  # the slice's axis: small, kept for shape inference
    assert {t.name: t.raw_data for t in proto.graph.initializer}["W"]  # the model keeps it
    shapes = tensor_shapes(proto, {"x": (1, 4, 16)})
    assert shapes["m"][0][-1] == 40  # inferred from W's dims (m is no declared output)


def test_a_model_saved_beside_its_weights_twice_or_from_anywhere_keeps_one_copy(
        tmp_path, monkeypatch):
    proto = onnx.load(str(shape_computing_model(tmp_path / "m.onnx")))
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)  # torch writes model.onnx.data beside model.onnx: where harl runs
    for _ in range(2):  # a resumed run saves again: ONNX would append to the file
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        large_models.save_beside_weights(copy, out / "m.onnx")
    assert (out / "m.onnx.data").stat().st_size == 8 * 40 * 4  # W alone, once
    saved = {t.name: numpy_helper.to_array(t)
             for t in onnx.load(str(out / "m.onnx")).graph.initializer}
    original = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    assert saved.keys() == original.keys()
    assert all(np.array_equal(saved[name], original[name]) for name in saved)


def test_a_model_past_the_limit_is_checked_folded_verified_and_saved_through_files(
        tmp_path, monkeypatch, limit_lowered):
    # The "slice" model computes a shape from Shape(x): its fold runs in onnxruntime too.
    path = shape_computing_model(tmp_path / "m.onnx")
    checked, opened = [], []
    check_model, session = onnx.checker.check_model, onnxruntime.InferenceSession
    monkeypatch.setattr(onnx.checker, "check_model",
                        lambda model, *a, **k: (checked.append(model), check_model(model))[1])
    monkeypatch.setattr(onnxruntime, "InferenceSession", lambda source, *a, **k: (
        opened.append(source), session(source, *a, **k))[1])
    work_dir = tmp_path / "run"
    result = harl_tune_here(path, "--trials", "2", "--work-dir", work_dir, "--fresh")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((work_dir / "report.json").read_text())["verified"] is True
    # harl's check, from the file: protobuf would refuse to serialise the proto (TVM's importer
    # checks the proto again later, and only warns when it cannot)
    assert checked[0] == str(path)
    assert opened and all(isinstance(source, str) for source in opened)
    assert str(path) in opened  # the reference, from the model's own file
    imported = work_dir / "model_imported.onnx"
    assert (work_dir / "model_imported.onnx.data").is_file()  # its weights beside it
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(imported)).graph.initializer}
    original = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    assert np.array_equal(saved["W"], original["W"])


@pytest.mark.slow
def test_a_model_of_over_2_gb_tunes_end_to_end(tmp_path):
    # Nine MatMul + Relu layers of 4096x16384 float32 weights: 2.25 GiB, in a file beside the
    # graph. About 80 s and 9 GB of memory.
    rng = np.random.default_rng(0)
    nodes, weights, x, width = [], [], "x", 4096
    for i in range(9):
        other = 16384 if width == 4096 else 4096
        w = rng.standard_normal((width, other), dtype=np.float32) / np.float32(np.sqrt(width))
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        x, width = f"r{i}", other
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, width])], weights)
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path),
              save_as_external_data=True, location="big.onnx.data")
    del graph, weights
    result = harl_tune(path, "--trials", "2", "--work-dir", tmp_path / "run", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "run" / "report.json").read_text())["verified"] is True
