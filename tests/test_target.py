"""--target parsing."""

import pytest
from conftest import matmul_module

from harl.errors import HarlError
from harl.target import is_gpu, local_cpu_count, parse_target


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
