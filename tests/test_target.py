"""--target parsing."""

import contextlib
import importlib
import inspect
import subprocess
import sys

import pytest
from conftest import ROOT, matmul_module

from harl.errors import HarlError
from harl.target import is_gpu, local_cpu_count, parse_target
from harl.tvm_adapter import _frames_of_no_file_skip_the_module_scan
from harl.tvm_env import intrinsic_sets, load_tensor_intrinsics


def test_default_is_this_cpu():
    target = parse_target(None)
    assert target.kind.name == "llvm"
    assert int(target.attrs["num-cores"]) == local_cpu_count()
    assert str(target.attrs["mcpu"])
    assert not is_gpu(target)


def test_json_llvm_keeps_host_defaults_and_overrides():
    target = parse_target('{"kind": "llvm", "num-cores": 1}')
    assert int(target.attrs["num-cores"]) == 1
    assert str(target.attrs["mcpu"])


def test_cuda_and_tag_get_a_host():
    cuda = parse_target("cuda")
    assert cuda.kind.name == "cuda" and is_gpu(cuda) and cuda.host is not None
    tagged = parse_target("nvidia/nvidia-a100")
    assert str(tagged.attrs["arch"]) == "sm_80" and tagged.host is not None


@pytest.mark.parametrize("spec", ["no-such-target", '{"kind": "nope"}', "{not json"])
def test_unknown_target_is_a_one_line_error(spec):
    with pytest.raises(HarlError, match="unknown target") as info:
        parse_target(spec)
    assert "\n" not in str(info.value)


def test_plain_cuda_target_initialises_metaschedules_cuda_rules():
    """`--target cuda` carries the limits that MetaSchedule's CUDA rules (auto-bind) read."""
    from tvm.s_tir import meta_schedule as ms

    target = parse_target("cuda")
    load_tensor_intrinsics(target)
    assert int(target.attrs["max_threads_per_block"]) >= 32
    assert int(target.attrs["max_shared_memory_per_block"]) > 0
    ctx = ms.TuneContext(mod=matmul_module(64), target=target, space_generator="post-order-apply",
                         search_strategy="replay-trace", task_name="matmul", num_threads=1)
    assert len(ctx.generate_design_space()) >= 1


def test_a_json_cuda_target_gets_the_limits_and_a_host():
    target = parse_target('{"kind": "cuda", "arch": "sm_86", "max_threads_per_block": 512}')
    assert str(target.attrs["arch"]) == "sm_86" and target.host is not None
    assert int(target.attrs["max_threads_per_block"]) == 512  # the user's keys win
    assert int(target.attrs["max_shared_memory_per_block"]) > 0


def test_another_cpus_triple_drops_this_hosts_mcpu():
    arm = parse_target('{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}')
    assert "mcpu" not in arm.attrs and bool(arm.attrs["feature.is_aarch64"])


@pytest.mark.parametrize("spec, sets", [
    ("llvm", ("x86",)),  # this machine
    ('{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}', ("arm_cpu",)),
    ('{"kind": "llvm", "mtriple": "riscv64-unknown-linux-gnu"}', ("riscv_cpu",)),
    ("nvidia/nvidia-a100", ("cuda", "dot_product_common")),
])
def test_a_target_loads_only_the_intrinsics_its_rules_use(spec, sets):
    assert intrinsic_sets(parse_target(spec)) == sets


def test_a_cpu_run_tunes_without_the_gpu_intrinsics():
    """In a fresh process, as harl.tune starts: TuneContext finds the package loaded."""
    probe = """
import sys
from tvm import IRModule, te
from tvm.s_tir import meta_schedule as ms
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics
target = parse_target("llvm")
load_tensor_intrinsics(target)
a, b = te.placeholder((16, 16), name="A"), te.placeholder((16, 16), name="B")
k = te.reduce_axis((0, 16), name="k")
c = te.compute((16, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
ctx = ms.TuneContext(mod=IRModule({"main": te.create_prim_func([a, b, c])}), target=target,
                     space_generator="post-order-apply", search_strategy="replay-trace",
                     task_name="matmul", num_threads=1)
assert ctx.generate_design_space()
print(sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("tvm.s_tir.tensor_intrin.")))
"""
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "['x86']"


PROBE = """
import inspect
def frames():
    return [(f.filename, f.lineno, f.function, f.code_context,
             getattr(inspect.getmodule(f.frame), "__name__", None)) for f in inspect.stack()]
exec(compile("STACK = frames()", "<string>", "exec"))
"""


def stack_seen_while_importing(shortcut: bool) -> list:
    """inspect.stack() and each frame's module, as TVMScript sees them inside an import."""
    sys.modules.pop("stack_probe", None)
    with _frames_of_no_file_skip_the_module_scan() if shortcut else contextlib.nullcontext():
        return importlib.import_module("stack_probe").STACK


def test_the_intrinsics_stack_walks_see_what_a_full_module_scan_sees(tmp_path, monkeypatch):
    (tmp_path / "stack_probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(tmp_path)
    scanning_getmodule = inspect.getmodule
    plain, shortcut = (stack_seen_while_importing(s) for s in (False, True))
    assert inspect.getmodule is scanning_getmodule  # put back after the import
    assert shortcut == plain
    no_file = [f for f in plain if f[0].startswith("<")]
    assert {"<string>", "<frozen importlib._bootstrap>"} <= {f[0] for f in no_file}
    assert all(f[4] is None for f in no_file)
    assert plain[0][4] == "stack_probe"  # the probe's own frame has its module
