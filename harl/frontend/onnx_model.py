"""Load and check an ONNX model, fix its input shapes, and import it into Relax."""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from harl.errors import HarlError
from harl.frontend.graph_writer import ShapeUnknown, set_input_shapes
from harl.frontend.large_models import onnxruntime_source, serialised
from harl.frontend.lowering import lower_ops, lowerable_ops
from harl.frontend.model_checks import (
    check_declared_outputs,
    check_opset,
    first_line,
    load_external_weights,
)

IMPORTED_MODEL_FILE = "model_imported.onnx"
"""in the work dir: the graph harl tuned when it is not the model's own (shape computations
folded, operators TVM's importer lacks or imports poorly rewritten; see import_model); plain
TVM builds import this one"""
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
    shapes_folded: bool = False
    """the graph is the original's with its run-time shape computations folded (see
    `with_shapes_folded`)"""
    assumed_dims: tuple[tuple[str, str | None], ...] = ()
    """symbolic batch dims no --input-shape fixed, taken as 1 (see `_static_inputs`): (input,
    the dim's name or None), one per name"""
    ops_lowered: tuple[str, ...] = ()
    """operator types rewritten into others before the import: ones TVM's importer lacks, or
    imports as a stack and a reduction (see `with_ops_lowered`)"""

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
    if not path.exists():
        raise HarlError(f"model file not found: {path}")
    if path.is_dir():
        raise HarlError(f"{path} is a directory; give the .onnx file in it")
    if not path.is_file():
        raise HarlError(f"{path} is not a regular file (a device or a pipe?); give an .onnx file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError) as err:
        raise HarlError(f"{path} is not a readable ONNX model ({first_line(err)})") from None
    if len(proto.graph.node) == 0:
        raise HarlError(f"{path} is not a readable ONNX model (it has no graph nodes)")
    check_opset(proto, path)
    load_external_weights(proto, path)
    data = serialised(proto)  # past 2 GB only the file can be checked (with its weights' files)
    try:
        onnx.checker.check_model(data if data is not None else str(path))
    except onnx.checker.ValidationError as err:
        raise HarlError(f"{path} is not a valid ONNX model: {first_line(err)}") from None
    check_declared_outputs(proto, path)
    inputs, assumed = _static_inputs(proto, dict(input_shapes or {}))
    outputs = tuple(out.name for out in proto.graph.output)
    return OnnxModel(path=path, proto=proto, inputs=inputs, output_names=outputs,
                     assumed_dims=assumed)


def _static_inputs(proto, overrides: dict[str, tuple[int, ...]]
                   ) -> tuple[tuple[InputSpec, ...], tuple[tuple[str, str | None], ...]]:
    """Each graph input with a static shape, and the symbolic dims taken as 1.

    A shape `overrides` gives is taken as it is, and its symbolic dims' names then stand for
    those sizes in the other inputs too (an attention mask shares `batch` and `sequence` with
    the token ids). The leading dim of an input of rank 2 or more that is still symbolic, and
    whose name stands first wherever it stands, is its batch, as exporters write it
    (`dynamic_axes={"x": {0: "batch"}}`): it is taken as 1, with its name, and said so. Any
    other symbolic dim (an unknown size, 0 or negative, counts as one) is refused in one line:
    its size is the model's, not a default's to guess.
    """
    from onnx import helper

    initializer_names = {init.name for init in proto.graph.initializer}
    graph_inputs = [inp for inp in proto.graph.input if inp.name not in initializer_names]
    unknown = set(overrides) - {inp.name for inp in graph_inputs}
    if unknown:
        names = ", ".join(inp.name for inp in graph_inputs)
        raise HarlError(f"--input-shape names unknown input(s) {sorted(unknown)}; "
                        f"the model's inputs are: {names}")
    declared = {}
    for inp in graph_inputs:
        if not inp.type.HasField("tensor_type"):
            kind = (inp.type.WhichOneof("value") or "untyped").replace("_type", "")
            raise HarlError(f"input {inp.name!r} is a {kind}, not a tensor; harl tunes models "
                            "whose inputs are tensors")
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in inp.type.tensor_type.shape.dim]
        declared[inp.name] = [d if not isinstance(d, int) or d > 0 else None for d in dims]
    named: dict[str, int] = {}  # symbolic dim name -> size
    for name, shape in overrides.items():
        dims = declared[name]
        if len(shape) != len(dims):
            shown = [d if d is not None else "?" for d in dims]
            raise HarlError(f"--input-shape for {name!r} has {len(shape)} dims; "
                            f"the model's input has {len(dims)}: {shown}")
        for dim, size in zip(dims, shape, strict=True):
            if isinstance(dim, str) and named.setdefault(dim, size) != size:
                raise HarlError(f"--input-shape gives dim {dim!r} two sizes, {named[dim]} and "
                                f"{size} ({name!r})")
    assumed, unnamed_batch = [], set()
    inner = {d for dims in declared.values() for d in dims[1:] if isinstance(d, str)}
    for name, dims in declared.items():
        lead = dims[0] if dims else 0
        if (name in overrides or len(dims) < 2 or isinstance(lead, int) or lead in named
                or lead in inner):  # a name found elsewhere than first is not a batch
            continue
        assumed.append((name, lead))
        if lead:
            named[lead] = 1
        else:
            unnamed_batch.add(name)
    specs = []
    for inp in graph_inputs:
        dtype = str(helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type))
        dims = [named.get(d, d) if isinstance(d, str) else d for d in declared[inp.name]]
        if inp.name in unnamed_batch:
            dims[0] = 1
        shape = overrides.get(inp.name)
        if shape is None and not all(isinstance(d, int) for d in dims):
            shown = [d if d is not None else "?" for d in declared[inp.name]]
            example = ",".join(str(d) if isinstance(d, int) else "1" for d in dims)
            raise HarlError(f"input {inp.name!r} has symbolic dims {shown}; fix them with "
                            f"--input-shape {inp.name}:{example}")
        specs.append(InputSpec(inp.name, tuple(shape or dims), dtype))
    return tuple(specs), tuple(assumed)


def import_to_relax(model: OnnxModel, fast_math: bool = True):
    """`import_model`'s Relax IRModule."""
    return import_model(model, fast_math)[1]


def import_model(model: OnnxModel, fast_math: bool = True) -> tuple[OnnxModel, object]:
    """Import into a Relax IRModule with the weights bound as constants, ready for inference
    (see `for_inference`, and its `fast_math`: CPU targets); also returns the model whose
    graph was imported.

    Exporters often compute shapes in the graph (Shape -> Gather -> Concat into a Reshape, an
    Expand or a Slice's bounds). TVM's importer keeps such a computation as run-time work: the
    tensors it shapes get no static shape (or a symbolic one), which TVM's lowering cannot
    take, and some of its converters refuse such inputs outright. Then the graph imported is
    the model's with those computations folded (`with_shapes_folded`). Operators TVM's
    importer lacks (recurrent layers, ConvInteger), and Sum, Mean, Max and Min, which it imports
    as a stack and a reduction, are rewritten first (`with_ops_lowered`).
    """
    lowered = with_ops_lowered(model)
    try:
        mod, failure = _relax_of(lowered), None
    except _ImportFailed as err:
        mod, failure = None, err
    if mod is not None and _runtime_shaped(mod) is None:
        return lowered, for_inference(mod, fast_math)
    try:
        folded = lowered if lowered.shapes_folded else with_ops_lowered(with_shapes_folded(model))
        mod = _relax_of(folded)
    except HarlError:
        if failure is not None:  # the importer's own complaint says more than the fold's
            raise failure from None
        raise
    op = _runtime_shaped(mod)
    if op is not None:
        raise HarlError(f"{model.path}: the shape of a tensor ({op}) is only known at run time, "
                        "even with the inputs' shapes fixed; harl tunes static shapes only")
    return folded, for_inference(mod, fast_math)


class _ImportFailed(HarlError):
    """TVM's importer raised on an operator it does implement (it may take a folded graph)."""


def with_ops_lowered(model: OnnxModel) -> OnnxModel:
    """`model` with the operators TVM's importer lacks (recurrent layers, ConvInteger) rewritten
    into ones it has, Sum and Mean into pairwise Adds, Max and Min into pairwise Wheres and a
    Pow by 3 or 4 into Muls (see harl.frontend.lowering); `model` itself when it rewrites none.
    A recurrent layer whose sequence length only a run-time shape computation gives is lowered
    in the graph with those computations folded."""
    ops = lowerable_ops(model.proto)
    if not ops:
        return model
    shapes = {spec.name: spec.shape for spec in model.inputs}
    try:
        proto, rewritten = lower_ops(model.proto, ops, shapes, str(model.path))
    except ShapeUnknown:
        if model.shapes_folded:
            raise
        return with_ops_lowered(with_shapes_folded(model))
    return replace(model, proto=proto, ops_lowered=tuple(rewritten)) if rewritten else model


def _relax_of(model: OnnxModel):
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    shape_dict = {spec.name: list(spec.shape) for spec in model.inputs}
    dtype_dict = {spec.name: spec.dtype for spec in model.inputs}
    try:
        # A converter that fails prints its Relax inputs first: stderr's, not harl's output
        # (harl.tune sends both to the work dir's logs/tvm.log while importing).
        with contextlib.redirect_stdout(sys.stderr):
            return from_onnx(model.proto, shape_dict=shape_dict, dtype_dict=dtype_dict,
                             keep_params_in_input=False)
    except tvm.error.OpNotImplemented as err:
        raise HarlError(f"{model.path}: {first_line(err)}") from None
    except Exception as err:  # noqa: BLE001  (the importer raises whatever its converter does)
        raise _ImportFailed(f"{model.path}: TVM's ONNX importer failed: "
                            f"{first_line(err)}") from None


def _runtime_shaped(mod) -> str | None:
    """The operator of the first tensor in `mod`'s main function whose shape is not a list of
    constants (unknown, or symbolic: known only at run time), or None."""
    from tvm import relax
    from tvm.tirx import IntImm

    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            ty = binding.var.ty
            if not isinstance(ty, relax.TensorType):
                continue
            values = getattr(ty.shape, "values", None)  # None: no shape, or a shape variable
            if values is None or not all(isinstance(v, IntImm) for v in values):
                value = binding.value
                op = value.op if isinstance(value, relax.Call) else value
                return str(getattr(op, "name", None) or getattr(op, "global_symbol", None)
                           or type(op).__name__)
    return None


def with_shapes_folded(model: OnnxModel) -> OnnxModel:
    """`model` with its inputs' shapes fixed and the shape computations folded into constants,
    by onnxruntime's basic graph optimisations: constant folding, redundant-node removal and a
    few fusions (a conv with the batch norm or scale after it), standard ONNX operators only,
    the same results up to rounding."""
    import tempfile

    import onnx
    import onnxruntime as ort

    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    if proto.ir_version >= 4:  # before 4, every initializer had to be a graph input
        # onnxruntime does not fold an initializer that is also a graph input (a caller could
        # feed it), and many exporters list every weight as one.
        initializers = {tensor.name for tensor in proto.graph.initializer}
        kept = [graph_input for graph_input in proto.graph.input
                if graph_input.name not in initializers]
        del proto.graph.input[:]
        proto.graph.input.extend(kept)
    set_input_shapes(proto, {spec.name: spec.shape for spec in model.inputs})
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="harl-fold-") as scratch:
        options.optimized_model_filepath = str(Path(scratch) / "folded.onnx")
        try:
            # the folded graph's weights go to a file (the graph may come out past 2 GB)
            options.add_session_config_entry(
                "session.optimized_model_external_initializers_file_name", "folded.data")
            ort.InferenceSession(onnxruntime_source(proto, Path(scratch)), options,
                                 providers=["CPUExecutionProvider"])
            folded = onnx.load(options.optimized_model_filepath)
        except Exception as err:  # noqa: BLE001  (onnxruntime raises its own kinds)
            raise HarlError(f"{model.path}: some tensor shapes are computed at run time, and "
                            f"onnxruntime could not fold them: {first_line(err)}") from None
    return replace(model, proto=folded, shapes_folded=True)


def for_inference(mod, fast_math: bool = True):
    """TVM's own inference rewrites, so that a batch norm costs no task of its own: one right
    after a conv is folded into the conv's weights and a bias add (as onnxruntime does), and any
    other becomes arithmetic on its stored statistics that fuses into the op before it (kept
    whole, each would be a task and a pass over memory).

    With `fast_math` (harl's choice for CPU targets), TVM's FastMathTransform: exp, erf, tanh
    and softmax in float32 become TVM's polynomial approximations, which vectorise, where LLVM
    calls libm for every element; over [-100, 100] they are within 3.4e-7 of float64's value,
    relative. Plain TVM builds reuse the tuning log after the same
    passes."""
    import tvm
    from tvm import relax

    fast = [relax.transform.FastMathTransform()] if fast_math else []

    def rewrite(fold: bool):
        # FoldConstant first: a weight computed from constants (an Expand of one) is a constant;
        # and again after the batch norms are rewritten, so that the arithmetic on constants
        # they leave (a folded conv's weights times the scale; the statistics of one harl's
        # lowering kept) is computed once, here: left in the module, every later FoldConstant
        # builds and runs it with LLVM (task extraction and both compiles; DenseNet-121 before
        # its batch norms were lowered: 372 builds, 20 s each time).
        folds = [relax.transform.FoldBatchnormToConv2D()] if fold else []
        return tvm.transform.Sequential([relax.transform.FoldConstant(), *folds,
                                         relax.transform.DecomposeOpsForInference(),
                                         relax.transform.FoldConstant(),
                                         relax.transform.CanonicalizeBindings(),
                                         *fast])(mod)

    try:
        return rewrite(fold=True)
    except TypeError:  # TVM's fold adds a float32 epsilon: other dtypes keep the arithmetic
        return rewrite(fold=False)
