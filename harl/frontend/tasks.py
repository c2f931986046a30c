"""Legalise and fuse a Relax module, then cut it into MetaSchedule tuning tasks."""

from __future__ import annotations

from dataclasses import dataclass

from harl.errors import HarlError


@dataclass(frozen=True)
class TuningTask:
    """One fused subgraph to tune: a TIR module, how often the model calls it, its FLOPs."""

    name: str
    mod: object  # tvm.IRModule holding one PrimFunc "main"
    weight: float
    flop: float


def fusion_passes(target, *, prepack_weights: bool) -> list:
    """Relax passes that lower a model's ops to fused TIR functions, as TVM's compile_relax
    does before applying a database; the tuning tasks are these functions.

    With `prepack_weights` on a CPU, each function's constant arguments are marked layout-free
    (TVM's cpu_weight_prepack): MetaSchedule's RewriteLayout postproc then lets a schedule read
    its weights in the order its loops walk them, and compile_model folds that packing into the
    constants, so a conv or matmul streams contiguous weights instead of striding over them."""
    from tvm import relax

    from harl.target import is_gpu

    passes = [
        *relax.pipeline.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    if prepack_weights and not is_gpu(target):
        passes.append(relax.transform.AttachAttrLayoutFreeBuffers())
    return passes


def fuse_for_tuning(mod, target, *, prepack_weights: bool = False):
    """`mod` lowered to fused TIR functions (see fusion_passes)."""
    import tvm

    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(fusion_passes(target,
                                                      prepack_weights=prepack_weights))(mod)


def prepacks_weights(database) -> bool:
    """Whether the runs that filled `database` tuned with prepacked weights (fusion_passes):
    their workloads carry the layout-free marks, and a build must mark its functions alike for
    the records to apply."""
    return any(_marks_layout_free(record.workload.mod)
               for record in database.get_all_tuning_records())


def _marks_layout_free(mod) -> bool:
    attrs = mod["main"].attrs
    return attrs is not None and "layout_free_buffers" in attrs


def task_flop(mod) -> float:
    """TVM's estimate of a task's floating-point operations (0 where it cannot count them)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001  (an estimate: a task it cannot count is still tuned)
        return 0.0


def extract_tasks(relax_mod, target, *, prepack_weights: bool = False) -> list[TuningTask]:
    """The model's distinct tunable subgraphs, largest FLOP share first (`prepack_weights`:
    see fusion_passes)."""
    from tvm.s_tir import meta_schedule as ms

    fused = fuse_for_tuning(relax_mod, target, prepack_weights=prepack_weights)
    extracted = ms.relax_integration.extract_tasks(fused, target)
    tasks = []
    for task in extracted:
        mod = task.dispatched[0]
        if mod.attrs is not None and mod.attrs.get("tirx.is_scheduled", False):
            continue
        tasks.append(TuningTask(task.task_name, mod, float(task.weight), task_flop(mod)))
    if not tasks:
        raise HarlError("the model has no tunable subgraphs")
    tasks.sort(key=lambda t: -t.weight * t.flop)
    return tasks
