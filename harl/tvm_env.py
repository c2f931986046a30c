"""Process-wide TVM set-up: quiet logs and only the tensor intrinsics a target needs."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import platform
import sys

from harl.tvm_adapter import import_tensor_intrinsics, schedule_rule_served, serve_schedule_rule

#: What the package's __init__ imports: every set, for target kinds harl has no entry for.
_ALL_INTRINSICS = ("cuda", "arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu")
#: The sets MetaSchedule's rules can ask for on each kind (CUDA's int8 rules use the dp4a
#: dot products of dot_product_common; arm_cpu and rocm import it themselves).
_GPU_INTRINSICS = {"cuda": ("cuda", "dot_product_common"), "rocm": ("rocm",)}
_CPU_INTRINSICS = {"aarch64": ("arm_cpu",), "arm": ("arm_cpu",), "riscv": ("riscv_cpu",)}


def intrinsic_sets(target) -> tuple[str, ...]:
    """The submodules of tvm.s_tir.tensor_intrin that `target`'s schedule rules can use."""
    kind = target.kind.name
    if kind == "llvm":  # the rules pick a CPU's sets by the target's (else this host's) triple
        triple = str(target.attrs.get("mtriple", "") or platform.machine()).lower()
        arch = next((a for a in _CPU_INTRINSICS if triple.startswith(a)), None)
        return _CPU_INTRINSICS[arch] if arch else ("x86",)
    return _GPU_INTRINSICS.get(kind, _ALL_INTRINSICS)


def load_tensor_intrinsics(target) -> None:
    """Register the tensor intrinsics for `target` before a TuneContext is made.

    Only the sets `target` can use are imported, not the whole package TuneContext would
    import (x86's in under a second instead of 30-70 s). Sets of another target in the same
    process are imported when that target asks (an imported one is not run again).
    """
    import_tensor_intrinsics(intrinsic_sets(target))


def quiet_tvm_loggers(log_file=None) -> None:
    """Send MetaSchedule's chatty loggers to a file (or nowhere) instead of the terminal."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    ms_logger.propagate = False
    ms_logger.handlers.clear()
    if log_file is not None:
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        ms_logger.addHandler(handler)
        ms_logger.setLevel(logging.INFO)
    else:
        ms_logger.addHandler(logging.NullHandler())


@contextlib.contextmanager
def native_logs_into(log_file):
    """Append what TVM's C++ code writes to stderr (its LOG(WARNING)s, such as the "Fast mode
    segfaults" of every `take` legalised: 144 lines on Swin-T) to `log_file` while inside.

    Those go to file descriptor 2 straight from C++, past Python's sys.stderr, so the
    descriptor itself is pointed at the file, and back on the way out (before any error of the
    block reaches the terminal). The block's garbage is collected before that: a converter
    that failed leaves a BlockBuilder in a reference cycle, which warns when it is freed."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log_file, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        try:
            gc.collect()
            sys.stderr.flush()
        finally:  # whatever the flush raises (a full disk, a second Ctrl-C), stderr comes back
            os.dup2(saved, 2)
            os.close(saved)


def serve_unknown_schedule_rules(mods, target) -> list[str]:
    """Give each custom schedule rule that a block of `mods` names, and that no function serves
    for `target`'s keys, one that does what MetaSchedule does then: drop the annotation, so
    that its default rules schedule the block. Legalised pools name `meta_schedule.pool_max`
    and `pool_avg`, which TVM serves for no target, and MetaSchedule warns from C++ each time
    it builds such a task's design space. The rules given a function are returned (none already
    served are touched)."""
    keys = [str(key) for key in target.keys]
    named = {rule for mod in mods for rule in _block_schedule_rules(mod)} - {"None"}
    served = []
    for rule in sorted(named):
        if keys and not schedule_rule_served(keys, rule):
            serve_schedule_rule(keys[0], rule, _drop_schedule_rule)
            served.append(rule)
    return served


def _drop_schedule_rule(sch, block):
    sch.unannotate(block, "schedule_rule")
    return [sch]


def _block_schedule_rules(mod) -> set[str]:
    """The `schedule_rule` annotations of the blocks of `mod` (an IRModule of one PrimFunc)."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    try:
        pending = [sch.get_sblock("root")]
    except Exception:  # noqa: BLE001  (a function without a root block: none to annotate)
        return set()
    rules = set()
    while pending:
        block = pending.pop()
        rule = sch.get(block).annotations.get("schedule_rule")
        if rule is not None:
            rules.add(str(rule))
        pending.extend(sch.get_child_blocks(block))
    return rules
