"""Process-wide TVM set-up: quiet logs and only the tensor intrinsics a target needs."""

from __future__ import annotations

import importlib.util
import logging
import sys

_INTRINSICS_PACKAGE = "tvm.s_tir.tensor_intrin"


def load_tensor_intrinsics(target) -> None:
    """Register the tensor intrinsics for `target` before a TuneContext is made.

    TuneContext imports every intrinsic package (about 30 s here, mostly CUDA's). For CPU targets
    only the x86/ARM sets matter, so the package shell is created without running its __init__ and
    just those submodules are imported (under a second). GPU targets load everything.
    """
    if _INTRINSICS_PACKAGE in sys.modules:
        return
    if target.kind.name != "llvm":
        importlib.import_module(_INTRINSICS_PACKAGE)
        return
    import tvm.s_tir  # noqa: F401  (the parent package must exist first)

    spec = importlib.util.find_spec(_INTRINSICS_PACKAGE)
    package = importlib.util.module_from_spec(spec)
    sys.modules[_INTRINSICS_PACKAGE] = package
    for name in ("x86", "arm_cpu"):
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
