"""Every use harl makes of TVM's private parts, in one module.

Each function reaches one internal of TVM 0.27 that has no public equivalent. When a TVM
upgrade removes or renames it, the function raises TvmInternalsChanged naming the internal and
the installed version, so the upgrade fails here and nowhere else (tests/test_tvm_adapter.py
exercises every function).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import sys

#: The TVM release these internals were read from.
CHECKED_VERSION = "0.27"

_INTRINSICS_PACKAGE = "tvm.s_tir.tensor_intrin"


class TvmInternalsChanged(RuntimeError):
    """A TVM internal harl relies on is missing or changed (a TVM version harl was not made for)."""

    def __init__(self, internal: str, error: BaseException) -> None:
        try:
            import tvm

            version = tvm.__version__
        except ImportError:  # pragma: no cover  (no TVM at all)
            version = "unknown"
        super().__init__(
            f"TVM {version} lacks `{internal}`, which harl uses (checked on TVM "
            f"{CHECKED_VERSION}): {type(error).__name__}: {error}")
        self.internal = internal


@contextlib.contextmanager
def _reaching(internal: str):
    """Turn a missing attribute, module or function inside into TvmInternalsChanged."""
    try:
        yield
    except (AttributeError, ImportError, KeyError) as err:
        raise TvmInternalsChanged(internal, err) from err


# --- derived objects: the Python instance behind a TVM object, and back -------------------------

def python_instance(obj, default=None):
    """`obj._inst`: the Python object (an XGBModel's trainer, for one) behind a derived_object
    wrapper, whose data and methods the wrapper does not expose; `default` when `obj` is not
    such a wrapper."""
    if obj is None or not hasattr(type(obj), "_cls"):  # not made by tvm.ir.utils.derived_object
        return default
    with _reaching("derived_object's _inst"):
        return obj._inst


def xgb_trainer(**kwargs):
    """A MetaSchedule XGBModel(**kwargs)'s Python trainer (`XGBModel(...)._inst`), which holds
    the booster, the training data and `_predict`/`_train`."""
    from tvm.s_tir import meta_schedule as ms

    return python_instance(ms.cost_model.XGBModel(**kwargs))


def xgb_predict(trainer, xs):
    """`XGBModel._predict`: scores for raw feature arrays, without a TuneContext."""
    with _reaching("XGBModel._predict"):
        predict = trainer._predict
    return predict(xs=xs)


def xgb_train(trainer, xs, ys) -> None:
    """`XGBModel._train`: fit the booster on raw feature arrays and throughputs."""
    with _reaching("XGBModel._train"):
        train = trainer._train
    train(xs=xs, ys=ys)


def wrap_cost_model_update(trainer, around) -> None:
    """Make the cost model call `around(update, *args, **kwargs)` for each update: the derived
    object looks `update` up on the Python instance at every call, so replacing it there
    reaches TVM's tuning loop."""
    with _reaching("XGBModel.update"):
        update = trainer.update

    def wrapped(*args, **kwargs):
        return around(update, *args, **kwargs)

    trainer.update = wrapped


def scheduler_tasks(py_scheduler) -> list:
    """The task records of the TVM task scheduler a PyTaskScheduler instance serves
    (`self._outer().tasks_`): `next_task_id` gets no arguments, so this is its only way to
    the tasks."""
    with _reaching("derived_object's _outer"):
        outer = py_scheduler._outer()
    with _reaching("TaskScheduler.tasks_"):
        return list(outer.tasks_)


def initialize_search_strategy(strategy, context) -> None:
    """`SearchStrategy._initialize_with_tune_context`, for a strategy wrapped in another (the
    wrapper is initialised by TVM; it passes the context on)."""
    with _reaching("SearchStrategy._initialize_with_tune_context"):
        initialize = strategy._initialize_with_tune_context
    initialize(context)


# --- a module's statements held, so that TVM's schedules copy them before writing ---------------

def pinned_statements(mod) -> list:
    """Every statement of `mod`'s TIR functions, to hold while schedules of `mod` exist.

    A TVM 0.27 schedule writes a loop nest in place when each For and SBlock above it has one
    owner, without looking at the statements between them: once a primitive has replaced the
    root block (an annotation), the nest below it is still shared with `mod` through the root's
    SeqStmt, and a later Fuse or Vectorize rewrites `mod` itself. The schedules of `mod` then
    hold pointers into freed statements (double frees, `exit()` from a postproc) and the
    database stores a rewritten workload that TVM cannot load. A second owner of each
    statement makes TVM copy it instead.
    """
    from tvm import tirx

    found: list = []

    def visit(stmt) -> None:
        found.append(stmt)
        for name in ("body", "block", "init", "then_case", "else_case"):
            child = getattr(stmt, name, None)
            if isinstance(child, tirx.Stmt):
                visit(child)
        for child in getattr(stmt, "seq", None) or ():
            visit(child)

    for _, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            visit(func.body)
    return found


# --- schedule primitives without the Python layer's type checks ---------------------------------

@functools.cache
def _schedule_ffi():
    with _reaching("tvm.s_tir.schedule._ffi_api"):
        from tvm.s_tir.schedule import _ffi_api

        return (_ffi_api.ScheduleGet, _ffi_api.ScheduleGetConsumers, _ffi_api.ScheduleGetLoops,
                _ffi_api.ScheduleComputeAt, _ffi_api.ScheduleComputeInline, _ffi_api.ScheduleSeed)


def loop_extents(sch, loops) -> list[int | None]:
    """Each loop's constant extent (None where it is not one), through `_ffi_api.ScheduleGet`:
    `sch.get` checks every argument's type first (20x the call's cost, under the GIL, on the
    replay threads' hot path); arguments from traces have nothing for it to catch."""
    from tvm.tirx import IntImm

    get = _schedule_ffi()[0]
    extents = [get(sch, loop).extent for loop in loops]
    return [int(e) if isinstance(e, IntImm) else None for e in extents]


def get_consumers(sch, block) -> list:
    """`_ffi_api.ScheduleGetConsumers`: `sch.get_consumers` without its type check."""
    return list(_schedule_ffi()[1](sch, block))


def get_loops(sch, block) -> list:
    """`_ffi_api.ScheduleGetLoops`: `sch.get_loops` without its type check."""
    return list(_schedule_ffi()[2](sch, block))


def compute_at(sch, block, loop) -> None:
    """`_ffi_api.ScheduleComputeAt` preserving unit loops, at the end of the loop's body
    (MetaSchedule's form), without `sch.compute_at`'s type check."""
    _schedule_ffi()[3](sch, block, loop, True, -1)


def compute_inline(sch, block) -> None:
    """`_ffi_api.ScheduleComputeInline`: `sch.compute_inline` without its type check."""
    _schedule_ffi()[4](sch, block)


def seed(sch, value: int) -> None:
    """`_ffi_api.ScheduleSeed`: `sch.seed` without its type check."""
    _schedule_ffi()[5](sch, value)


# --- tensor intrinsics: import only the sets a target can use -----------------------------------

def import_tensor_intrinsics(sets) -> None:
    """Import the given submodules of tvm.s_tir.tensor_intrin without the package's __init__,
    which imports every set (30-70 s, most of it CUDA's): a package shell put in `sys.modules`
    makes TuneContext's own import of the package find it done."""
    if _INTRINSICS_PACKAGE not in sys.modules:
        import tvm.s_tir  # noqa: F401  (the parent package must exist first)

        spec = importlib.util.find_spec(_INTRINSICS_PACKAGE)
        if spec is None:
            raise TvmInternalsChanged(_INTRINSICS_PACKAGE, ImportError("no such package"))
        sys.modules[_INTRINSICS_PACKAGE] = importlib.util.module_from_spec(spec)
    with _frames_of_no_file_skip_the_module_scan(), _reaching(_INTRINSICS_PACKAGE):
        for name in sets:
            importlib.import_module(f"{_INTRINSICS_PACKAGE}.{name}")


@contextlib.contextmanager
def _frames_of_no_file_skip_the_module_scan():
    """Make `inspect.getmodule` answer at once for frames of no file, such as the importer's.

    TVMScript calls `inspect.stack()` for every function it parses, and for a frame of
    `<frozen importlib._bootstrap>` (or `<string>`, `<ast>`) getmodule scans all of
    `sys.modules` before it returns None; with torch loaded that scan was most of the CUDA
    set's import time. What TVMScript reads of the stack is the same either way.
    """
    scanning_getmodule = inspect.getmodule

    def getmodule(obj, _filename=None):
        has_a_file = inspect.isframe(obj) or inspect.iscode(obj) or inspect.istraceback(obj)
        if has_a_file and (_filename or inspect.getfile(obj)).startswith("<"):
            return None
        return scanning_getmodule(obj, _filename)

    inspect.getmodule = getmodule
    try:
        yield
    finally:
        if inspect.getmodule is getmodule:  # not another thread's, set in the meantime
            inspect.getmodule = scanning_getmodule


# --- custom schedule rules ------------------------------------------------------------------------

def _schedule_rule_names(target_keys, rule: str) -> list[str]:
    """The global function names MetaSchedule looks a block's `schedule_rule` up under."""
    return [f"s_tir.meta_schedule.{key}.{rule}" for key in target_keys]


def schedule_rule_served(target_keys, rule: str) -> bool:
    """Whether a global function serves the custom schedule rule `rule` for any of the keys
    (MetaSchedule's naming, `s_tir.meta_schedule.<key>.<rule>`, is its own)."""
    import tvm

    return any(tvm.get_global_func(name, allow_missing=True)
               for name in _schedule_rule_names(target_keys, rule))


def serve_schedule_rule(target_key: str, rule: str, func) -> None:
    """Register `func(sch, block) -> [sch, ...]` as the custom schedule rule `rule` for
    `target_key`, under the global name MetaSchedule looks it up by."""
    import tvm

    tvm.register_global_func(_schedule_rule_names([target_key], rule)[0], func)


# --- importers, runners and modules ---------------------------------------------------------------

def onnx_convert_map() -> dict:
    """The ONNX importer's operator table (`onnx_frontend._get_convert_map`): which operators
    TVM imports, so harl lowers only the others."""
    with _reaching("tvm.relax.frontend.onnx.onnx_frontend._get_convert_map"):
        from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map
    return _get_convert_map()


def rpc_worker_func():
    """MetaSchedule's RPC measurement (`rpc_runner._worker_func`: session, upload, time, clean
    up), which harl's runner submits with its own argument set-up."""
    with _reaching("tvm.s_tir.meta_schedule.runner.rpc_runner._worker_func"):
        from tvm.s_tir.meta_schedule.runner.rpc_runner import _worker_func
    return _worker_func


def pack_imports(host_module) -> bytes:
    """The host module's import blob (the global `runtime.ModulePackImportsToTensor`), which
    harl rewrites to ship CUDA kernels as fatbins."""
    import tvm_ffi

    pack = tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor", allow_missing=True)
    if pack is None:
        raise TvmInternalsChanged("runtime.ModulePackImportsToTensor",
                                  KeyError("no such global function"))
    return bytes(pack(host_module).numpy().tobytes())


def imported_modules(host_module, kind: str) -> list:
    """The modules of `kind` in the host module's import tree (`_collect_from_import_tree`)."""
    with _reaching("Module._collect_from_import_tree"):
        collect = host_module._collect_from_import_tree
    return list(collect(lambda m: m.kind == kind))
