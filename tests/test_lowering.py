"""Operators TVM's importer lacks, rewritten into ones it has, and ones it imports poorly (Sum,
Mean, Max, Min): the rewrite computes what onnxruntime computes for the original operator."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import assert_matches_onnxruntime, save_model
from onnx import TensorProto, helper, numpy_helper

from harl.errors import HarlError
from harl.evaluate import CompiledModel, compile_model
from harl.frontend.lowering import lowerable_ops
from harl.frontend.onnx_model import import_model, load_onnx, with_ops_lowered
from harl.target import parse_target

SEQ, BATCH, INPUT, HIDDEN = 5, 2, 3, 4
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_model(path, op, directions=1, layout=0, with_bias=True, initial=False,
                    peepholes=False, outputs=("Y", "Y_h", "Y_c"), sequence_lens=None,
                    opset=17, **attrs):
    """One recurrent node whose weights are initializers; x is the only graph input."""
    rng = np.random.default_rng(1)
    gates = GATES[op]
    x_shape = [SEQ, BATCH, INPUT] if layout == 0 else [BATCH, SEQ, INPUT]
    state_shape = [directions, BATCH, HIDDEN] if layout == 0 else [BATCH, directions, HIDDEN]

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype("float32") * 0.5, name)

    inits = [weight("W", directions, gates * HIDDEN, INPUT),
             weight("R", directions, gates * HIDDEN, HIDDEN)]
    names = ["x", "W", "R", "", "", "", "", ""]
    if with_bias:
        inits.append(weight("B", directions, 2 * gates * HIDDEN))
        names[3] = "B"
    if sequence_lens is not None:
        inits.append(numpy_helper.from_array(np.asarray(sequence_lens, "int32"), "lens"))
        names[4] = "lens"
    if initial:
        inits.append(weight("h0", *state_shape))
        names[5] = "h0"
        if op == "LSTM":
            inits.append(weight("c0", *state_shape))
            names[6] = "c0"
    if peepholes:
        inits.append(weight("P", directions, 3 * HIDDEN))
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    outputs = [o for o in outputs if o != "Y_c" or op == "LSTM"]
    node_outputs = [name if name in outputs else "" for name in ("Y", "Y_h", "Y_c")]
    node_outputs = node_outputs[: 3 if op == "LSTM" else 2]
    if layout:
        attrs["layout"] = layout
    node = helper.make_node(op, names, node_outputs, hidden_size=HIDDEN,
                            direction={1: "forward", 2: "bidirectional"}[directions]
                            if attrs.get("direction") is None else attrs.pop("direction"),
                            **attrs)
    y_shape = [SEQ, directions, BATCH, HIDDEN] if layout == 0 else [BATCH, SEQ, directions,
                                                                     HIDDEN]
    shapes = {"Y": y_shape, "Y_h": state_shape, "Y_c": state_shape}
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


CASES = {
    "gru": dict(op="GRU"),
    "gru_linear_before_reset_reverse": dict(op="GRU", linear_before_reset=1, direction="reverse",
                                            initial=True),
    "gru_bidirectional_clip_activations": dict(
        op="GRU", directions=2, with_bias=False, clip=0.7,
        activations=["HardSigmoid", "Tanh", "Sigmoid", "LeakyRelu"],
        activation_alpha=[0.3, 0.2], activation_beta=[0.4]),
    "gru_only_last_state": dict(op="GRU", outputs=("Y_h",), initial=True),
    "gru_batch_first": dict(op="GRU", layout=1, initial=True, directions=2),
    "lstm_peepholes": dict(op="LSTM", peepholes=True, initial=True),
    "lstm_bidirectional_clip": dict(op="LSTM", directions=2, clip=0.3, peepholes=True,
                                    initial=True),
    "lstm_bidirectional": dict(op="LSTM", directions=2, activations=["Sigmoid", "Tanh", "Relu",
                                                                     "Sigmoid", "Elu", "Tanh"]),
    "lstm_batch_first": dict(op="LSTM", layout=1, initial=True),
    "rnn_relu_full_lengths": dict(op="RNN", activations=["Relu"], sequence_lens=[SEQ] * BATCH),
    "rnn_bidirectional_opset_9": dict(op="RNN", directions=2, initial=True, opset=9),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_unrolled_recurrent_layer_computes_what_onnxruntime_computes(tmp_path, case):
    path = recurrent_model(tmp_path / f"{case}.onnx", **CASES[case])
    model = load_onnx(path)
    lowered = with_ops_lowered(model)
    assert lowered.ops_lowered == (CASES[case]["op"],)
    assert CASES[case]["op"] not in {n.op_type for n in lowered.proto.graph.node}
    x = {"x": np.random.default_rng(2).standard_normal(model.inputs[0].shape).astype("float32")}
    expected = onnxruntime_outputs(model.proto, x)
    actual = ort.InferenceSession(lowered.proto.SerializeToString()).run(None, x)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def onnxruntime_outputs(proto, x: dict) -> list[np.ndarray]:
    """onnxruntime's outputs; for a batch-first layer (layout 1, which onnxruntime does not run)
    those of the same layer in layout 0, transposed."""
    [node] = proto.graph.node
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    if layout == 0:
        return ort.InferenceSession(proto.SerializeToString()).run(None, x)
    reference = onnx.ModelProto()
    reference.CopyFrom(proto)
    [node] = reference.graph.node
    next(a for a in node.attribute if a.name == "layout").i = 0
    for tensor in reference.graph.initializer:
        if tensor.name in ("h0", "c0"):  # [batch, directions, hidden] -> [directions, ...]
            swapped = numpy_helper.to_array(tensor).transpose(1, 0, 2)
            tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(swapped), tensor.name))
    for value in (*reference.graph.input, *reference.graph.output):
        dims = value.type.tensor_type.shape.dim
        sizes = [d.dim_value for d in dims]
        sizes[0], sizes[1] = sizes[1], sizes[0]
        if value.name == "Y":  # [batch, seq, dirs, H] -> [seq, dirs, batch, H]
            sizes = [sizes[0], sizes[2], sizes[1], sizes[3]]
        for dim, size in zip(dims, sizes, strict=True):
            dim.dim_value = size
    outputs = ort.InferenceSession(reference.SerializeToString()).run(
        None, {"x": x["x"].transpose(1, 0, 2)})
    names = [value.name for value in reference.graph.output]
    return [out.transpose(2, 0, 1, 3) if name == "Y" else out.transpose(1, 0, 2)
            for name, out in zip(names, outputs, strict=True)]


def test_a_recurrent_layer_tvm_compiles_matches_onnxruntime(tmp_path):
    path = recurrent_model(tmp_path / "lstm.onnx", op="LSTM", directions=2, peepholes=True,
                           initial=True)
    model = load_onnx(path)
    imported, mod = import_model(model)
    assert imported.ops_lowered == ("LSTM",)
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=1e-5, atol=1e-5)


def test_partial_sequence_lengths_are_refused_in_one_line(tmp_path):
    path = recurrent_model(tmp_path / "gru.onnx", op="GRU", sequence_lens=[SEQ, SEQ - 2])
    with pytest.raises(HarlError, match="sequence_lens") as err:
        import_model(load_onnx(path))
    assert "\n" not in str(err.value)


def test_an_unknown_activation_is_refused_in_one_line(tmp_path):
    path = recurrent_model(tmp_path / "gru.onnx", op="GRU", activations=["Sigmoid", "Gelu"])
    with pytest.raises(HarlError, match="activation 'Gelu'"):
        import_model(load_onnx(path))


@pytest.mark.parametrize("per_channel_zero", [False, True])
def test_conv_integer_becomes_an_exact_int32_conv(tmp_path, per_channel_zero):
    rng = np.random.default_rng(3)
    weights = numpy_helper.from_array(rng.integers(0, 256, (4, 3, 3, 3)).astype("uint8"), "w")
    w_zero = (rng.integers(100, 150, (4,)) if per_channel_zero else np.array(128)).astype("uint8")
    path = save_model(
        tmp_path / "conv_integer.onnx",
        [helper.make_node("ConvInteger", ["x", "w", "x_zero", "w_zero"], ["y"], pads=[1] * 4)],
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 4, 6, 6])],
        [weights, numpy_helper.from_array(np.array(7, "uint8"), "x_zero"),
         numpy_helper.from_array(w_zero, "w_zero")])
    model = load_onnx(path)
    assert lowerable_ops(model.proto) == ["ConvInteger"]
    imported, mod = import_model(model)
    assert imported.ops_lowered == ("ConvInteger",)
    target = parse_target("llvm")
    compiled = CompiledModel(compile_model(mod, target), target, ["x"])
    x = {"x": rng.integers(0, 256, (1, 3, 6, 6)).astype("uint8")}
    [actual] = compiled.run(x)
    # The definition, in int64: onnxruntime takes no per-channel zero point.
    shifted = np.pad(x["x"].astype(np.int64) - 7, [(0, 0), (0, 0), (1, 1), (1, 1)])
    kernel = numpy_helper.to_array(weights).astype(np.int64) - w_zero.reshape(-1, 1, 1, 1)
    windows = np.lib.stride_tricks.sliding_window_view(shifted, (3, 3), axis=(2, 3))
    expected = np.einsum("bchwij,ocij->bohw", windows, kernel)
    np.testing.assert_array_equal(actual, expected)
    if not per_channel_zero:
        [reference] = ort.InferenceSession(path.read_bytes()).run(None, x)
        np.testing.assert_array_equal(actual, reference)


def residual_sum_model(path, op: str, opset: int = 17):
    """A conv whose output `op` (Sum, Mean, Max or Min) joins with the input and a bias
    (broadcast from opset 8; of the output's shape before), then a relu: as Caffe2's ResNet
    exports write a residual add."""
    rng = np.random.default_rng(4)
    weight = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype("float32"), "w")
    bias_shape = (4, 1, 1) if opset >= 8 else (1, 4, 6, 6)
    bias = numpy_helper.from_array(rng.standard_normal(bias_shape).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1] * 4),
             helper.make_node(op, ["conv", "x", "b"], ["joined"]),
             helper.make_node("Relu", ["joined"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_joins_of_inputs_become_pairwise_ops_that_fuse_into_the_conv(tmp_path, op):
    from harl.frontend.tasks import extract_tasks

    model = load_onnx(residual_sum_model(tmp_path / f"{op}.onnx", op))
    assert lowerable_ops(model.proto) == [op]
    imported, mod = import_model(model)
    assert imported.ops_lowered == (op,)
    assert op not in {node.op_type for node in imported.proto.graph.node}
    target = parse_target("llvm")
    assert_matches_onnxruntime(mod, model, target, rtol=1e-5, atol=1e-5)
    # Imported as TVM does it, the join is a stack and a reduction: a task of its own.
    names = [task.name for task in extract_tasks(mod, target)]
    assert len(names) == 1 and "conv2d" in names[0], names
    assert not any("stack" in name for name in names)


@pytest.mark.parametrize(("op", "opset"), [("Sum", 6), ("Max", 8)])
def test_joins_of_opsets_without_their_pairwise_op_are_left_to_tvm(tmp_path, op, opset):
    # Add broadcasts from opset 7, and onnxruntime runs no older Add; Where is new in 9.
    model = load_onnx(residual_sum_model(tmp_path / f"{op}{opset}.onnx", op, opset=opset))
    assert lowerable_ops(model.proto) == []
    imported, mod = import_model(model)
    assert imported.ops_lowered == ()
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=1e-5, atol=1e-5)


def test_an_integer_clamp_by_max_and_min_is_exact(tmp_path):
    lo, hi = (numpy_helper.from_array(np.asarray(v, "int32"), n) for v, n in ((1, "lo"), (2, "hi")))
    path = save_model(
        tmp_path / "clamp.onnx", [helper.make_node("Max", ["x", "lo"], ["m"]),
                                  helper.make_node("Min", ["hi", "m"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.INT32, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [3, 5])], [lo, hi])
    model = load_onnx(path)
    imported, mod = import_model(model)
    assert imported.ops_lowered == ("Max", "Min")
    assert [node.op_type for node in imported.proto.graph.node] == ["Greater", "Where", "Less",
                                                                    "Where"]
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=0, atol=0)


def test_a_mean_rewritten_in_an_old_ir_version_passes_onnx_checks(tmp_path):
    # Before IR version 4 an initializer must also be a graph input: the count is a Constant.
    path = residual_sum_model(tmp_path / "mean.onnx", "Mean")
    proto = onnx.load(str(path))
    proto.ir_version = 3
    for tensor in proto.graph.initializer:
        proto.graph.input.append(helper.make_tensor_value_info(
            tensor.name, tensor.data_type, list(tensor.dims)))
    onnx.save(proto, str(path))
    lowered = with_ops_lowered(load_onnx(path))
    assert lowered.ops_lowered == ("Mean",)
    onnx.checker.check_model(lowered.proto)


def test_a_sum_of_one_input_is_that_input(tmp_path):
    path = save_model(
        tmp_path / "sum1.onnx", [helper.make_node("Sum", ["x"], ["s"]),
                                 helper.make_node("Relu", ["s"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = load_onnx(path)
    imported, mod = import_model(model)
    assert [node.op_type for node in imported.proto.graph.node] == ["Identity", "Relu"]
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=0, atol=0)


def pow_model(path, exponent, base_type=TensorProto.FLOAT, base_shape=(4, 8),
              constant_node=False):
    """y = Pow(x, e) * x, e a constant (an initializer, or a Constant node's value) or, where
    `exponent` is None, a second graph input."""
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("x", base_type, list(base_shape))]
    if exponent is None:
        inputs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, []))
    elif constant_node:
        nodes.append(helper.make_node("Constant", [], ["e"],
                                      value=numpy_helper.from_array(exponent)))
    else:
        inits.append(numpy_helper.from_array(exponent, "e"))
    nodes += [helper.make_node("Pow", ["x", "e"], ["p"]),
              helper.make_node("Mul", ["p", "x"], ["y"])]
    out_shape = np.broadcast_shapes(base_shape, () if exponent is None else exponent.shape)
    return save_model(path, nodes, inputs,
                      [helper.make_tensor_value_info("y", base_type, out_shape)], inits)


@pytest.mark.parametrize(("exponent", "constant_node"), [
    (np.array(3.0, np.float32), False),
    (np.array(4, np.int64), True),
    (np.array([3.0], np.float32), False),
])
def test_a_pow_by_3_or_4_becomes_muls(tmp_path, exponent, constant_node):
    model = load_onnx(pow_model(tmp_path / "pow.onnx", exponent, constant_node=constant_node))
    assert lowerable_ops(model.proto) == ["Pow"]
    imported, mod = import_model(model)
    assert imported.ops_lowered == ("Pow",)
    assert "Pow" not in {node.op_type for node in imported.proto.graph.node}
    assert "pow" not in mod.script()  # TVM's power op, a powf call per element
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("exponent", "base_type", "base_shape"), [
    (np.array(2.0, np.float32), TensorProto.FLOAT, (4, 8)),  # LLVM squares without a call
    (np.array(2.5, np.float32), TensorProto.FLOAT, (4, 8)),
    (None, TensorProto.FLOAT, (4, 8)),  # an exponent known only at run time
    (np.array(3, np.int64), TensorProto.INT32, (4, 8)),  # not a float: left to TVM
    (np.array([[3.0]], np.float32), TensorProto.FLOAT, (8,)),  # broadcasts x to rank 2
])
def test_other_pows_are_kept(tmp_path, exponent, base_type, base_shape):
    model = load_onnx(pow_model(tmp_path / "pow.onnx", exponent, base_type, base_shape))
    imported = with_ops_lowered(model)
    assert imported.ops_lowered == ()
    assert imported.proto is model.proto


def activation_model(path, elem_type=TensorProto.FLOAT):
    """y = x * Sigmoid(x) + Erf(x) + Tanh(x), then a Softmax: each a libm call per element in
    TVM's own lowering."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["silu"]),
             helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("Sum", ["silu", "e", "t"], ["a"]),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1)]
    shape = [2, 3, 16]
    return save_model(path, nodes, [helper.make_tensor_value_info("x", elem_type, shape)],
                      [helper.make_tensor_value_info("y", elem_type, shape)])


def test_cpu_imports_take_tvms_fast_math_and_a_sigmoid_its_exp(tmp_path):
    model = load_onnx(activation_model(tmp_path / "act.onnx"))
    imported, mod = import_model(model)
    assert "Sigmoid" in imported.ops_lowered
    script = mod.script()
    for fast in ("fast_exp", "fast_erf", "fast_tanh", "fast_softmax"):
        assert fast in script, fast
    assert "T.exp(" not in script and "T.erf(" not in script and "T.tanh(" not in script
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=1e-5, atol=1e-6)
    _, exact = import_model(model, fast_math=False)  # GPU targets: TVM's own lowering
    assert "fast_" not in exact.script()
    assert_matches_onnxruntime(exact, model, parse_target("llvm"), rtol=1e-5, atol=1e-6)


def test_a_float16_sigmoid_is_kept(tmp_path):
    model = load_onnx(activation_model(tmp_path / "act16.onnx", TensorProto.FLOAT16))
    imported, _ = import_model(model)
    assert "Sigmoid" not in imported.ops_lowered
    assert "Sigmoid" in {node.op_type for node in imported.proto.graph.node}


def spread_activation_model(path, activation_nodes, opset, elem_type=TensorProto.FLOAT,
                            also_output=None):
    """y = activation(30 * x): x is standard normal, so the activation sees [-150, 150]
    (Mish's Exp cap is 20); `also_output` names a tensor that is a graph output too."""
    shape = [2, 3, 64]
    scale = numpy_helper.from_array(np.asarray(30.0, helper.tensor_dtype_to_np_dtype(elem_type)),
                                    "scale")
    outputs = [helper.make_tensor_value_info("y", elem_type, shape)]
    if also_output:
        outputs.append(helper.make_tensor_value_info(also_output, elem_type, shape))
    return save_model(path, [helper.make_node("Mul", ["x", "scale"], ["z"]), *activation_nodes],
                      [helper.make_tensor_value_info("x", elem_type, shape)], outputs, [scale],
                      opset=opset)


FAST_ACTIVATIONS = {
    "gelu": ([helper.make_node("Gelu", ["z"], ["y"])], 20, ("Gelu",)),
    "gelu_tanh": ([helper.make_node("Gelu", ["z"], ["y"], approximate="tanh")], 20, ("Gelu",)),
    "mish": ([helper.make_node("Mish", ["z"], ["y"])], 18, ("Mish",)),
    "mish_as_torch_exports_it": ([helper.make_node("Softplus", ["z"], ["s"]),
                                  helper.make_node("Tanh", ["s"], ["t"]),
                                  helper.make_node("Mul", ["z", "t"], ["y"])], 17,
                                 ("Softplus", "Tanh")),
    "softplus": ([helper.make_node("Softplus", ["z"], ["y"])], 17, ("Softplus",)),
    "softplus_read_twice": ([helper.make_node("Softplus", ["z"], ["s"]),
                             helper.make_node("Tanh", ["s"], ["t"]),
                             helper.make_node("Mul", ["s", "t"], ["y"])], 17, ("Softplus",)),
}


@pytest.mark.parametrize("case", sorted(FAST_ACTIVATIONS))
def test_activations_with_libm_calls_take_tvms_fast_math(tmp_path, case):
    nodes, opset, lowered = FAST_ACTIVATIONS[case]
    model = load_onnx(spread_activation_model(tmp_path / f"{case}.onnx", nodes, opset))
    imported, mod = import_model(model)
    assert imported.ops_lowered == lowered
    script = mod.script()
    # Relax ops whose legalisation calls libm per element; fast math turns R.exp, R.erf and
    # R.tanh into calls of its fast_ functions
    for op in ("R.log(", "R.nn.gelu", "R.nn.softplus", "R.exp(", "R.erf(", "R.tanh("):
        assert op not in script, op
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=1e-5, atol=1e-5)


def _branch_reading(tensor: str):
    """An If node whose then-branch returns `tensor` of the outer graph, else-branch z."""
    def branch(name, source):
        return helper.make_graph(
            [helper.make_node("Identity", [source], [name])], name, [],
            [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3, 64])])

    return helper.make_node("If", ["flag"], ["r"], then_branch=branch("then", tensor),
                            else_branch=branch("else", "z"))


@pytest.mark.parametrize("other_reader", ["graph_output", "if_branch"])
def test_a_softplus_another_node_also_reads_is_not_dropped_for_its_tanh(tmp_path, other_reader):
    nodes = [helper.make_node("Softplus", ["z"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Mul", ["z", "t"], ["y"])]
    path = spread_activation_model(tmp_path / "sp.onnx", nodes, 17,
                                   also_output="s" if other_reader == "graph_output" else None)
    if other_reader == "if_branch":  # y = z * tanh(s) + (s if flag else z)
        proto = onnx.load(str(path))
        proto.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
        proto.graph.node[-1].output[0] = "m"
        proto.graph.node.extend([_branch_reading("s"), helper.make_node("Add", ["m", "r"], ["y"])])
        onnx.save(proto, str(path))
    model = load_onnx(path)
    imported, mod = import_model(model)
    assert imported.ops_lowered == ("Softplus",)
    assert "Tanh" in {node.op_type for node in imported.proto.graph.node}
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["float16_gelu", "float16_softplus", "tanh_alone"])
def test_activations_the_rewrite_would_not_serve_are_kept(tmp_path, case):
    elem_type, opset = TensorProto.FLOAT16, 20
    if case == "float16_gelu":
        nodes = [helper.make_node("Gelu", ["z"], ["y"])]
    elif case == "float16_softplus":
        nodes = [helper.make_node("Softplus", ["z"], ["y"])]
    else:
        nodes, elem_type = [helper.make_node("Tanh", ["z"], ["y"])], TensorProto.FLOAT
    model = load_onnx(spread_activation_model(tmp_path / f"{case}.onnx", nodes, opset,
                                              elem_type))
    imported = with_ops_lowered(model)
    assert imported.ops_lowered == ()
    assert imported.proto is model.proto


def batch_norm_model(path, producer: str):
    """A batch norm of a Concat's output (DenseNet's order: it comes before the conv), or of a
    MatMul's (a BatchNorm1d after a linear layer), then a relu."""
    rng = np.random.default_rng(5)
    channels = 6

    def constant(name, *shape, low=-1.0, high=1.0):
        return numpy_helper.from_array(rng.uniform(low, high, shape).astype("float32"), name)

    stats = [constant("scale", channels, low=0.5, high=1.5), constant("bias", channels),
             constant("mean", channels), constant("var", channels, low=0.5, high=2.0)]
    if producer == "Concat":
        shape, inits = [1, channels, 5, 5], [constant("other", 1, 2, 5, 5)]
        first = helper.make_node("Concat", ["x", "other"], ["h"], axis=1)
        x_shape = [1, channels - 2, 5, 5]
    else:
        shape, inits = [3, channels], [constant("w", 4, channels)]
        first = helper.make_node("MatMul", ["x", "w"], ["h"])
        x_shape = [3, 4]
    nodes = [first, helper.make_node("BatchNormalization", ["h", "scale", "bias", "mean", "var"],
                                     ["b"], epsilon=1e-3),
             helper.make_node("Relu", ["b"], ["y"])]
    return save_model(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                      [*inits, *stats])


@pytest.mark.parametrize("producer", ["Concat", "MatMul"])
def test_a_batch_norm_not_after_a_conv_becomes_a_multiply_and_an_add(tmp_path, producer):
    from harl.frontend.tasks import extract_tasks

    model = load_onnx(batch_norm_model(tmp_path / f"bn_{producer}.onnx", producer))
    imported, mod = import_model(model)
    assert imported.ops_lowered == ("BatchNormalization",)
    assert [node.op_type for node in imported.proto.graph.node if node.op_type != "Constant"] == [
        producer, "Mul", "Add", "Relu"]
    target = parse_target("llvm")
    assert_matches_onnxruntime(mod, model, target, rtol=1e-5, atol=1e-5)
    [name] = [task.name for task in extract_tasks(mod, target)]
    assert "multiply" in name and "divide" not in name and "sqrt" not in name, name


def test_a_batch_norm_in_training_mode_is_left_to_tvm(tmp_path):
    path = batch_norm_model(tmp_path / "bn.onnx", "Concat")
    proto = onnx.load(str(path))
    proto.graph.node[1].attribute.append(helper.make_attribute("training_mode", 1))
    onnx.save(proto, str(path))
    assert with_ops_lowered(load_onnx(path)).ops_lowered == ()


def test_statistics_passed_through_an_identity_are_constants(tmp_path):
    # TorchScript's exports pass weights through Identity nodes (DenseNet-121: 245 of them).
    path = batch_norm_model(tmp_path / "bn.onnx", "Concat")
    proto = onnx.load(str(path))
    proto.graph.node.insert(0, helper.make_node("Identity", ["scale"], ["scale_copy"]))
    proto.graph.node[2].input[1] = "scale_copy"
    onnx.save(proto, str(path))
    model = load_onnx(path)
    imported, mod = import_model(model)
    assert imported.ops_lowered == ("BatchNormalization",)
    assert_matches_onnxruntime(mod, model, parse_target("llvm"), rtol=1e-5, atol=1e-5)
