"""2-D convolution, NCHW (Phase 6's ``conv.cu``): forward, and the gradients of the input, the weight and the
bias. A cross-correlation, as in PyTorch: x (N, C, H, W), w (K, C, R, S), b (K,) -> y (N, K, P, Q).

On cpu the reference is NumPy in the tensors' dtype (float64 for gradient checks), through a view of the
input's windows; on cuda/emu the learner's ``conv.py`` launchers, whose ``variant`` ("direct", "im2col",
"tiled", "igemm", "winograd", "winograd4" (3 x 3 at stride 1), "regtile" (small layers) or "best") picks the
rung of the ladder; a rung a pass or a shape does not have is refused by the launcher, naming why.

Inside ``minitorch.amp.autocast`` (or with ``compute_dtype=``) the three passes are Phase 6's im2col rung
with its product on the tensor cores: the learner's ``im2col`` / ``nchw_to_gemm`` / ``col2im`` /
``gemm_to_nchw`` kernels of ``conv.cu`` reorder in float32 (exact), and the GEMM runs on ``hgemm.py`` with
16-bit operands, fp32 accumulation and a float32 result. On cpu the operands are rounded by NumPy and
the sums taken in float32.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from minitorch import backend, dtypes, kernels
from minitorch.ops.dispatch import check_tensors, cpu_result, empty, launch, on_device
from minitorch.ops.linalg import matmul, product_dtype, tensor_core_bmm
from minitorch.ops.reduce import bias_grad
from minitorch.tensor import DTYPE, Tensor

VARIANTS = ("direct", "im2col", "tiled", "igemm", "winograd", "winograd4", "regtile", "best")


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
           variant: str = "best", compute_dtype: Any = None) -> Tensor:
    """y (N, K, P, Q) = the convolution of x (N, C, H, W) with w (K, C, R, S), plus b (K,) if given.
    ``compute_dtype``: the product's 16-bit format (default: autocast's, if any; float32: none)."""
    device, dtype = check_tensors("conv2d", x=x, w=w, **({"b": b} if b is not None else {}))
    shape = conv_shape("conv2d", x.shape, w.shape, stride, padding)
    n, c, h, wd, k, r, s, p, q = shape
    variant = _variant("conv2d", variant)
    if b is not None and b.shape != (k,):
        raise ValueError(f"conv2d: the bias must have shape ({k},), one value per output channel; got {b.shape}")
    compute = product_dtype(dtype, compute_dtype)
    if compute is not None and device != "cpu":
        return _tensor_core_forward(x, w, b, shape, stride, padding, compute)
    if compute is not None:
        x, w = _rounded(x, compute), _rounded(w, compute)
    if device == "cpu":
        y = np.einsum("ncpqrs,kcrs->nkpq", _windows(x.data, r, s, stride, padding), w.data, optimize=True)
        return cpu_result(y + (b.data[None, :, None, None] if b is not None else 0), dtype)
    out = empty(device, (n, k, p, q))
    if out.size:
        bias = b.data if b is not None else backend.get_backend(device).zeros((k,), dtype)
        launch(device, "conv.py", "conv2d", x.data, w.data, bias, out, stride, padding, variant, outputs=(3,))
    return Tensor(out, device)


def conv2d_backward_input(dy: Tensor, w: Tensor, x_shape: tuple[int, ...], stride: int = 1, padding: int = 0,
                          variant: str = "best", compute_dtype: Any = None) -> Tensor:
    """The gradient of conv2d's input (shape ``x_shape``) from the gradient ``dy`` of its output."""
    device, dtype = check_tensors("conv2d_backward_input", dy=dy, w=w)
    shape = conv_shape("conv2d_backward_input", tuple(x_shape), w.shape, stride, padding)
    n, c, h, wd, k, r, s, p, q = shape
    variant = _variant("conv2d_backward_input", variant)
    if dy.shape != (n, k, p, q):
        raise ValueError(f"conv2d_backward_input: dy must have the output's shape {(n, k, p, q)}, got {dy.shape}")
    compute = product_dtype(dtype, compute_dtype)
    if compute is not None and device != "cpu":
        return _tensor_core_backward_input(dy, w, shape, stride, padding, compute)
    if compute is not None:
        dy, w = _rounded(dy, compute), _rounded(w, compute)
    if device == "cpu":
        return cpu_result(_cpu_backward_input(dy.data, w.data, (n, c, h, wd), stride, padding), dtype)
    out = empty(device, (n, c, h, wd))
    if out.size:
        launch(device, "conv.py", "conv2d_backward_input", dy.data, w.data, out, stride, padding, variant, outputs=(2,))
    return Tensor(out, device)


def conv2d_backward_weight(x: Tensor, dy: Tensor, w_shape: tuple[int, ...], stride: int = 1, padding: int = 0,
                           variant: str = "best", compute_dtype: Any = None) -> Tensor:
    """The gradient of conv2d's weight (shape ``w_shape``) from its input x and the gradient dy of its output."""
    device, dtype = check_tensors("conv2d_backward_weight", x=x, dy=dy)
    shape = conv_shape("conv2d_backward_weight", x.shape, tuple(w_shape), stride, padding)
    n, c, h, wd, k, r, s, p, q = shape
    variant = _variant("conv2d_backward_weight", variant)
    if dy.shape != (n, k, p, q):
        raise ValueError(f"conv2d_backward_weight: dy must have the output's shape {(n, k, p, q)}, got {dy.shape}")
    compute = product_dtype(dtype, compute_dtype)
    if compute is not None and device != "cpu":
        return _tensor_core_backward_weight(x, dy, shape, stride, padding, compute)
    if compute is not None:
        x, dy = _rounded(x, compute), _rounded(dy, compute)
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


# ---------------------------------------------------------------- autocast: im2col + the tensor-core GEMM

GRID_STRIDE_THREADS = 256  # conv.cu's layout kernels loop over their elements (grid-stride): any grid works
GRID_STRIDE_BLOCKS = 16384


def _rounded(t: Tensor, compute: Any) -> Tensor:
    """A cpu tensor's values rounded to ``compute`` (16-bit), held in float32: the cpu reference."""
    bits = dtypes.float32_to_16bit(t.data.astype(DTYPE), compute).view(np.uint16)
    return cpu_result(dtypes.bits_to_float32(bits, compute), DTYPE)


def _layout(device: str, kernel: str, total: int, *args: Any) -> None:
    """Launch one of the learner's grid-stride layout kernels of ``conv.cu`` over ``total`` elements."""
    blocks = max(1, min((total + GRID_STRIDE_THREADS - 1) // GRID_STRIDE_THREADS, GRID_STRIDE_BLOCKS))
    with on_device(device):
        kernels.load_kernel("conv.cu", kernel)((blocks,), (GRID_STRIDE_THREADS,),
                                               tuple(np.int32(a) if isinstance(a, int) else a for a in args))


def _cols(x: Tensor, shape: tuple[int, ...], stride: int, padding: int) -> Tensor:
    """im2col: the (C·R·S, N·P·Q) matrix of x's windows (float32, exact)."""
    n, c, h, wd, k, r, s, p, q = shape
    cols = empty(x.device, (c * r * s, n * p * q))
    _layout(x.device, "im2col", cols.size, x.data, cols, n, c, h, wd, r, s, stride, padding, p, q)
    return Tensor(cols, x.device)


def _gemm_layout(dy: Tensor, shape: tuple[int, ...]) -> Tensor:
    """dy (N, K, P, Q) as the (K, N·P·Q) matrix of the GEMMs (nchw_to_gemm)."""
    n, c, h, wd, k, r, s, p, q = shape
    out = empty(dy.device, (k, n * p * q))
    _layout(dy.device, "nchw_to_gemm", out.size, dy.data, out, n, k, p * q)
    return Tensor(out, dy.device)


def _tensor_core_forward(x: Tensor, w: Tensor, b: Tensor | None, shape: tuple[int, ...], stride: int,
                         padding: int, compute: Any) -> Tensor:
    """y = gemm_to_nchw(W (K, C·R·S) @ im2col(x), + b), the product on hgemm."""
    n, c, h, wd, k, r, s, p, q = shape
    device = x.device
    y = empty(device, (n, k, p, q))
    if not y.size:
        return Tensor(y, device)
    product = matmul(Tensor(w.data.reshape(k, c * r * s), device), _cols(x, shape, stride, padding),
                     compute_dtype=compute)
    bias = b.data if b is not None else backend.get_backend(device).zeros((k,), DTYPE)
    _layout(device, "gemm_to_nchw", y.size, product.data, bias, y, n, k, p * q)
    return Tensor(y, device)


def _tensor_core_backward_input(dy: Tensor, w: Tensor, shape: tuple[int, ...], stride: int, padding: int,
                                compute: Any) -> Tensor:
    """dx = col2im(Wᵀ (C·R·S, K) @ dy (K, N·P·Q)), the product on hgemm (Wᵀ read in place)."""
    n, c, h, wd, k, r, s, p, q = shape
    device = dy.device
    dx = empty(device, (n, c, h, wd))
    if not dx.size:
        return Tensor(dx, device)
    dcols = matmul(Tensor(w.data.reshape(k, c * r * s), device), _gemm_layout(dy, shape), transpose_a=True,
                   compute_dtype=compute)
    _layout(device, "col2im", dx.size, dcols.data, dx, n, c, h, wd, r, s, stride, padding, p, q)
    return Tensor(dx, device)


# The weight gradient sums over every output position of every image: as one product, dW = dy (K, N·P·Q) @
# im2col(x)ᵀ, its K dimension is N·P·Q long (50,176 for MNIST's first layer at batch 64) while its output is tiny
# (8 x 9): the tensor-core rungs split the output, not K, so one warp (rung 1) or one block (rung 5) looped over all of
# K; on an H100 the bf16 MNIST step took 2.07 ms against 0.20 ms in float32 (benchmarks/results/phase8a_amp-*.json).
# Per image instead: dy (N, K, P·Q) is already a stack of N matrices, and im2col of x viewed as one image of N·C
# channels gives the stack (N, C·R·S, P·Q) (its rows are (n, c, r, s)); one batched launch (grid z = the image)
# computes the N partial products, and a column sum (Phase 3b's bias_grad) adds them in float32. The partial products
# take N·K·C·R·S floats: past PER_IMAGE_MAX_VALUES the single product runs as before. The H100's bf16 step then took
# 0.29 ms, 0.89x PyTorch's captured torch.autocast step (benchmarks/results/phase8a_amp_mnist-*.json).
PER_IMAGE_MAX_VALUES = 1 << 22


def per_image_weight_grad(shape: tuple[int, ...]) -> bool:
    """Whether the weight gradient of a convolution of ``shape`` (N, C, H, W, K, R, S, P, Q) runs as N products."""
    n, c, h, wd, k, r, s, p, q = shape
    return n > 1 and n * k * c * r * s <= PER_IMAGE_MAX_VALUES


def _tensor_core_backward_weight(x: Tensor, dy: Tensor, shape: tuple[int, ...], stride: int, padding: int,
                                 compute: Any) -> Tensor:
    """dW (K, C·R·S) = dy (K, N·P·Q) @ im2col(x)ᵀ, the product on hgemm (im2col(x)ᵀ read in place); or, for a
    small dW, the sum over images of dy[n] (K, P·Q) @ im2col(x[n])ᵀ (one batched launch, then a column sum)."""
    n, c, h, wd, k, r, s, p, q = shape
    device = x.device
    if not (k and c * r * s):
        return Tensor(empty(device, (k, c, r, s)), device)
    if not per_image_weight_grad(shape):
        dw = matmul(_gemm_layout(dy, shape), _cols(x, shape, stride, padding), transpose_b=True,
                    compute_dtype=compute)
        return Tensor(dw.data.reshape(k, c, r, s), device)
    stacked = (1, n * c, h, wd, k, r, s, p, q)  # the batch as channels: im2col's rows become (n, c, r, s)
    cols = _cols(x, stacked, stride, padding).data.reshape(n, c * r * s, p * q)
    partial = tensor_core_bmm(Tensor(dy.data.reshape(n, k, p * q), device), Tensor(cols, device), compute,
                              (n, k, c * r * s, p * q), False, True)
    dw = bias_grad(Tensor(partial.data.reshape(n, k * c * r * s), device))  # the images' sum, float32
    return Tensor(dw.data.reshape(k, c, r, s), device)
