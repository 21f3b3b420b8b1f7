"""2-D convolution, NCHW (Phase 6's ``conv.cu``): forward, and the gradients of the input, the weight and the
bias. A cross-correlation, as in PyTorch: x (N, C, H, W), w (K, C, R, S), b (K,) -> y (N, K, P, Q).

On cpu the reference is NumPy in the tensors' dtype (float64 for gradient checks), through a view of the
input's windows; on cuda/emu the learner's ``conv.py`` launchers, whose ``variant`` ("direct", "im2col",
"tiled", "igemm", "winograd", "winograd4" (3 x 3 at stride 1) or "best") picks the rung of the ladder; a rung a pass
or a shape does not have is refused by the launcher, naming why.
"""

from __future__ import annotations

import numbers

import numpy as np

from minitorch import backend
from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch
from minitorch.tensor import Tensor

VARIANTS = ("direct", "im2col", "tiled", "igemm", "winograd", "winograd4", "best")


def _int(op: str, name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{op}: {name} must be an integer >= {low}, got {value!r}")
    return int(value)


def output_size(h: int, w: int, r: int, s: int, stride: int, padding: int) -> tuple[int, int]:
    return (h + 2 * padding - r) // stride + 1, (w + 2 * padding - s) // stride + 1


def conv_shape(op: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: object,
               padding: object) -> tuple[int, int, int, int, int, int, int, int, int]:
    """(N, C, H, W, K, R, S, P, Q) after checking that x and w make a convolution."""
    stride, padding = _int(op, "stride", stride, 1), _int(op, "padding", padding, 0)
    if len(x_shape) != 4:
        raise ValueError(f"{op}: the input must be 4-D (N, C, H, W), got shape {tuple(x_shape)}")
    if len(w_shape) != 4:
        raise ValueError(f"{op}: the weight must be 4-D (out_channels, in_channels, kh, kw), got shape "
                         f"{tuple(w_shape)}")
    n, c, h, w = x_shape
    k, c2, r, s = w_shape
    if c2 != c:
        raise ValueError(f"{op}: the weight {tuple(w_shape)} takes {c2} input channels, the input "
                         f"{tuple(x_shape)} has {c}")
    p, q = output_size(h, w, r, s, stride, padding)
    if p < 1 or q < 1 or r < 1 or s < 1:
        raise ValueError(f"{op}: a {r} x {s} filter does not fit a {h} x {w} input padded by {padding} "
                         f"(the output would be {p} x {q})")
    return n, c, h, w, k, r, s, p, q


def _variant(op: str, variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"{op}: variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    return variant


# ---------------------------------------------------------------- the cpu reference


def _windows(x: np.ndarray, r: int, s: int, stride: int, padding: int) -> np.ndarray:
    """A view (N, C, P, Q, R, S) of the zero-padded input's windows."""
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    view = np.lib.stride_tricks.sliding_window_view(padded, (r, s), axis=(2, 3))
    return view[:, :, ::stride, ::stride]


def _cpu_backward_input(dy: np.ndarray, w: np.ndarray, x_shape: tuple[int, ...], stride: int,
                        padding: int) -> np.ndarray:
    n, c, h, wd = x_shape
    _, _, r, s = w.shape
    p, q = dy.shape[2:]
    padded = np.zeros((n, c, h + 2 * padding, wd + 2 * padding), dy.dtype)
    for i in range(r):  # each filter offset scatters into a strided slice: no two writes of one slice overlap
        for j in range(s):
            padded[:, :, i:i + stride * (p - 1) + 1:stride, j:j + stride * (q - 1) + 1:stride] += np.einsum(
                "nkpq,kc->ncpq", dy, w[:, :, i, j])
    return padded[:, :, padding:padding + h, padding:padding + wd]


# ---------------------------------------------------------------- ops


def conv2d(x: Tensor, w: Tensor, b: Tensor | None = None, stride: int = 1, padding: int = 0,
           variant: str = "best") -> Tensor:
    """y (N, K, P, Q) = the convolution of x (N, C, H, W) with w (K, C, R, S), plus b (K,) if given."""
    device, dtype = check_tensors("conv2d", x=x, w=w, **({"b": b} if b is not None else {}))
    n, c, h, wd, k, r, s, p, q = conv_shape("conv2d", x.shape, w.shape, stride, padding)
    variant = _variant("conv2d", variant)
    if b is not None and b.shape != (k,):
        raise ValueError(f"conv2d: the bias must have shape ({k},), one value per output channel; got {b.shape}")
    if device == "cpu":
        y = np.einsum("ncpqrs,kcrs->nkpq", _windows(x.data, r, s, stride, padding), w.data, optimize=True)
        return cpu_result(y + (b.data[None, :, None, None] if b is not None else 0), dtype)
    out = empty(device, (n, k, p, q))
    if out.size:
        bias = b.data if b is not None else backend.get_backend(device).zeros((k,), dtype)
        launch(device, "conv.py", "conv2d", x.data, w.data, bias, out, stride, padding, variant, outputs=(3,))
    return Tensor(out, device)


def conv2d_backward_input(dy: Tensor, w: Tensor, x_shape: tuple[int, ...], stride: int = 1, padding: int = 0,
                          variant: str = "best") -> Tensor:
    """The gradient of conv2d's input (shape ``x_shape``) from the gradient ``dy`` of its output."""
    device, dtype = check_tensors("conv2d_backward_input", dy=dy, w=w)
    n, c, h, wd, k, r, s, p, q = conv_shape("conv2d_backward_input", tuple(x_shape), w.shape, stride, padding)
    variant = _variant("conv2d_backward_input", variant)
    if dy.shape != (n, k, p, q):
        raise ValueError(f"conv2d_backward_input: dy must have the output's shape {(n, k, p, q)}, got {dy.shape}")
    if device == "cpu":
        return cpu_result(_cpu_backward_input(dy.data, w.data, (n, c, h, wd), stride, padding), dtype)
    out = empty(device, (n, c, h, wd))
    if out.size:
        launch(device, "conv.py", "conv2d_backward_input", dy.data, w.data, out, stride, padding, variant, outputs=(2,))
    return Tensor(out, device)


def conv2d_backward_weight(x: Tensor, dy: Tensor, w_shape: tuple[int, ...], stride: int = 1, padding: int = 0,
                           variant: str = "best") -> Tensor:
    """The gradient of conv2d's weight (shape ``w_shape``) from its input x and the gradient dy of its output."""
    device, dtype = check_tensors("conv2d_backward_weight", x=x, dy=dy)
    n, c, h, wd, k, r, s, p, q = conv_shape("conv2d_backward_weight", x.shape, tuple(w_shape), stride, padding)
    variant = _variant("conv2d_backward_weight", variant)
    if dy.shape != (n, k, p, q):
        raise ValueError(f"conv2d_backward_weight: dy must have the output's shape {(n, k, p, q)}, got {dy.shape}")
    if device == "cpu":
        dw = np.einsum("ncpqrs,nkpq->kcrs", _windows(x.data, r, s, stride, padding), dy.data, optimize=True)
        return cpu_result(dw, dtype)
    out = empty(device, (k, c, r, s))
    if out.size:
        launch(device, "conv.py", "conv2d_backward_weight", x.data, dy.data, out, stride, padding, variant, outputs=(2,))
    return Tensor(out, device)


def conv2d_bias_grad(dy: Tensor) -> Tensor:
    """The gradient of conv2d's bias: dy (N, K, P, Q) summed over everything but the channel."""
    device, dtype = check_tensors("conv2d_bias_grad", dy=dy)
    if dy.ndim != 4:
        raise ValueError(f"conv2d_bias_grad: dy must be 4-D (N, K, P, Q), got shape {dy.shape}")
    if device == "cpu":
        return cpu_result(dy.data.sum(axis=(0, 2, 3)), dtype)
    out = empty(device, (dy.shape[1],))
    if out.size:
        launch(device, "conv.py", "conv2d_bias_grad", dy.data, out, outputs=(1,))
    return Tensor(out, device)
