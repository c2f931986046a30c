"""What a blocked conv computes and how its tensors are laid out: the TE computes of ungrouped
and depthwise 2-D convs on NCHW{b}c data, and the index maps and numpy packing that put
activations, weights and per-channel constants into blocks (harl.graph.rules.nchwc places them
in a graph)."""

from __future__ import annotations

import numpy as np


def _padded(data, kernel_hw, strides, padding, dilation):
    """NCHW{b}c `data` padded (top, left, bottom, right) and the conv's output height and
    width."""
    from tvm import topi

    height, width = (int(d) for d in data.shape[2:4])
    top, left, bottom, right = padding
    out_h = (height + top + bottom - (kernel_hw[0] - 1) * dilation[0] - 1) // strides[0] + 1
    out_w = (width + left + right - (kernel_hw[1] - 1) * dilation[1] - 1) // strides[1] + 1
    if not any(padding):
        return data, out_h, out_w
    return (topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="pad_temp"),
            out_h, out_w)


def conv2d_nchwc(data, kernel, strides, padding, dilation, out_dtype):
    """TE compute of an ungrouped 2-D conv on NCHW{bi}c data and (O/bo, I/bi, H, W, bi, bo)
    weights; the input channels are reduced as (block, lane), so a schedule can tile both."""
    from tvm import te

    batch = int(data.shape[0])
    out_blocks, in_blocks, kernel_h, kernel_w, in_lanes, out_lanes = (
        int(d) for d in kernel.shape)
    (stride_h, stride_w), (dilation_h, dilation_w) = strides, dilation
    padded, out_h, out_w = _padded(data, (kernel_h, kernel_w), strides, padding, dilation)
    rc = te.reduce_axis((0, in_blocks), name="rc")
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    rb = te.reduce_axis((0, in_lanes), name="rb")
    return te.compute(
        (batch, out_blocks, out_h, out_w, out_lanes),
        lambda n, c, y, x, b: te.sum(
            padded[n, rc, y * stride_h + ry * dilation_h, x * stride_w + rx * dilation_w,
                   rb].astype(out_dtype)
            * kernel[c, rc, ry, rx, rb, b].astype(out_dtype),
            axis=[rc, ry, rx, rb]),
        name="conv2d_NCHWc")


def depthwise_conv2d_nchwc(data, kernel, strides, padding, dilation, out_dtype):
    """TE compute of a depthwise 2-D conv (one filter per channel) on NCHW{b}c data and
    (C/b, H, W, b) weights."""
    from tvm import te

    batch, blocks, _, _, lanes = (int(d) for d in data.shape)
    _, kernel_h, kernel_w, _ = (int(d) for d in kernel.shape)
    (stride_h, stride_w), (dilation_h, dilation_w) = strides, dilation
    padded, out_h, out_w = _padded(data, (kernel_h, kernel_w), strides, padding, dilation)
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    return te.compute(
        (batch, blocks, out_h, out_w, lanes),
        lambda n, c, y, x, b: te.sum(
            padded[n, c, y * stride_h + ry * dilation_h, x * stride_w + rx * dilation_w,
                   b].astype(out_dtype) * kernel[c, ry, rx, b].astype(out_dtype),
            axis=[ry, rx]),
        name="depthwise_conv2d_NCHWc")


def block_map(lanes: int):
    """NCHW -> NCHW{lanes}c."""
    from tvm import tirx

    return tirx.IndexMap.from_func(lambda n, c, y, x: (n, c // lanes, y, x, c % lanes))


def unblock_map(lanes: int):
    """NCHW{lanes}c -> NCHW."""
    from tvm import tirx

    return tirx.IndexMap.from_func(lambda n, c, y, x, b: (n, c * lanes + b, y, x))


def blocked_weight(weight: np.ndarray, in_lanes: int, out_lanes: int) -> np.ndarray:
    """OIHW -> (O/bo, I/bi, H, W, bi, bo)."""
    out_c, in_c, kh, kw = weight.shape
    return (weight.reshape(out_c // out_lanes, out_lanes, in_c // in_lanes, in_lanes, kh, kw)
            .transpose(0, 2, 4, 5, 3, 1))


def blocked_depthwise_weight(weight: np.ndarray, lanes: int) -> np.ndarray:
    """(C, 1, H, W) -> (C/b, H, W, b)."""
    channels, _, kh, kw = weight.shape
    return weight.reshape(channels // lanes, lanes, kh, kw).transpose(0, 2, 3, 1)


def per_channel(value: np.ndarray, channels: int, lanes: int) -> np.ndarray | None:
    """A constant broadcast over an NCHW tensor of `channels`, as NCHW{lanes}c: a scalar as it
    is, (C,1,1) and (1,C,1,1) blocked; None for any other shape."""
    if value.size == 1:
        return value.reshape(())
    if tuple(value.shape) in ((channels, 1, 1), (1, channels, 1, 1)):
        return value.reshape(1, channels // lanes, lanes, 1, 1).transpose(0, 1, 3, 4, 2)
    return None
