"""--target parsing."""

import pytest

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
