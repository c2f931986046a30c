"""TVM's C++ warnings go to the run's log, not the user's terminal."""

import gc
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import save_model, save_shape_computing_model
from onnx import TensorProto, helper, numpy_helper

from harl.frontend.onnx_model import import_model, load_onnx
from harl.frontend.tasks import extract_tasks
from harl.target import parse_target
from harl.tvm_env import native_logs_into


def test_what_native_code_writes_to_stderr_goes_to_the_log_while_inside(tmp_path, capfd):
    log = tmp_path / "tvm.log"
    log.write_text("before\n")
    with native_logs_into(log):
        os.write(2, b"from C++\n")
    os.write(2, b"after\n")
    assert log.read_text() == "before\nfrom C++\n"
    assert capfd.readouterr().err == "after\n"


def test_tvms_warnings_on_a_gather_stay_out_of_the_terminal(tmp_path, capfd):
    # TVM legalises an ONNX Gather into a `take` in its fast mode and warns in C++ each time.
    table = numpy_helper.from_array(np.arange(12, dtype="float32").reshape(6, 2), "table")
    path = save_model(tmp_path / "gather.onnx", [helper.make_node("Gather", ["table", "i"], ["y"])],
                      [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], [table])
    log = tmp_path / "tvm.log"
    with native_logs_into(log):
        _, mod = import_model(load_onnx(path))
        assert extract_tasks(mod, parse_target(None))
    assert "Fast mode" in log.read_text()
    assert "Fast mode" not in capfd.readouterr().err


def test_a_refused_converter_leaves_no_warning_for_later(tmp_path, capfd):
    # TVM refuses this pad (its width computed in the graph) and harl imports the folded graph;
    # the refused converter's BlockBuilder warns in C++ when the garbage collector frees it.
    path = save_shape_computing_model(tmp_path / "pad.onnx", "pad")
    with native_logs_into(tmp_path / "tvm.log"):
        import_model(load_onnx(path))
    gc.collect()
    assert "BlockBuilder" in (tmp_path / "tvm.log").read_text()
    assert "BlockBuilder" not in capfd.readouterr().err


class FullDisk(io.StringIO):
    def flush(self):
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("failure", ["in the block", "in the flush on the way out"])
def test_stderr_comes_back_whatever_the_block_or_its_flush_raises(tmp_path, capfd, monkeypatch,
                                                                  failure):
    open_before = set(os.listdir("/proc/self/fd"))
    with pytest.raises((KeyboardInterrupt, OSError)), native_logs_into(tmp_path / "tvm.log"):
        if failure == "in the block":
            raise KeyboardInterrupt
        monkeypatch.setattr(sys, "stderr", FullDisk())
    monkeypatch.undo()
    os.write(2, b"back\n")
    assert capfd.readouterr().err == "back\n"
    assert set(os.listdir("/proc/self/fd")) == open_before  # the saved descriptor is closed


DESIGN_SPACES = """
import sys
from harl.frontend.onnx_model import import_model, load_onnx
from harl.frontend.tasks import extract_tasks
from harl.target import parse_target
from harl.tvm_env import load_tensor_intrinsics, serve_unknown_schedule_rules
from tvm.s_tir import meta_schedule as ms

target = parse_target("llvm")
load_tensor_intrinsics(target)
_, mod = import_model(load_onnx(sys.argv[1]))
pools = [task.mod for task in extract_tasks(mod, target) if "pool" in task.name]
assert len(pools) == 2, pools

def design_spaces():
    return [[str(space.trace) for space in ms.TuneContext(
        mod=pool, target=target, space_generator="post-order-apply", rand_state=1,
    ).generate_design_space()] for pool in pools]

before = design_spaces()
served = serve_unknown_schedule_rules(pools, target)
print("served", served, file=sys.stderr, flush=True)
print("same" if design_spaces() == before else "different", flush=True)
"""


def test_pools_design_spaces_are_built_without_a_warning_and_unchanged(tmp_path):
    # Legalised pools name schedule rules TVM serves for no target: MetaSchedule warned for
    # each pool task as tuning started, then dropped the annotation. harl's function for those
    # rules does the same, silently, in a fresh process (registered rules stay for its life).
    path = save_model(
        tmp_path / "pools.onnx",
        [helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])])
    result = subprocess.run([sys.executable, "-c", DESIGN_SPACES, str(path)], capture_output=True,
                            text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "same"
    before, after = result.stderr.split("served ['meta_schedule.pool_avg', "
                                        "'meta_schedule.pool_max']\n")
    assert before.count("Unknown schedule rule") == 2
    assert "schedule rule" not in after
