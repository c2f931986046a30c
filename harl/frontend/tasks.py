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


def fuse_for_tuning(mod, target):
    """Lower Relax ops to fused TIR functions, as compile_relax does before applying a database."""
    import tvm
    from tvm import relax

    passes = [
        *relax.pipeline.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def task_flop(mod) -> float:
    """TVM's estimate of a task's floating-point operations (0 where it cannot count them)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001  (an estimate: a task it cannot count is still tuned)
        return 0.0


def extract_tasks(relax_mod, target) -> list[TuningTask]:
    """The model's distinct tunable subgraphs, largest FLOP share first."""
    from tvm.s_tir import meta_schedule as ms

    fused = fuse_for_tuning(relax_mod, target)
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
