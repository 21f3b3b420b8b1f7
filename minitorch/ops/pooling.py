"""2-D max pooling, NCHW (Phase 6's ``maxpool.cu``): the forward keeps where each maximum was (``argmax``, the
index h * W + w inside its (n, c) plane), the backward routes each gradient there.

Ties go to the FIRST maximum in row-major order of the window, on every device; a NaN wins. The padding is
left out of the windows (it never wins). ``stride`` None means ``kernel_size`` (windows side by side).
"""

from __future__ import annotations

import numbers

import numpy as np

from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch
from minitorch.tensor import Tensor

ARGMAX_DTYPE = np.dtype(np.int32)  # what the kernels write (``int* argmax``); int64 on cpu


def pool_shape(op: str, x_shape: tuple[int, ...], kernel_size: object, stride: object,
               padding: object) -> tuple[int, int, int, int, int, int, int, int, int]:
    """(N, C, H, W, kernel, stride, padding, P, Q) after checking the pooling's parameters."""
    stride = kernel_size if stride is None else stride
    for name, value, low in (("kernel_size", kernel_size, 1), ("stride", stride, 1), ("padding", padding, 0)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
            raise ValueError(f"{op}: {name} must be an integer >= {low}, got {value!r}")
    k, st, pad = int(kernel_size), int(stride), int(padding)  # type: ignore[arg-type]
    if 2 * pad > k:
        raise ValueError(f"{op}: padding must be at most half the window, got padding {pad} for kernel_size {k}")
    if len(x_shape) != 4:
        raise ValueError(f"{op}: the input must be 4-D (N, C, H, W), got shape {tuple(x_shape)}")
    n, c, h, w = x_shape
    p, q = (h + 2 * pad - k) // st + 1, (w + 2 * pad - k) // st + 1
    if p < 1 or q < 1:
        raise ValueError(f"{op}: a {k} x {k} window does not fit a {h} x {w} input padded by {pad}")
    return n, c, h, w, k, st, pad, p, q


def _cpu_forward(x: np.ndarray, k: int, st: int, pad: int, p: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    n, c, h, w = x.shape
    best = np.full((n, c, p, q), -np.inf, x.dtype)
    at = np.full((n, c, p, q), -1, np.int64)
    rows, cols = np.arange(p) * st - pad, np.arange(q) * st - pad
    for r in range(k):  # row-major order of the window: a later value replaces only a strictly larger one
        for s in range(k):
            hh, ww = rows + r, cols + s
            inside = ((hh >= 0) & (hh < h))[:, None] & ((ww >= 0) & (ww < w))[None, :]
            v = x[:, :, np.clip(hh, 0, h - 1)[:, None], np.clip(ww, 0, w - 1)[None, :]]
            better = inside & ((at < 0) | (v > best) | (np.isnan(v) & ~np.isnan(best)))
            best = np.where(better, v, best)
            at = np.where(better, (hh[:, None] * w + ww[None, :]), at)
    return best, at


def max_pool2d(x: Tensor, kernel_size: int, stride: int | None = None, padding: int = 0) -> tuple[Tensor, Tensor]:
    """(y, argmax): the maximum of each window, and where it was (an integer tensor of y's shape)."""
    device, dtype = check_tensors("max_pool2d", x=x)
    n, c, h, w, k, st, pad, p, q = pool_shape("max_pool2d", x.shape, kernel_size, stride, padding)
    if device == "cpu":
        y, at = _cpu_forward(x.data, k, st, pad, p, q)
        return cpu_result(y, dtype), Tensor(at, "cpu")
    y, at = empty(device, (n, c, p, q)), empty(device, (n, c, p, q), ARGMAX_DTYPE)
    if y.size:
        launch(device, "maxpool.py", "max_pool2d", x.data, y, at, k, st, pad, outputs=(1, 2))
    return Tensor(y, device), Tensor(at, device)


def max_pool2d_backward(dy: Tensor, argmax: Tensor, x_shape: tuple[int, ...], kernel_size: int,
                        stride: int | None = None, padding: int = 0) -> Tensor:
    """The gradient of max_pool2d's input: each dy[n, c, p, q] added at argmax[n, c, p, q] of its plane."""
    device, dtype = check_tensors("max_pool2d_backward", dy=dy)
    n, c, h, w, k, st, pad, p, q = pool_shape("max_pool2d_backward", tuple(x_shape), kernel_size, stride, padding)
    if dy.shape != (n, c, p, q) or argmax.shape != (n, c, p, q) or argmax.device != device:
        raise ValueError(f"max_pool2d_backward: dy and argmax must have the output's shape {(n, c, p, q)} on "
                         f"{device!r}, got {dy.shape} and {argmax.shape} on {argmax.device!r}")
    if device == "cpu":
        dx = np.zeros((n * c, h * w), dtype)
        planes = np.repeat(np.arange(n * c), p * q)
        np.add.at(dx, (planes, argmax.data.reshape(-1)), dy.data.reshape(-1))
        return cpu_result(dx.reshape(n, c, h, w), dtype)
    if argmax.dtype != ARGMAX_DTYPE:
        raise TypeError(f"max_pool2d_backward: argmax must be int32 (from max_pool2d), got {argmax.dtype}")
    out = empty(device, (n, c, h, w))
    if out.size:
        launch(device, "maxpool.py", "max_pool2d_backward", dy.data, argmax.data, out, k, st, pad, outputs=(2,))
    return Tensor(out, device)
