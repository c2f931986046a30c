"""Turn the user's --target text into a TVM Target."""

from __future__ import annotations

import json
import os

from harl.errors import HarlError

#: Architecture assumed for `--target cuda` when no GPU is visible here (a remote farm measures).
DEFAULT_REMOTE_CUDA_ARCH = "sm_80"


def local_cpu_count() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def host_target_dict() -> dict:
    """The local CPU as an llvm target dict, with its real micro-architecture and core count."""
    from tvm.target import codegen

    return {
        "kind": "llvm",
        "mcpu": codegen.llvm_get_system_cpu(),
        "num-cores": local_cpu_count(),
    }


#: Limits assumed with DEFAULT_REMOTE_CUDA_ARCH (TVM's nvidia/nvidia-a100 tag); MetaSchedule's
#: CUDA rules need max_threads_per_block and max_shared_memory_per_block in the target.
DEFAULT_REMOTE_CUDA_LIMITS = {
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 49152,
    "thread_warp_size": 32,
    "registers_per_block": 65536,
}


def _cuda_target_dict() -> dict:
    import tvm

    device = tvm.cuda(0)
    if device.exist:
        arch = "sm_" + device.compute_version.replace(".", "")
        limits = {
            "max_threads_per_block": device.max_threads_per_block,
            "max_shared_memory_per_block": device.max_shared_memory_per_block,
            "thread_warp_size": device.warp_size,
            # TVM's Device does not report it; 64K 32-bit registers per block since sm_30
            "registers_per_block": DEFAULT_REMOTE_CUDA_LIMITS["registers_per_block"],
            "l2_cache_size_bytes": device.l2_cache_size_bytes,
        }
    else:
        arch, limits = DEFAULT_REMOTE_CUDA_ARCH, DEFAULT_REMOTE_CUDA_LIMITS  # harl.tune warns
    return {"kind": "cuda", "arch": arch, **limits, "host": host_target_dict()}


def gpu_visible() -> bool:
    """True where TVM's runtime sees a CUDA GPU in this process (harl's only GPU kind)."""
    import tvm

    return bool(tvm.cuda(0).exist)


def use_nvcc_for_cuda() -> None:
    """Where a CUDA runtime is loaded, TVM's codegen compiles kernels through NVRTC by default,
    which needs the cuda-bindings package; nvcc is what a CUDA toolkit has."""
    os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")


def parse_target(spec: str | None):
    """Build a Target from None (this CPU), 'llvm', 'cuda', a tag, or a JSON dict."""
    from tvm.target import Target

    if spec is None or spec.strip() in ("", "llvm", "cpu"):
        return Target(host_target_dict())
    spec = spec.strip()
    try:
        if spec == "cuda":
            return Target(_cuda_target_dict())
        if spec.startswith("{"):
            config = json.loads(spec)
            if config.get("kind") == "llvm":  # another CPU's triple takes its default mcpu
                host = host_target_dict()
                if "mtriple" in config:
                    host.pop("mcpu")
                config = {**host, **config}
            elif config.get("kind") == "cuda":  # the user's keys win over this GPU's limits
                config = {**_cuda_target_dict(), **config}
            target = Target(config)
        else:
            target = Target(spec)
    except (ValueError, RuntimeError, json.JSONDecodeError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise HarlError(f"unknown target {spec!r}: {first_line}") from None
    if target.kind.name == "cuda" and target.host is None:
        target = Target(target, host=host_target_dict())
    return target


def is_gpu(target) -> bool:
    """True for targets whose kernels run on a GPU."""
    return "gpu" in [str(key) for key in target.keys]
