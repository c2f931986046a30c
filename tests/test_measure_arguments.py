"""The tensors candidates are timed on: wide integers (indices) are zeros, in range."""

import numpy as np
import tvm

from harl.measure.arguments import _allocate, _is_wide_integer


def test_wide_integer_tensors_are_zeros_and_the_rest_is_filled():
    filled = []

    def fill(tensor):
        filled.append(tensor.dtype)
        tensor.copyfrom(np.full(tensor.shape, 7, dtype=tensor.dtype))

    args_info = [("TENSOR", "float32", [2, 3]), ("TENSOR", "int64", [4]),
                 ("TENSOR", "int32", [2, 2]), ("TENSOR", "int8", [3]), ("TENSOR", "uint8", [3])]
    [args] = _allocate(fill, tvm.cpu(0), args_info, alloc_repeat=1)
    assert [str(a.dtype) for a in args] == [dtype for _, dtype, _ in args_info]
    assert filled == ["float32", "int8", "uint8"]  # quantised data keeps TVM's fill
    assert not args[1].numpy().any() and not args[2].numpy().any()
    assert (args[0].numpy() == 7).all()
    assert len(_allocate(fill, tvm.cpu(0), args_info, alloc_repeat=3)) == 3


def test_dtypes_numpy_does_not_name_are_not_indices():
    assert not _is_wide_integer("float32x4") and not _is_wide_integer("e4m3_float8")
    assert _is_wide_integer("int64") and not _is_wide_integer("int8")
