"""The persistent builder: real TVM builds, failures as results, workers reused."""

import os

import tvm
from conftest import matmul_module
from tvm.s_tir.meta_schedule.builder import BuilderInput

from harl.measure.builder import PersistentBuilder, remove_build_dir
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
