"""The persistent builder: real TVM builds, failures as results, workers reused."""

import os

import pytest
import tvm
from conftest import matmul_module
from tvm.s_tir.meta_schedule.builder import BuilderInput

from harl.measure.artifacts import remove_build_dir
from harl.measure.build_pool import BuildJob
from harl.measure.builder import PersistentBuilder
from harl.target import parse_target


def test_builds_loadable_artifacts_and_reuses_workers():
    target = parse_target(None)
    builder = PersistentBuilder(max_workers=1, timeout_s=60)
    first, second = [], []
    try:
        first = builder.build([BuilderInput(matmul_module(), target)])
        pool = builder._pool
        second = builder.build([BuilderInput(matmul_module(16), target)])
        assert builder._pool is pool
        for result in first + second:
            assert result.error_msg is None and os.path.exists(result.artifact_path)
        assert tvm.runtime.load_module(first[0].artifact_path) is not None
    finally:
        builder.shutdown()
        for result in first + second:
            if result.artifact_path:
                remove_build_dir(result.artifact_path)


def test_timeout_is_an_error_result_not_a_crash():
    builder = PersistentBuilder(max_workers=1, timeout_s=0.001)
    try:
        (result,) = builder.build([BuilderInput(matmul_module(), parse_target(None))])
        assert result.artifact_path is None and "timed out" in result.error_msg
    finally:
        builder.shutdown()


class CtrlCWhileBuilding:
    """A pool whose first build is done and whose second still runs when Ctrl-C comes."""

    def __init__(self, folder) -> None:
        self.folder, self.jobs = folder, []

    def submit(self, _fn, *_args):
        job = BuildJob()
        if not self.jobs:
            job.future.set_result(str(self.folder / "candidate.tar"))
        self.jobs.append(job)
        return job

    def wait(self, jobs, cutoff, check=None, earlier_s=()):
        raise KeyboardInterrupt


def test_ctrl_c_while_a_batch_builds_removes_the_builds_already_done(tmp_path):
    folder = tmp_path / "harl_build_done"
    folder.mkdir()
    (folder / "candidate.tar").write_bytes(b"")
    builder = PersistentBuilder(max_workers=1, timeout_s=60)
    builder._pool = CtrlCWhileBuilding(folder)
    with pytest.raises((KeyboardInterrupt, RuntimeError)):  # through TVM's FFI: RuntimeError
        builder.build([BuilderInput(matmul_module(), parse_target(None))] * 2)
    assert not folder.exists()  # the batch is never measured: nothing will remove it later
