"""CUDA candidates on a machine without a GPU: design space, nvcc build, fatbin in the library."""

from __future__ import annotations

import ctypes
import os
import shutil
import struct

import numpy as np
import pytest
import tvm
from conftest import matmul_module
from tvm.s_tir.meta_schedule.builder import BuilderInput

from harl.measure.artifacts import remove_build_dir
from harl.measure.builder import PersistentBuilder
from harl.measure.cuda_build import (
    FATBIN_MAGIC,
    LIBRARY_SYMBOL,
    parse_library_blob,
    serialize_library_blob,
    split_cuda_payload,
)
from harl.target import gpu_visible, parse_target
from harl.tvm_env import load_tensor_intrinsics

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
ELF_MACHINE_CUDA = 190
# Where a GPU (so a CUDA runtime) is here, TVM's codegen compiles the kernels itself (a cubin
# through NVRTC, a fatbin through nvcc) and harl leaves them; elsewhere harl compiles the source.
CODEGEN_COMPILES_HERE = gpu_visible()


@pytest.fixture(scope="module")
def cuda_target():
    target = parse_target("nvidia/nvidia-a100")  # sm_80, host: this CPU
    load_tensor_intrinsics(target)  # also where an earlier test loaded only the CPU's
    return target


@pytest.fixture(scope="module")
def cuda_candidates(cuda_target):
    """Candidates of a 64x64 matmul from MetaSchedule's CUDA design space, postprocessed."""
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(mod=matmul_module(64), target=cuda_target,
                         space_generator="post-order-apply", search_strategy="replay-trace",
                         task_name="matmul", rand_state=0, num_threads=1)
    spaces = ctx.generate_design_space()
    ctx.pre_tuning(max_trials=2, num_trials_per_iter=2, design_spaces=spaces)
    return spaces, ctx.generate_measure_candidates()


def library_blob(path: str) -> bytes:
    """The packed import blob TVM's loader reads from a built library."""
    library = ctypes.CDLL(path, mode=os.RTLD_LAZY)  # TVM is loaded, so its symbols resolve
    address = ctypes.addressof(ctypes.c_char.in_dll(library, LIBRARY_SYMBOL))
    (size,) = struct.unpack("<Q", ctypes.string_at(address, 8))
    return ctypes.string_at(address, size + 8)


def fatbin_entries(fatbin: bytes) -> list[tuple[str, int, bytes]]:
    """(kind, sm version, payload) of each entry: 'elf' (SASS) or 'ptx' (possibly compressed)."""
    magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", fatbin, 0)
    assert magic == FATBIN_MAGIC
    entries, offset = [], header_size
    while offset < header_size + body_size:
        kind, _, entry_header, payload_size = struct.unpack_from("<HHIQ", fatbin, offset)
        (arch,) = struct.unpack_from("<I", fatbin, offset + 28)
        start = offset + entry_header
        entries.append(({1: "ptx", 2: "elf"}[kind], arch, fatbin[start:start + payload_size]))
        offset = start + payload_size
    return entries


def test_cuda_design_space_generates(cuda_candidates):
    spaces, candidates = cuda_candidates
    assert len(spaces) >= 1 and len(candidates) == 2
    bound = str(candidates[0].sch.mod)
    assert "threadIdx.x" in bound and "blockIdx.x" in bound


def test_cuda_candidate_builds_to_a_library_with_fatbin_device_code(cuda_target,
                                                                    cuda_candidates):
    _, candidates = cuda_candidates
    builder = PersistentBuilder(max_workers=1, timeout_s=300)
    try:
        results = builder.build([BuilderInput(c.sch.mod, cuda_target) for c in candidates])
    finally:
        builder.shutdown()
    for result in results:
        assert result.error_msg is None, result.error_msg
    try:
        check_fatbin_libraries(results)
    finally:
        for result in results:
            remove_build_dir(result.artifact_path)


def check_fatbin_libraries(results) -> None:
    for result in results:
        assert result.artifact_path.endswith(".so")  # no compiler needed where it is loaded

        library = parse_library_blob(library_blob(result.artifact_path))
        assert [kind for kind, _ in library.modules] == ["_lib", "cuda"]
        payload = library.modules[1][1]
        (fmt_size,) = struct.unpack_from("<Q", payload, 0)
        assert b"_kernel" in payload  # the function map (kernel names, launch tags) is kept
        if CODEGEN_COMPILES_HERE:
            assert payload[8:8 + fmt_size] in (b"cubin", b"fatbin", b"ptx")
            continue
        assert payload[8:8 + fmt_size] == b"fatbin"
        fatbin_start = payload.index(struct.pack("<I", FATBIN_MAGIC))
        (fatbin_size,) = struct.unpack_from("<Q", payload, fatbin_start - 8)
        assert fatbin_start + fatbin_size == len(payload)
        entries = fatbin_entries(payload[fatbin_start:])
        assert {(kind, arch) for kind, arch, _ in entries} == {("elf", 80), ("ptx", 80)}
        sass = next(data for kind, _, data in entries if kind == "elf")
        assert sass[:4] == b"\x7fELF"
        assert struct.unpack_from("<H", sass, 18)[0] == ELF_MACHINE_CUDA


def test_library_blob_round_trips_and_checks_its_layout(cuda_target):
    import tvm_ffi
    from tvm import s_tir

    sch = s_tir.Schedule(matmul_module(16))
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    host = tvm.compile(sch.mod, target=cuda_target).mod
    blob = bytes(tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")(host)
                 .numpy().tobytes())
    library = parse_library_blob(blob)
    assert serialize_library_blob(library) == blob
    with pytest.raises(ValueError):
        parse_library_blob(blob[:-1])
    if CODEGEN_COMPILES_HERE:
        return  # the payload holds the compiled kernel, not the source split below
    source = host.imports[0].inspect_source("cuda").encode()
    fmt, function_map = split_cuda_payload(library.modules[1][1], source)
    assert fmt == "cuda" and b"main_kernel" in function_map
    with pytest.raises(ValueError):
        split_cuda_payload(library.modules[1][1], source + b" ")


@pytest.mark.skipif(not gpu_visible(), reason="needs a CUDA GPU")
def test_built_candidate_runs_on_the_gpu(cuda_target):
    from tvm import s_tir

    sch = s_tir.Schedule(matmul_module(64))
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    device = tvm.cuda(0)
    target = parse_target("cuda")  # this GPU's own architecture
    builder = PersistentBuilder(max_workers=1, timeout_s=300)
    try:
        (result,) = builder.build([BuilderInput(sch.mod, target)])
    finally:
        builder.shutdown()
    assert result.error_msg is None, result.error_msg
    module = tvm.runtime.load_module(result.artifact_path)
    remove_build_dir(result.artifact_path)  # loaded: the library stays mapped
    a, b = (np.random.default_rng(k).standard_normal((64, 64)).astype("float32") for k in (0, 1))
    c = tvm.runtime.tensor(np.zeros((64, 64), "float32"), device)
    module["main"](tvm.runtime.tensor(a, device), tvm.runtime.tensor(b, device), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
