"""The input tensors a candidate is timed on.

TVM's default fills every tensor with `random_fill_for_measure`, which writes float bit
patterns into wide integer tensors (int64 values around 4.6e18). Such a tensor is most often the
index of a gather (an embedding's token ids, a Gather whose constant index TVM passes as an
argument): read out of bounds, the measurement crashes and the task keeps TVM's default
schedule. harl fills integer tensors wider than 8 bits with zeros, an index that is always in
range; floats and 8-bit integers (quantised data) keep TVM's random fill.
"""

from __future__ import annotations

import numpy as np


def _is_wide_integer(dtype: str) -> bool:
    try:
        kind = np.dtype(dtype)
    except TypeError:  # a dtype only TVM names (float32x4, e4m3_float8): not an index
        return False
    return kind.kind in "iu" and kind.itemsize > 1


def _allocate(f_random_fill, device, args_info, alloc_repeat: int) -> list[list]:
    import tvm

    repeated = []
    for _ in range(alloc_repeat):
        args = []
        for arg_type, dtype, shape in args_info:
            if arg_type != "TENSOR":
                raise NotImplementedError(arg_type)
            tensor = tvm.runtime.empty(shape=shape, dtype=dtype, device=device)
            if _is_wide_integer(dtype):
                tensor.copyfrom(np.zeros(shape, dtype=dtype))
            else:
                f_random_fill(tensor)
            args.append(tensor)
        repeated.append(args)
    return repeated


def local_arguments(device, args_info, alloc_repeat: int) -> list[list]:
    """LocalRunner's `f_alloc_argument` (runs in its worker process)."""
    from tvm.s_tir.meta_schedule.utils import get_global_func_with_default_on_worker

    fill = get_global_func_with_default_on_worker("tvm.contrib.random.random_fill_for_measure",
                                                  None)
    return _allocate(fill, device, args_info, alloc_repeat)


def remote_arguments(session, device, args_info, alloc_repeat: int) -> list[list]:
    """RPCRunner's `f_alloc_argument`: the tensors live on the farm's server."""
    from tvm.s_tir.meta_schedule.utils import get_global_func_on_rpc_session

    fill = get_global_func_on_rpc_session(session, "tvm.contrib.random.random_fill_for_measure",
                                          "the RPC server's TVM needs USE_RANDOM")
    return _allocate(fill, device, args_info, alloc_repeat)
