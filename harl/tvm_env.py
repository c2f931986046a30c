"""Process-wide TVM set-up: quiet logs and only the tensor intrinsics a target needs."""

from __future__ import annotations

import importlib.util
import logging
import sys

_INTRINSICS_PACKAGE = "tvm.s_tir.tensor_intrin"
_GPU_INTRINSICS = ("cuda", "rocm")


def load_tensor_intrinsics(target) -> None:
    """Register the tensor intrinsics for `target` before a TuneContext is made.

    TuneContext imports every intrinsic package (about 30 s here, mostly CUDA's). For CPU targets
    only the x86/ARM sets matter, so the package shell is created without running its __init__ and
    just those submodules are imported (under a second). GPU targets load the GPU sets, also
    after a CPU target in the same process.
    """
    cpu = target.kind.name == "llvm"
    if _INTRINSICS_PACKAGE not in sys.modules:
        if not cpu:
            importlib.import_module(_INTRINSICS_PACKAGE)
            return
        import tvm.s_tir  # noqa: F401  (the parent package must exist first)

        spec = importlib.util.find_spec(_INTRINSICS_PACKAGE)
        sys.modules[_INTRINSICS_PACKAGE] = importlib.util.module_from_spec(spec)
    # the shell of an earlier CPU target lacks the GPU sets (imported ones are not run again)
    for name in ("x86", "arm_cpu") if cpu else _GPU_INTRINSICS:
        importlib.import_module(f"{_INTRINSICS_PACKAGE}.{name}")


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
