"""Compile an ONNX model with a harl work dir's database using plain TVM (no harl import).

    python tools/build_with_tvm.py MODEL.onnx WORK_DIR [--reference ORIGINAL.onnx]
                                   [--graph WORK_DIR/model_rewritten.json]

Shows that harl's tuning logs are ordinary MetaSchedule databases: it counts the model's fused
functions that the database schedules, runs the build on random inputs and compares it with
onnxruntime. Exits 1 if no tuned function was applied or the outputs disagree. MODEL is the
graph harl imported: the model itself, or the work dir's `model_imported.onnx` where harl
rewrote it; `--reference` names the model onnxruntime runs (default: MODEL; the original where
the rewrite holds operators onnxruntime lacks, such as ConvInteger's int32 Conv).

Where harl rewrote the graph itself (`--graph greedy|eqsat|rl`), the tuned tasks are those of the
rewritten Relax module it saved in the work dir as `model_rewritten.json` (`tvm.ir.save_json`):
that module is built instead of MODEL's import (picked up from WORK_DIR, or named by `--graph`;
`--graph none` builds MODEL's import regardless); MODEL still gives the inputs and onnxruntime's
reference.

Where harl tuned with prepacked weights (`prepack_weights = true`: each schedule chose the layout
of its constant weights), the build is TVM's own `relax.pipeline.static_shape_tuning_pipeline(0,
target, work_dir=WORK_DIR, cpu_weight_prepack=True)` followed by `tvm.compile`: it marks the
weights layout-free, applies the database, and folds each schedule's weight packing into the
constants.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx
from tvm.s_tir import meta_schedule as ms

REWRITTEN_FILE = "model_rewritten.json"
"""the rewritten graph harl saves in a work dir (harl.graph.pipeline.REWRITTEN_FILE)"""


def load_database(work_dir: Path):
    """The work dir's JSONDatabase; where TVM 0.27's loader fails on it (it replays every record
    of a workload on one module, which some records rewrite in place, so that later records no
    longer fit: "old_outputs.size() == new_outputs.size()"), a MemoryDatabase holding each
    record read against its own parse of its workload."""
    workloads = work_dir / "database_workload.json"
    records = work_dir / "database_tuning_record.json"
    try:
        return ms.database.JSONDatabase(path_workload=str(workloads),
                                        path_tuning_record=str(records), allow_missing=False)
    except Exception as err:  # noqa: BLE001  (TVM's RuntimeError)
        if "old_outputs.size() == new_outputs.size()" not in str(err):
            raise
    print("TVM's JSONDatabase cannot replay these records on shared workloads: each is read "
          "against its own workload instead", file=sys.stderr)
    lines = [json.loads(line) for line in workloads.read_text().splitlines() if line.strip()]
    database = ms.database.MemoryDatabase()
    for line in lines:
        database.commit_workload(ms.database.Workload.from_json(line).mod)
    for line in records.read_text().splitlines():
        if line.strip():
            index, record = json.loads(line)
            workload = ms.database.Workload.from_json(lines[index])
            database.commit_tuning_record(ms.database.TuningRecord.from_json(record, workload))
    return database


def for_inference(mod, target):
    """The passes harl applies after import: batch norms fold into the conv before them (TVM's
    fold takes float32 only), or become arithmetic that fuses into it; for a CPU target, exp,
    erf, tanh and softmax become TVM's fast approximations."""
    gpu = "gpu" in [str(key) for key in target.keys]
    fast = [] if gpu else [relax.transform.FastMathTransform()]

    def rewrite(fold: bool):
        folds = [relax.transform.FoldBatchnormToConv2D()] if fold else []
        return tvm.transform.Sequential([relax.transform.FoldConstant(), *folds,
                                         relax.transform.DecomposeOpsForInference(),
                                         relax.transform.FoldConstant(),
                                         relax.transform.CanonicalizeBindings(),
                                         *fast])(mod)

    try:
        return rewrite(fold=True)
    except TypeError:
        return rewrite(fold=False)


def prepacked(database) -> bool:
    """Whether the database was tuned with layout-free (prepacked) weights: its workloads carry
    the `layout_free_buffers` attribute TVM's AttachAttrLayoutFreeBuffers sets."""
    for record in database.get_all_tuning_records():
        attrs = record.workload.mod["main"].attrs
        if attrs is not None and "layout_free_buffers" in attrs:
            return True
    return False


def count_applied(mod, target, database, packed: bool) -> tuple[int, int]:
    """(functions scheduled by the database, tunable functions) after TVM's own fusion (marking
    the weights layout-free where the database was tuned so: `packed`)."""
    marks = [relax.transform.AttachAttrLayoutFreeBuffers()] if packed else []
    fuse = tvm.transform.Sequential([
        *relax.pipeline.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        *marks,
    ])
    with target, database, tvm.transform.PassContext(opt_level=3):
        applied = relax.transform.MetaScheduleApplyDatabase()(fuse(mod))
    funcs = [f for f in applied.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled = sum(bool(f.attrs and f.attrs.get("tirx.is_scheduled", False)) for f in funcs)
    return scheduled, len(funcs)


def random_inputs(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    weights = {init.name for init in model.graph.initializer}
    inputs = {}
    for inp in model.graph.input:
        if inp.name in weights:
            continue
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
        inputs[inp.name] = rng.standard_normal(shape).astype(dtype)
    return inputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("work_dir", type=Path)
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--reference", type=Path, default=None,
                        help="the model onnxruntime runs (default: MODEL)")
    parser.add_argument("--graph", default=None, metavar="MODEL_REWRITTEN.json",
                        help="the Relax module to build, saved by tvm.ir.save_json (default: "
                             "WORK_DIR/model_rewritten.json where it exists; 'none': MODEL's "
                             "import)")
    args = parser.parse_args()

    model = onnx.load(str(args.model))
    database = load_database(args.work_dir)
    records = database.get_all_tuning_records()
    if not records:
        print(f"no tuning records in {args.work_dir}", file=sys.stderr)
        return 1
    target = records[0].target  # the target the schedules were tuned for
    graph = args.graph or (args.work_dir / REWRITTEN_FILE)
    if args.graph != "none" and Path(graph).exists():  # the graph harl rewrote and tuned
        mod = tvm.ir.load_json(Path(graph).read_text())
        print(f"graph: {graph}")
    elif args.graph not in (None, "none"):
        print(f"no such graph file: {graph}", file=sys.stderr)
        return 1
    else:
        mod = for_inference(from_onnx(model, keep_params_in_input=False), target)
    packed = prepacked(database)
    scheduled, total = count_applied(mod, target, database, packed)
    print(f"tuned functions applied: {scheduled}/{total}")

    kind = target.kind.name
    if kind == "cuda":
        # TVM compiles CUDA through NVRTC by default, which needs the cuda-bindings package;
        # nvcc is what a CUDA toolkit has (as harl.target.use_nvcc_for_cuda: no harl import here).
        os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    if packed:
        print("weights prepacked by the schedules: TVM's static_shape_tuning_pipeline with "
              "cpu_weight_prepack")
        tuning = relax.pipeline.static_shape_tuning_pipeline(
            total_trials=0, target=target, work_dir=str(args.work_dir), cpu_weight_prepack=True)
        executable = tvm.compile(tuning(mod), target=target)
    else:
        executable = ms.relax_integration.compile_relax(database, mod, target, params=None)
    device = tvm.cpu(0) if kind == "llvm" else tvm.device(kind, 0)  # the log's own device
    vm = relax.VirtualMachine(executable, device)
    inputs = random_inputs(model)
    result = vm["main"](*[tvm.runtime.tensor(v, device) for v in inputs.values()])
    outputs = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
    actual = [out.numpy() for out in outputs]
    # from the file: a model past protobuf's 2 GB cannot be handed over as bytes
    session = onnxruntime.InferenceSession(str(args.reference or args.model),
                                           providers=["CPUExecutionProvider"])
    expected = session.run(None, inputs)
    max_err = max(float(np.abs(a - e).max()) for a, e in zip(actual, expected, strict=True))
    matches = all(np.allclose(a, e, rtol=args.rtol, atol=args.atol)
                  for a, e in zip(actual, expected, strict=True))
    print(f"max abs error vs onnxruntime: {max_err:.3g}; outputs match: {matches}")
    return 0 if scheduled > 0 and matches else 1


if __name__ == "__main__":
    sys.exit(main())
