"""Load and check an ONNX model, fix its input shapes, and import it into Relax."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harl.errors import HarlError

_SHAPE_ARG = re.compile(r"^(?P<name>[^:]+):(?P<dims>\d+(,\d+)*)$")


@dataclass(frozen=True)
class InputSpec:
    """One graph input with a fully static shape."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class OnnxModel:
    """A checked ONNX model whose inputs all have static shapes."""

    path: Path
    proto: object  # onnx.ModelProto
    inputs: tuple[InputSpec, ...]
    output_names: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.path.stem

    def random_inputs(self, seed: int) -> dict[str, np.ndarray]:
        """Reproducible random inputs (standard normal floats, small non-negative integers)."""
        rng = np.random.default_rng(seed)
        inputs = {}
        for spec in self.inputs:
            if np.issubdtype(np.dtype(spec.dtype), np.floating):
                inputs[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
            elif spec.dtype == "bool":
                inputs[spec.name] = rng.integers(0, 2, spec.shape).astype(bool)
            else:
                inputs[spec.name] = rng.integers(0, 4, spec.shape).astype(spec.dtype)
        return inputs


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """Parse `NAME:D0,D1,...` (all dims positive integers)."""
    match = _SHAPE_ARG.match(text.strip())
    if match is None:
        raise HarlError(f"malformed --input-shape {text!r}: expected NAME:D0,D1,... "
                        "with positive integer dims, e.g. input:1,3,224,224")
    dims = tuple(int(d) for d in match.group("dims").split(","))
    if any(d <= 0 for d in dims):
        raise HarlError(f"malformed --input-shape {text!r}: dims must be positive")
    return match.group("name"), dims


def load_onnx(path: Path, input_shapes: dict[str, tuple[int, ...]] | None = None) -> OnnxModel:
    """Read, check and shape an ONNX model; every problem becomes a one-line HarlError."""
    import onnx
    from google.protobuf.message import DecodeError

    path = Path(path)
    if not path.is_file():
        raise HarlError(f"model file not found: {path}")
    try:
        proto = onnx.load(str(path))
    except (DecodeError, ValueError, RuntimeError, OSError) as err:
        raise HarlError(f"{path} is not a readable ONNX model ({_first_line(err)})") from None
    if len(proto.graph.node) == 0:
        raise HarlError(f"{path} is not a readable ONNX model (it has no graph nodes)")
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as err:
        raise HarlError(f"{path} is not a valid ONNX model: {_first_line(err)}") from None
    inputs = _static_inputs(proto, dict(input_shapes or {}))
    outputs = tuple(out.name for out in proto.graph.output)
    return OnnxModel(path=path, proto=proto, inputs=inputs, output_names=outputs)


def _static_inputs(proto, overrides: dict[str, tuple[int, ...]]) -> tuple[InputSpec, ...]:
    from onnx import helper

    initializer_names = {init.name for init in proto.graph.initializer}
    graph_inputs = [inp for inp in proto.graph.input if inp.name not in initializer_names]
    unknown = set(overrides) - {inp.name for inp in graph_inputs}
    if unknown:
        names = ", ".join(inp.name for inp in graph_inputs)
        raise HarlError(f"--input-shape names unknown input(s) {sorted(unknown)}; "
                        f"the model's inputs are: {names}")
    specs = []
    for inp in graph_inputs:
        tensor_type = inp.type.tensor_type
        dtype = str(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in tensor_type.shape.dim]
        if inp.name in overrides:
            shape = overrides[inp.name]
            if len(shape) != len(dims):
                raise HarlError(f"--input-shape for {inp.name!r} has {len(shape)} dims; "
                                f"the model's input has {len(dims)}: {dims}")
        elif all(isinstance(d, int) and d > 0 for d in dims):
            shape = tuple(dims)
        else:
            example = ",".join(str(d) if isinstance(d, int) and d > 0 else "1" for d in dims)
            raise HarlError(f"input {inp.name!r} has symbolic dims {dims}; fix them with "
                            f"--input-shape {inp.name}:{example}")
        specs.append(InputSpec(inp.name, tuple(shape), dtype))
    return tuple(specs)


def import_to_relax(model: OnnxModel):
    """Import into a Relax IRModule with the weights bound as constants, ready for inference
    (see `for_inference`)."""
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    shape_dict = {spec.name: list(spec.shape) for spec in model.inputs}
    dtype_dict = {spec.name: spec.dtype for spec in model.inputs}
    try:
        mod = from_onnx(model.proto, shape_dict=shape_dict, dtype_dict=dtype_dict,
                        keep_params_in_input=False)
    except tvm.error.OpNotImplemented as err:
        raise HarlError(f"{model.path}: {_first_line(err)}") from None
    return for_inference(mod)


def for_inference(mod):
    """TVM's own inference rewrites, so that a batch norm costs no task of its own: one right
    after a conv is folded into the conv's weights and a bias add (as onnxruntime does), and any
    other becomes arithmetic on its stored statistics that fuses into the op before it. Kept
    whole, each is a task and a pass over memory (ResNet-50: 49 tasks, 41 after). Plain TVM
    builds reuse the tuning log after the same passes."""
    import tvm
    from tvm import relax

    def rewrite(fold: bool):
        # FoldConstant first: a weight computed from constants (an Expand of one) is a constant.
        folds = [relax.transform.FoldBatchnormToConv2D()] if fold else []
        return tvm.transform.Sequential([relax.transform.FoldConstant(), *folds,
                                         relax.transform.DecomposeOpsForInference(),
                                         relax.transform.CanonicalizeBindings()])(mod)

    try:
        return rewrite(fold=True)
    except TypeError:  # TVM's fold adds a float32 epsilon: other dtypes keep the arithmetic
        return rewrite(fold=False)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
