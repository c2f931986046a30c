"""Loading, checking and shaping ONNX models."""

import numpy as np
import pytest
import tvm
from conftest import (
    assert_matches_onnxruntime,
    save_conv_bn_model,
    save_model,
    save_shape_computing_model,
)
from onnx import TensorProto, helper

from harl.errors import HarlError
from harl.frontend.onnx_model import (
    import_model,
    import_to_relax,
    load_onnx,
    parse_input_shape,
)
from harl.frontend.tasks import extract_tasks
from harl.target import parse_target


def test_parse_input_shape():
    assert parse_input_shape("input:1,3,224,224") == ("input", (1, 3, 224, 224))
    assert parse_input_shape(" x:7 ") == ("x", (7,))


@pytest.mark.parametrize("text", ["input", "input:", "input:1,,2", "input:1,a", ":1,2",
                                  "input:0,3", "input:-1,3"])
def test_parse_input_shape_rejects_malformed(text):
    with pytest.raises(HarlError, match="--input-shape"):
        parse_input_shape(text)


def test_static_model_loads(tiny_matmul):
    model = load_onnx(tiny_matmul)
    assert [(s.name, s.shape, s.dtype) for s in model.inputs] == [("x", (1, 16), "float32")]
    assert model.output_names == ("y",)
    first, second = model.random_inputs(3), model.random_inputs(3)
    np.testing.assert_array_equal(first["x"], second["x"])


def test_missing_file(tmp_path):
    with pytest.raises(HarlError, match="not found"):
        load_onnx(tmp_path / "nope.onnx")


def test_not_onnx(tmp_path):
    path = tmp_path / "text.onnx"
    path.write_text("this is not a protobuf\n" * 20)
    with pytest.raises(HarlError, match="not a readable ONNX model"):
        load_onnx(path)


def test_truncated_onnx(tiny_matmul, tmp_path):
    data = tiny_matmul.read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(HarlError, match="ONNX model"):
        load_onnx(path)


def test_a_symbolic_batch_is_taken_as_1_unless_input_shape_fixes_it(symbolic_model):
    model = load_onnx(symbolic_model)
    assert model.inputs[0].shape == (1, 4) and model.assumed_dims == (("x", "batch"),)
    model = load_onnx(symbolic_model, {"x": (3, 4)})
    assert model.inputs[0].shape == (3, 4) and model.assumed_dims == ()


def test_other_symbolic_dims_need_input_shape_and_shared_names_follow_it(tmp_path):
    path = save_model(
        tmp_path / "masked.onnx", [helper.make_node("Mul", ["x", "mask"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "seq", 1]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])])
    with pytest.raises(HarlError, match=r"'x' has symbolic dims \['batch', 'seq', 4\]; fix "
                                        r"them with --input-shape x:1,1,4$"):
        load_onnx(path)
    model = load_onnx(path, {"x": (2, 7, 4)})  # the mask and the ids share its names
    assert [spec.shape for spec in model.inputs] == [(2, 7, 4), (2, 7, 1), (7,)]
    assert model.assumed_dims == ()
    model = load_onnx(path, {"ids": (5,)})  # the batch is still taken as 1, and said so
    assert [spec.shape for spec in model.inputs] == [(1, 5, 4), (1, 5, 1), (5,)]
    assert model.assumed_dims == (("x", "batch"),)  # one name, said once
    with pytest.raises(HarlError, match="gives dim 'batch' two sizes, 2 and 3"):
        load_onnx(path, {"x": (2, 7, 4), "mask": (3, 7, 1)})
    for unknown in (None, -1):  # no size, or one some converters write for unknown
        unnamed = save_model(
            tmp_path / "unnamed.onnx", [helper.make_node("Relu", ["x"], ["y"])],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [unknown, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [unknown, 3])])
        model = load_onnx(unnamed)
        assert model.inputs[0].shape == (1, 3) and model.assumed_dims == (("x", None),)


def test_a_leading_name_that_also_stands_inside_a_shape_is_no_batch(tmp_path):
    path = save_model(
        tmp_path / "swapped.onnx", [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", "k"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["k", "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "n"])])
    with pytest.raises(HarlError, match="symbolic dims"):
        load_onnx(path)
    model = load_onnx(path, {"a": (2, 5)})
    assert [spec.shape for spec in model.inputs] == [(2, 5), (5, 2)]


def test_input_shape_for_unknown_input_or_wrong_rank(symbolic_model):
    with pytest.raises(HarlError, match="unknown input"):
        load_onnx(symbolic_model, {"y": (1, 4)})
    with pytest.raises(HarlError, match="has 3 dims"):
        load_onnx(symbolic_model, {"x": (1, 2, 4)})


def test_an_input_that_is_no_tensor_is_refused_in_one_line(tmp_path):
    path = save_model(
        tmp_path / "listed.onnx", [helper.make_node("SequenceLength", ["xs"], ["n"])],
        [helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    with pytest.raises(HarlError, match=r"input 'xs' is a sequence, not a tensor"):
        load_onnx(path)


def test_unsupported_operator_is_named(unsupported_op_model):
    model = load_onnx(unsupported_op_model)
    with pytest.raises(HarlError, match="Celu"):
        import_to_relax(model)


@pytest.mark.parametrize(("conv_bias", "dtype", "into_weights"), [
    (False, "float32", True),  # TVM folds it into the conv's weights and one bias add
    (True, "float32", False),  # after a conv bias: x * scale + shift, harl's rewrite
    (False, "float16", False),  # TVM's fold takes float32 only: the same rewrite
])
def test_batch_norm_joins_the_conv_before_it(tmp_path, conv_bias, dtype, into_weights):
    model = load_onnx(save_conv_bn_model(tmp_path / "conv_bn.onnx", conv_bias, dtype))
    imported, relax_mod = import_model(model)
    assert imported.ops_lowered == (() if into_weights else ("BatchNormalization",))
    target = parse_target("llvm")
    # One task; kept whole, the batch norm would be a second one.
    [name] = [task.name for task in extract_tasks(relax_mod, target)]
    assert name.startswith("fused_conv2d") and name.endswith("relu")
    assert "divide" not in name and ("multiply" not in name) == into_weights
    # Arithmetic on the statistics alone is computed once, at import: left there, every later
    # FoldConstant (extraction, both compiles) built and ran it (DenseNet-121: 20 s each).
    calls = [binding.value for block in relax_mod["main"].body.blocks
             for binding in block.bindings if isinstance(binding.value, tvm.relax.Call)]
    assert not [call for call in calls
                if all(isinstance(arg, tvm.ir.Constant) for arg in call.args)]
    # The rewrite keeps the model's numbers.
    tolerance = 1e-5 if dtype == "float32" else 1e-2
    assert_matches_onnxruntime(relax_mod, model, target, rtol=tolerance * 10, atol=tolerance)


@pytest.mark.parametrize(("pattern", "initializers_as_inputs"),
                         [("slice", False), ("slice", True), ("expand", False), ("pad", False)])
def test_shapes_the_graph_computes_are_folded_before_import(tmp_path, capsys, pattern,
                                                           initializers_as_inputs):
    # TVM's importer keeps Shape -> Gather -> ... as run-time work: the slice gets no static
    # shape, the expand a symbolic one, and the pad is refused; lowering takes none of them.
    # onnxruntime's constant folding makes them static (also where the exporter listed the
    # initializers as graph inputs, which onnxruntime would not fold).
    path = save_shape_computing_model(tmp_path / f"{pattern}.onnx", pattern,
                                      initializers_as_inputs)
    model = load_onnx(path)
    imported, mod = import_model(model)
    assert imported.shapes_folded and not model.shapes_folded
    assert capsys.readouterr().out == ""  # not the refused converter's dump of its inputs
    shape_arithmetic = {"Shape", "Gather", "Div", "Concat"}
    assert not shape_arithmetic & {node.op_type for node in imported.proto.graph.node}
    target = parse_target(None)
    assert extract_tasks(mod, target)
    assert_matches_onnxruntime(mod, model, target, rtol=1e-5, atol=1e-5)


def test_a_model_without_shape_computations_is_imported_as_it_is(tiny_matmul):
    model = load_onnx(tiny_matmul)
    imported, _ = import_model(model)
    assert imported is model


def test_a_shape_known_only_from_input_values_is_a_one_line_error(value_shaped_model):
    with pytest.raises(HarlError, match="only known at run time"):
        import_model(load_onnx(value_shaped_model))


def test_a_failure_of_tvms_importer_is_a_one_line_error(tmp_path):
    path = save_model(
        tmp_path / "reshape_by_value.onnx", [helper.make_node("Reshape", ["x", "s"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    with pytest.raises(HarlError, match="importer failed"):
        import_model(load_onnx(path))
