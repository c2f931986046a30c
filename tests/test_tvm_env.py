"""TVM's C++ warnings go to the run's log, not the user's terminal."""

import gc
import io
import os
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
