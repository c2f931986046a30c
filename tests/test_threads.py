"""TVM's CPU runtime runs on every physical core harl may use, not TVM's half-of-CPUs default."""

import os
import subprocess
import sys

from conftest import ROOT

from harl.measure.threads import physical_core_count, use_physical_cores


def _topology(root, cpu, package, core):
    topology = root / f"cpu{cpu}" / "topology"
    topology.mkdir(parents=True)
    (topology / "physical_package_id").write_text(f"{package}\n")
    (topology / "core_id").write_text(f"{core}\n")


def test_hyper_threads_of_one_core_count_once(tmp_path):
    for cpu, (package, core) in enumerate([(0, 0), (0, 0), (0, 1), (0, 1), (1, 0)]):
        _topology(tmp_path, cpu, package, core)
    assert physical_core_count({0, 1, 2, 3, 4}, sysfs=tmp_path) == 3
    assert physical_core_count({0, 1}, sysfs=tmp_path) == 1
    assert physical_core_count({0, 2}, sysfs=tmp_path) == 2


def test_without_topology_each_cpu_is_a_core(tmp_path):
    assert physical_core_count({0, 5, 7}, sysfs=tmp_path) == 3


def test_a_thread_count_the_user_chose_is_kept():
    for name in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        environ = {name: "3"}
        assert use_physical_cores(environ) == (3, False)
        assert environ == {name: "3"}
    environ = {"TVM_NUM_THREADS": ""}
    assert use_physical_cores(environ) == (physical_core_count(), True)
    assert environ["TVM_NUM_THREADS"] == str(physical_core_count())


def test_tvm_runtime_takes_one_thread_per_physical_core():
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    probe = ("from harl.measure.threads import use_physical_cores; use_physical_cores(); "
             "import tvm; print(tvm.get_global_func('runtime.NumThreads')())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120, check=True).stdout
    assert int(out.split()[-1]) == physical_core_count()
