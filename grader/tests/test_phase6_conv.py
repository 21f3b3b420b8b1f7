"""Graded tests of Phase 6, convolution and pooling: conv.cu / conv.py and maxpool.cu / maxpool.py.

Run by `grader check phase6` on the active device (cuda or emu), with fresh random inputs (seed printed in the
report), batch 1, odd heights and widths, channel counts that are no multiple of any tile, filters of 1, 3, 5
and 7, non-square filters (3 x 5, 1 x 3), padding 0 to 3 and stride 2, every output poisoned with NaN before
the launch, and a check that the learner's kernel ran. Every value is compared with NumPy in float64, within
the rounding bound of a float32 dot product. Performance (GPU only): each rung against cuDNN
(`torch.nn.functional.conv2d` and its backward, TF32 off) in the same run.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from grader import checks
from grader.checks import GradeError, launch_checked
from grader.checks import run_without_host_transfers as on_device
from minitorch import backend, kernels

ON_GPU = backend.get_device() == "cuda"
EPS32 = float(np.finfo(np.float32).eps)
FORWARD = {"direct": "conv2d_direct", "im2col": "im2col", "tiled": "conv2d_tiled", "igemm": "conv2d_igemm",
           "winograd": "winograd_gemm", "winograd4": "winograd4_input", "regtile": "conv2d_regtile"}
BACKWARD_INPUT = {"direct": "conv2d_backward_input", "im2col": "col2im", "tiled": "conv2d_backward_input_tiled",
                  "igemm": "conv2d_backward_input_igemm",
                  "winograd": "winograd_filter", "winograd4": "winograd4_filter", "regtile": "conv2d_regtile"}
BACKWARD_WEIGHT = {"direct": "conv2d_backward_weight", "im2col": "im2col", "tiled": "conv2d_backward_weight_tiled",
                   "igemm": "conv2d_backward_weight_igemm", "regtile": "conv2d_backward_weight_regtile"}
# Winograd F(2x2, 3x3): U = G g G^T, V = B^T d B, Y = A^T M A (conv.cu's comment)
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)
# Winograd F(4x4, 3x3) (rung 6, kernels winograd4_*): Lavin and Gray's matrices
WINOGRAD4_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                        [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
WINOGRAD4_BT = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                         [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], dtype=np.float64)
WINOGRAD4_AT = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                        dtype=np.float64)
WINOGRAD = {2: (WINOGRAD_G, WINOGRAD_BT, WINOGRAD_AT), 4: (WINOGRAD4_G, WINOGRAD4_BT, WINOGRAD4_AT)}
WINOGRAD_TILE = {"winograd": 2, "winograd4": 4}  # rung -> outputs a tile side
# (N, C, H, W, K, R, stride, padding): a single pixel, a 1x1 filter, odd sizes, 5x5 at stride 2, 7x7 with padding
# 3, stride 2 without padding, 9 output channels (channel tiles of 4 (rung 3) or 64, the last nearly empty), MNIST's layers,
# and non-square filters, R = (rows, columns): 3 x 5 and 1 x 3 (a kernel that mixes up R and S, the filter's
# height and width, is right for every square filter).
SHAPES = [(1, 1, 1, 1, 1, 1, 1, 0), (1, 2, 5, 4, 3, 1, 1, 0), (2, 3, 7, 9, 5, 3, 1, 1), (1, 2, 9, 8, 3, 5, 2, 2),
          (2, 1, 8, 8, 2, 7, 1, 3), (3, 5, 13, 11, 7, 3, 2, 0), (1, 3, 17, 19, 9, 3, 1, 1), (2, 1, 28, 28, 8, 3, 1, 1),
          (2, 8, 14, 14, 16, 3, 1, 1), (2, 3, 9, 8, 4, (3, 5), 1, 1), (1, 2, 6, 7, 3, (1, 3), 2, 1)]
if ON_GPU:
    SHAPES += [(64, 8, 14, 14, 16, 3, 1, 1), (5, 64, 56, 56, 64, 3, 1, 1), (7, 3, 33, 35, 17, 5, 2, 2)]


def conv():
    return kernels.load_module("conv.py")


def pool():
    return kernels.load_module("maxpool.py")


def filter_size(r: int | tuple[int, int]) -> tuple[int, int]:
    """(R, S) of a shape's filter entry: R for an R x R filter, or (R, S)."""
    return (r, r) if isinstance(r, int) else r


def shape_id(shape: tuple) -> str:
    n, c, h, w, k, r, stride, pad = shape
    rs = "x".join(str(v) for v in dict.fromkeys(filter_size(r)))  # "3" for 3 x 3, "3x5" for 3 x 5
    return f"{n}x{c}x{h}x{w}-k{k}r{rs}s{stride}p{pad}"


def rung(variant: str, table: dict[str, str], *extra: Any) -> Any:
    kernel = table.get(variant, "conv2d_tiled")
    return pytest.param(variant, *extra, marks=pytest.mark.kernel("conv.cu", kernel),
                        id="-".join(str(v) for v in (variant, *extra)))


# ---------------------------------------------------------------- float64 references


def windows(x: np.ndarray, r: int, s: int, stride: int, pad: int) -> np.ndarray:
    """(N, C, P, Q, R, S): every window of the zero-padded input, in float64."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]


def ref_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, pad: int) -> np.ndarray:
    y = np.einsum("ncpqrs,kcrs->nkpq", windows(x, *w.shape[2:], stride, pad), w.astype(np.float64), optimize=True)
    return y + (b.astype(np.float64)[None, :, None, None] if b is not None else 0.0)


def ref_backward_input(dy: np.ndarray, w: np.ndarray, x_shape: tuple, stride: int, pad: int) -> np.ndarray:
    n, c, h, wd = x_shape
    r, s = w.shape[2:]
    p, q = dy.shape[2:]
    dxp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    for i in range(r):
        for j in range(s):
            dxp[:, :, i:i + stride * (p - 1) + 1:stride, j:j + stride * (q - 1) + 1:stride] += np.einsum(
                "nkpq,kc->ncpq", dy.astype(np.float64), w[:, :, i, j].astype(np.float64))
    return dxp[:, :, pad:pad + h, pad:pad + wd]


def ref_backward_weight(x: np.ndarray, dy: np.ndarray, w_shape: tuple, stride: int, pad: int) -> np.ndarray:
    return np.einsum("ncpqrs,nkpq->kcrs", windows(x, *w_shape[2:], stride, pad), dy.astype(np.float64),
                     optimize=True)


def rounding_bound(terms: int, magnitudes: np.ndarray) -> np.ndarray:
    """The float32 error of a sum of `terms` products in any order: terms * eps * sum |products|."""
    return terms * EPS32 * magnitudes + 1e-30


def winograd_patches(x: np.ndarray, pad: int, p: int, q: int, tile: int = 2) -> np.ndarray:
    """(N, C, ceil(P/tile), ceil(Q/tile), tile + 2, tile + 2): the input patch of every tile x tile block of
    outputs, 0 outside the image."""
    tp, tq = (p + tile - 1) // tile, (q + tile - 1) // tile
    n, c, h, w = x.shape
    xp = np.zeros((n, c, tile * tp + 2, tile * tq + 2))
    rows, cols = min(h, tile * tp + 2 - pad), min(w, tile * tq + 2 - pad)
    xp[:, :, pad:pad + rows, pad:pad + cols] = x[:, :, :rows, :cols]
    return np.lib.stride_tricks.sliding_window_view(xp, (tile + 2, tile + 2), axis=(2, 3))[:, :, ::tile, ::tile]


def winograd_magnitudes(x: np.ndarray, w: np.ndarray, pad: int, p: int, q: int, tile: int = 2) -> np.ndarray:
    """The Winograd rung's rounding scale, (N, K, P, Q): the algorithm run in float64 on absolute values, |A^T|
    (sum over c of (|G| |g| |G^T|) * (|B^T| |d| |B|)) |A|. Its float32 error is a few epsilons of this, which
    can be far more than the direct sum's scale sum |w x|: the transforms add and subtract before they multiply,
    and what cancels in exact arithmetic still rounds."""
    g, bt, at = (np.abs(a) for a in WINOGRAD[tile])
    u = g @ np.abs(w.astype(np.float64)) @ g.T                          # (K, C, tile + 2, tile + 2)
    v = bt @ np.abs(winograd_patches(x.astype(np.float64), pad, p, q, tile)) @ bt.T   # (N, C, TP, TQ, ...)
    m = np.einsum("kcab,nctuab->nktuab", u, v, optimize=True)
    y = at @ m @ at.T                                                   # (N, K, TP, TQ, tile, tile)
    n, k, tp, tq = y.shape[:4]
    return y.transpose(0, 1, 2, 4, 3, 5).reshape(n, k, tile * tp, tile * tq)[:, :, :p, :q]


def winograd_applies(r: int, s: int, stride: int) -> bool:
    return r == s == 3 and stride == 1


def padding_mask(shape: tuple) -> np.ndarray:
    """(P, Q) mask of the outputs whose window reaches into the zero padding."""
    n, c, h, w, k, r, stride, pad = shape
    r, s = filter_size(r)
    p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
    rows = (np.arange(p) * stride - pad < 0) | (np.arange(p) * stride - pad + r > h)
    cols = (np.arange(q) * stride - pad < 0) | (np.arange(q) * stride - pad + s > w)
    return rows[:, None] | cols[None, :]


def check_conv_output(got: Any, expected: np.ndarray, bound: np.ndarray, what: str, shape: tuple | None = None,
                      flipped: np.ndarray | None = None) -> None:
    """Every value within its rounding bound of the float64 reference; when not, say what the error looks like."""
    got_h = checks.to_host(got).astype(np.float64)
    if got_h.shape != expected.shape:
        raise GradeError(f"{what}: shape {got_h.shape}, expected {expected.shape}")
    bad = ~(np.abs(got_h - expected) <= bound)  # NaN is bad
    if not bad.any():
        return
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    lines = [f"{what}: {int(bad.sum())} of {expected.size} values differ from the float64 reference by more than "
             f"the rounding of a float32 sum", f"  first bad element {list(first)}: expected "
             f"{float(expected[first])!r}, got {float(got_h[first])!r}"]
    unwritten = int(checks.is_poison(checks.to_host(got)).sum())
    if unwritten:
        lines.append(f"  {unwritten} elements were never written (still the NaN poison): does the grid cover every "
                     f"element, and does every thread of an edge tile store its outputs?")
    if flipped is not None and np.all(np.abs(got_h - flipped) <= bound):
        lines.append("  these are the values of the convolution with the filter FLIPPED (w[k][c][R-1-r][S-1-s]): a "
                     "convolution layer computes the cross-correlation, w[k][c][r][s] times x[n][c][p*stride - pad "
                     "+ r][q*stride - pad + s]")
    elif shape is not None and shape[7] > 0:
        border = padding_mask(shape)
        if border.any() and not (bad & ~border[None, None]).any():
            lines.append("  only the outputs whose window reaches into the padding are wrong: positions outside the "
                         "image count as 0 (zero padding), and must never be read")
    raise GradeError("\n".join(lines))


def operands(shape: tuple, *salt: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x, w, b and a gradient dy of the output's shape, float32."""
    n, c, h, w, k, r, stride, pad = shape
    r, s = filter_size(r)
    g = checks.rng("conv", shape, *salt)
    p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
    return (g.standard_normal((n, c, h, w)).astype(np.float32), g.standard_normal((k, c, r, s)).astype(np.float32),
            g.standard_normal(k).astype(np.float32), g.standard_normal((n, k, p, q)).astype(np.float32))


def require(kernel: str, what: str) -> None:
    if kernels.launch_count("conv.cu", kernel) == 0:
        raise GradeError(f"{what}: no launch of `{kernel}` from conv.cu was recorded: the result was computed "
                         f"without that kernel")


# ---------------------------------------------------------------- forward


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("variant", [rung(v, FORWARD) for v in (*FORWARD, "best")])
@pytest.mark.hint("y[n][k][p][q] = b[k] + the sum over c, r, s of w[k][c][r][s] * x[n][c][p*stride - pad + r]"
                  "[q*stride - pad + s], with x = 0 outside the image; every rung right at every size")
def test_conv_forward_values(variant, shape):
    n, c, h, w, k, r, stride, pad = shape
    r, s = filter_size(r)
    x_h, w_h, b_h, _ = operands(shape, "forward")
    expected = ref_conv(x_h, w_h, b_h, stride, pad)
    x, wt, b, y = backend.asarray(x_h), backend.asarray(w_h), backend.asarray(b_h), checks.poison(expected.shape)
    what = f"conv2d(variant={variant!r}) of x {x_h.shape} with w {w_h.shape}, stride {stride}, padding {pad}"
    if variant in WINOGRAD_TILE and not winograd_applies(r, s, stride):
        checks.expect_error(f"{what} (Winograd F(2x2, 3x3) computes 3 x 3 filters at stride 1 only)",
                            lambda: conv().conv2d(x, wt, b, y, stride, pad, variant), ValueError, "winograd")
        return
    checks.reset_launches()
    on_device(what, lambda: conv().conv2d(x, wt, b, y, stride, pad, variant))
    if variant in FORWARD:
        require(FORWARD[variant], what)
    bound = rounding_bound(c * r * s + 1, ref_conv(np.abs(x_h), np.abs(w_h), np.abs(b_h), stride, pad))
    if variant in WINOGRAD_TILE:  # c products of transformed values, then 3 transforms' sums (winograd_magnitudes)
        tile = WINOGRAD_TILE[variant]
        bound = bound + rounding_bound(c + 6 * tile, winograd_magnitudes(x_h, w_h, pad, *expected.shape[2:], tile))
    flipped = ref_conv(x_h, w_h[:, :, ::-1, ::-1], b_h, stride, pad) if r * s > 1 else None
    check_conv_output(y, expected, bound, what, shape, flipped)
    checks.assert_bitwise_equal(x, x_h, what=f"{what}: x after the call (must not change)")


@pytest.mark.kernel("conv.cu", "conv2d_direct")
@pytest.mark.parametrize("kernel", ["conv2d_direct", "im2col", "gemm_to_nchw", "conv2d_backward_input", "col2im",
                                    "splitk_reduce"])
@pytest.mark.parametrize("shape", [(2, 3, 9, 7, 4, 3, 1, 1), (2, 3, 9, 7, 4, (3, 5), 1, 1)], ids=shape_id)
@pytest.mark.hint("a grid-stride loop (i += gridDim.x * blockDim.x) lets any grid cover any number of elements")
def test_conv_kernels_cover_any_grid(shape, kernel):
    """The learner's kernel launched by the grader with 3 blocks of 64 threads, for more elements than that
    (stride 1: col2im's reference below adds the columns back at stride 1)."""
    n, c, h, w, k, r, stride, pad = shape
    r, s = filter_size(r)
    p, q = h + 2 * pad - r + 1, w + 2 * pad - s + 1
    x_h, w_h, b_h, dy_h = operands(shape, "grid")
    ints = tuple(np.int32(v) for v in (n, c, h, w, k, r, s, stride, pad, p, q))
    fn = kernels.load_kernel("conv.cu", kernel)
    if kernel == "conv2d_direct":
        y = checks.poison((n, k, p, q))
        args, outputs = (backend.asarray(x_h), backend.asarray(w_h), backend.asarray(b_h), y, *ints), {
            "y": (y, ref_conv(x_h, w_h, b_h, stride, pad))}
    elif kernel == "im2col":
        cols = checks.poison((c * r * s, n * p * q))
        expected = windows(x_h, r, s, stride, pad).transpose(1, 4, 5, 0, 2, 3).reshape(c * r * s, n * p * q)
        args, outputs = (backend.asarray(x_h), cols, *ints[:4], *ints[5:]), {"cols": (cols, expected)}
    elif kernel == "gemm_to_nchw":
        g = dy_h.transpose(1, 0, 2, 3).reshape(k, n * p * q).copy()
        y = checks.poison((n, k, p, q))
        args = (backend.asarray(g), backend.asarray(b_h), y, np.int32(n), np.int32(k), np.int32(p * q))
        outputs = {"y": (y, dy_h.astype(np.float64) + b_h[None, :, None, None])}
    elif kernel == "splitk_reduce":
        parts = dy_h.reshape(n, -1)  # n partial sums of k * p * q values each
        out = checks.poison(parts.shape[1])
        args = (backend.asarray(parts), out, np.int32(n), np.int64(parts.shape[1]))
        outputs = {"out": (out, parts.astype(np.float64).sum(axis=0))}
    elif kernel == "conv2d_backward_input":
        dx = checks.poison((n, c, h, w))
        args = (backend.asarray(dy_h), backend.asarray(w_h), dx, *ints)
        outputs = {"dx": (dx, ref_backward_input(dy_h, w_h, x_h.shape, stride, pad))}
    else:
        cols_h = checks.rng("cols", shape).standard_normal((c * r * s, n * p * q)).astype(np.float32)
        dx = checks.poison((n, c, h, w))
        # col2im of cols is the input gradient of a convolution whose im2col matrix had that gradient
        expected = np.zeros((n, c, h + 2 * pad, w + 2 * pad))
        view = cols_h.reshape(c, r, s, n, p, q).astype(np.float64)
        for i in range(r):
            for j in range(s):
                expected[:, :, i:i + p, j:j + q] += view[:, i, j].transpose(1, 0, 2, 3)
        args = (backend.asarray(cols_h), dx, *ints[:4], *ints[5:])
        outputs = {"dx": (dx, expected[:, :, pad:pad + h, pad:pad + w])}
    checks.assert_grid_stride(f"{kernel} launched with 3 blocks of 64 threads", fn, args, outputs, rtol=1e-5,
                              atol=1e-5)


# ---------------------------------------------------------------- backward


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("variant", [rung(v, BACKWARD_INPUT) for v in (*BACKWARD_INPUT, "best")])
@pytest.mark.hint("dx[n][c][h][w] gathers w[k][c][r][s] * dy[n][k][p][q] over every (k, r, s) whose output "
                  "(p, q) = ((h + pad - r) / stride, (w + pad - s) / stride) is whole and inside the output")
def test_conv_backward_input_values(variant, shape):
    n, c, h, w, k, r, stride, pad = shape
    r, s = filter_size(r)
    x_h, w_h, _, dy_h = operands(shape, "backward-input")
    expected = ref_backward_input(dy_h, w_h, x_h.shape, stride, pad)
    dy, wt, dx = backend.asarray(dy_h), backend.asarray(w_h), checks.poison(x_h.shape)
    what = f"conv2d_backward_input(variant={variant!r}) for x {x_h.shape}, w {w_h.shape}, stride {stride}, " \
           f"padding {pad}"
    if variant in WINOGRAD_TILE and not (winograd_applies(r, s, stride) and pad <= 2):
        checks.expect_error(f"{what} (Winograd runs the input's gradient of 3 x 3 filters at stride 1, padded by "
                            f"at most 2)", lambda: conv().conv2d_backward_input(dy, wt, dx, stride, pad, variant),
                            ValueError, "winograd")
        return
    if variant == "tiled" and stride != 1:
        checks.expect_error(f"{what} (the input's tiled rung computes stride 1)",
                            lambda: conv().conv2d_backward_input(dy, wt, dx, stride, pad, variant), ValueError,
                            "stride")
        return
    if variant == "regtile" and not (stride == 1 and r == s and pad < r):
        checks.expect_error(f"{what} (the input's rung 7 computes stride 1, square filters)",
                            lambda: conv().conv2d_backward_input(dy, wt, dx, stride, pad, variant), ValueError,
                            "regtile")
        return
    checks.reset_launches()
    on_device(what, lambda: conv().conv2d_backward_input(dy, wt, dx, stride, pad, variant))
    if variant in BACKWARD_INPUT:
        require(BACKWARD_INPUT[variant], what)
    bound = rounding_bound(k * r * s, ref_backward_input(np.abs(dy_h), np.abs(w_h), x_h.shape, stride, pad))
    if variant in WINOGRAD_TILE:  # the forward rung on dy, w rotated with its channels swapped, padded by 2 - pad
        tile, w_flipped = WINOGRAD_TILE[variant], w_h[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
        bound = bound + rounding_bound(k + 6 * tile, winograd_magnitudes(dy_h, w_flipped, 2 - pad, h, w, tile))
    check_conv_output(dx, expected, bound, what)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("variant", [rung(v, BACKWARD_WEIGHT) for v in (*BACKWARD_WEIGHT, "best")])
@pytest.mark.hint("dw[k][c][r][s] = the sum over n, p, q of dy[n][k][p][q] * x[n][c][p*stride - pad + r]"
                  "[q*stride - pad + s] (0 outside the image); the tiled rung adds partial sums: zero dw first")
def test_conv_backward_weight_values(variant, shape):
    n, c, h, w, k, r, stride, pad = shape
    x_h, w_h, _, dy_h = operands(shape, "backward-weight")
    expected = ref_backward_weight(x_h, dy_h, w_h.shape, stride, pad)
    x, dy, dw = backend.asarray(x_h), backend.asarray(dy_h), checks.poison(w_h.shape)
    what = f"conv2d_backward_weight(variant={variant!r}) for x {x_h.shape}, w {w_h.shape}, stride {stride}, " \
           f"padding {pad}"
    checks.reset_launches()
    on_device(what, lambda: conv().conv2d_backward_weight(x, dy, dw, stride, pad, variant))
    if variant in BACKWARD_WEIGHT:
        require(BACKWARD_WEIGHT[variant], what)
    positions = n * dy_h.shape[2] * dy_h.shape[3]
    bound = rounding_bound(positions, ref_backward_weight(np.abs(x_h), np.abs(dy_h), w_h.shape, stride, pad))
    try:
        check_conv_output(dw, expected, bound, what)
    except GradeError as err:
        got = checks.to_host(dw).astype(np.float64)
        ratio = float(np.linalg.norm(got) / (np.linalg.norm(expected) or 1.0))
        if np.isfinite(got).all() and ratio < 0.8:
            raise GradeError(f"{err}\n  dw is {ratio:.0%} of the expected size, as if it summed only part of the "
                             f"N*P*Q = {positions} positions: a reduction split into chunks must add up every "
                             f"chunk's partial sum (split-K: the final reduction)") from None
        raise


@pytest.mark.kernel("conv.cu", "conv2d_bias_grad")
@pytest.mark.parametrize("dy_shape", [(1, 1, 1, 1), (3, 7, 5, 3), (64, 8, 28, 28), (2, 1031, 1, 2), (2, 3, 70, 61)],
                         ids=str)
@pytest.mark.hint("db[k] = the sum of dy[n][k][p][q] over n, p and q: blocks (k, z) over units of the planes, then "
                  "splitk_reduce adds the splits' partial sums")
def test_conv_bias_grad_values(dy_shape):
    dy_h = checks.rng("bias", dy_shape).standard_normal(dy_shape).astype(np.float32)
    db = checks.poison(dy_shape[1])
    what = f"conv2d_bias_grad(dy of shape {dy_shape})"
    checks.reset_launches()
    dy = backend.asarray(dy_h)
    on_device(what, lambda: conv().conv2d_bias_grad(dy, db))
    require("conv2d_bias_grad", what)
    terms = dy_shape[0] * dy_shape[2] * dy_shape[3]
    bound = rounding_bound(terms, np.abs(dy_h.astype(np.float64)).sum(axis=(0, 2, 3)))
    check_conv_output(db, dy_h.astype(np.float64).sum(axis=(0, 2, 3)), bound, what)


@pytest.mark.parametrize("kernel", ["conv2d_tiled", "conv2d_backward_weight_tiled", "conv2d_backward_weight",
                                    "conv2d_bias_grad", "conv2d_igemm", "conv2d_backward_input_igemm",
                                    "conv2d_backward_input_tiled",
                                    "conv2d_backward_weight_igemm", "conv2d_backward_weight_regtile",
                                    "winograd_gemm"])
@pytest.mark.hint("a barrier after a tile is stored and before it is read, another before it is overwritten",
                  on="fault")
def test_conv_kernels_have_no_shared_memory_race(kernel):
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase6 --device emu)")
    from minitorch import emu

    shape = (2, 3, 18, 17, 9, 3, 1, 1)  # two tiles across, several channel tiles
    n, c, h, w, k, r, stride, pad = shape
    x_h, w_h, b_h, dy_h = operands(shape, "race")
    x, wt, b, dy = (backend.asarray(a) for a in (x_h, w_h, b_h, dy_h))
    what = f"{kernel} in the emulator's check mode"
    with emu.check_mode():
        checks.reset_launches()
        if kernel in ("conv2d_tiled", "conv2d_igemm", "winograd_gemm"):
            out = checks.poison(dy_h.shape)
            variant = {"conv2d_tiled": "tiled", "conv2d_igemm": "igemm", "winograd_gemm": "winograd"}[kernel]
            launch_checked(what, lambda: conv().conv2d(x, wt, b, out, stride, pad, variant))
        elif kernel == "conv2d_backward_input_igemm":
            out = checks.poison(x_h.shape)
            launch_checked(what, lambda: conv().conv2d_backward_input(dy, wt, out, stride, pad, "igemm"))
        elif kernel == "conv2d_backward_input_tiled":
            # launched as the lab says, with 2 channels of dy a step: the block overwrites its tiles 5 times (the
            # launcher stages all 9 at once, and a missing second barrier would never show)
            out, kgroup = checks.poison(x_h.shape), 2
            sizes = tuple(np.int32(v) for v in (n, c, h, w, k, r, r, stride, pad, h, w))
            launch = kernels.load_kernel("conv.cu", kernel)
            launch_checked(what, lambda: launch((((h + 15) // 16) * ((w + 15) // 16), (c + 3) // 4, n), (16, 16),
                                                (dy, wt, out, *sizes, np.int32(kgroup)),
                                                shared_mem=4 * kgroup * ((15 + r) * (15 + r) + r * r * 4)))
        elif kernel == "conv2d_bias_grad":
            out = checks.poison((k,))
            launch_checked(what, lambda: conv().conv2d_bias_grad(dy, out))
        else:
            out = checks.poison(w_h.shape)
            variant = {"conv2d_backward_weight_tiled": "tiled", "conv2d_backward_weight_igemm": "igemm",
                       "conv2d_backward_weight_regtile": "regtile"}.get(kernel, "direct")
            launch_checked(what, lambda: conv().conv2d_backward_weight(x, dy, out, stride, pad, variant))
        require(kernel, what)


@pytest.mark.hint("conv.py checks its arguments and names what it expected and what it got, before launching")
def test_conv_launcher_rejects_bad_arguments():
    cv = conv()
    x, w, b = backend.empty((2, 3, 8, 8)), backend.empty((4, 3, 3, 3)), backend.empty((4,))
    y = backend.empty((2, 4, 8, 8))
    checks.expect_error("conv2d with 5 input channels in w for 3 in x",
                        lambda: cv.conv2d(x, backend.empty((4, 5, 3, 3)), b, y, 1, 1), ValueError, "5", "3")
    checks.expect_error("conv2d into y of the wrong shape", lambda: cv.conv2d(x, w, b, backend.empty((2, 4, 6, 6)),
                                                                            1, 1), ValueError, "(2, 4, 8, 8)")
    checks.expect_error("conv2d with a bias of 3 values for 4 filters",
                        lambda: cv.conv2d(x, w, backend.empty((3,)), y, 1, 1), ValueError, "(4,)", "(3,)")
    checks.expect_error("conv2d of a 3-D x", lambda: cv.conv2d(backend.empty((3, 8, 8)), w, b, y, 1, 1),
                        ValueError, "(3, 8, 8)")
    checks.expect_error("conv2d of a float64 x", lambda: cv.conv2d(backend.asarray(np.zeros((2, 3, 8, 8))), w, b,
                                                                  y, 1, 1), TypeError, "float64")
    checks.expect_error("conv2d of a NumPy x", lambda: cv.conv2d(np.zeros((2, 3, 8, 8), np.float32), w, b, y, 1, 1),
                        TypeError, "numpy")
    checks.expect_error("conv2d with stride 0", lambda: cv.conv2d(x, w, b, y, 0, 1), ValueError, "stride")
    checks.expect_error("conv2d of a 9x9 filter on an 8x8 input",
                        lambda: cv.conv2d(x, backend.empty((4, 3, 9, 9)), b, backend.empty((2, 4, 1, 1)), 1, 0),
                        ValueError, "9 x 9", "8 x 8")
    checks.expect_error("conv2d with an unknown variant", lambda: cv.conv2d(x, w, b, y, 1, 1, "fastest"),
                        ValueError, "fastest")
    checks.expect_error("conv2d_backward_weight with dy of the wrong shape",
                        lambda: cv.conv2d_backward_weight(x, backend.empty((2, 4, 7, 7)), backend.empty(w.shape), 1,
                                                          1), ValueError, "(2, 4, 8, 8)", "(2, 4, 7, 7)")


@pytest.mark.parametrize("call", ["forward-direct", "forward-im2col", "forward-tiled", "forward-igemm",
                                  "forward-winograd", "forward-winograd4", "forward-regtile", "input-direct",
                                  "input-im2col", "input-tiled", "input-igemm", "input-winograd", "input-winograd4",
                                  "input-regtile", "weight-direct", "weight-tiled", "weight-igemm",
                                  "weight-regtile", "bias"])
@pytest.mark.hint("compute the result with your kernels, on the device: no NumPy/CuPy/PyTorch result copied in "
                  "after the launch")
def test_conv_results_come_from_your_kernels(call):
    shape = (2, 3, 9, 8, 5, 3, 1, 1)
    x_h, w_h, b_h, dy_h = operands(shape, "host-writes")
    x, w, b, dy = (backend.asarray(a) for a in (x_h, w_h, b_h, dy_h))
    kind, _, variant = call.partition("-")
    cv = conv()
    if kind == "forward":
        out = checks.poison(dy_h.shape)
        fn, inputs = partial(cv.conv2d, x, w, b, out, 1, 1, variant), (x, w, b)
    elif kind == "input":
        out = checks.poison(x_h.shape)
        fn, inputs = partial(cv.conv2d_backward_input, dy, w, out, 1, 1, variant), (dy, w)
    elif kind == "weight":
        out = checks.poison(w_h.shape)
        fn, inputs = partial(cv.conv2d_backward_weight, x, dy, out, 1, 1, variant), (x, dy)
    else:
        out = checks.poison((shape[4],))
        fn, inputs = partial(cv.conv2d_bias_grad, dy, out), (dy,)
    checks.assert_computed_on_device(f"conv.py {call}", fn, inputs=inputs, outputs=(out,), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", [pytest.param(k, marks=pytest.mark.kernel("conv.cu", k.partition("-")[0]), id=k)
                                    for rung in ("winograd", "winograd4")
                                    for k in (f"{rung}_filter", f"{rung}_filter-flip", f"{rung}_input",
                                              f"{rung}_output")])
@pytest.mark.hint("each transform on its own: U = G g G^T ((tile + 2)^2 per filter and channel), V = B^T d B (per "
                  "channel and patch, 0 outside the image), y = A^T M A + b (tile x tile per filter and patch); the "
                  "matrices are in conv.cu's comments above winograd_filter (F(2x2, 3x3)) and winograd4_filter "
                  "(F(4x4, 3x3))")
def test_winograd_transforms(kernel):
    """Each of the Winograd rungs' three transforms against the matrices in float64, launched by the grader (3 blocks
    of 64 threads: a grid-stride loop), on 5 x 7 images padded by 1: P and Q no multiple of the tile, partial
    patches at the edge. The filter transform also with flip = 1 (the input gradient's filters)."""
    n, c, h, w, k, pad = 2, 3, 5, 7, 4, 1
    p, q = h + 2 * pad - 2, w + 2 * pad - 2
    g = checks.rng("winograd", kernel)
    kernel, _, flip = kernel.partition("-")
    rung, _, part = kernel.partition("_")
    tile = WINOGRAD_TILE[rung]
    mat_g, mat_bt, mat_at = WINOGRAD[tile]
    e = (tile + 2) ** 2
    tp, tq = (p + tile - 1) // tile, (q + tile - 1) // tile
    t = n * tp * tq
    fn = kernels.load_kernel("conv.cu", kernel)
    ints = partial(map, np.int32)
    if part == "filter" and flip:  # U[e][c][k] of w[k][c] rotated by 180 degrees
        w_h = g.standard_normal((k, c, 3, 3)).astype(np.float32)
        u = checks.poison((e, c, k))
        rotated = w_h[:, :, ::-1, ::-1].transpose(1, 0, 2, 3).astype(np.float64)
        expected = (mat_g @ rotated @ mat_g.T).reshape(c, k, e).transpose(2, 0, 1)
        args, outputs = (backend.asarray(w_h), u, *ints((k, c, 1))), {"U (flip = 1)": (u, expected)}
    elif part == "filter":
        w_h = g.standard_normal((k, c, 3, 3)).astype(np.float32)
        u = checks.poison((e, k, c))
        expected = (mat_g @ w_h.astype(np.float64) @ mat_g.T).reshape(k, c, e).transpose(2, 0, 1)
        args, outputs = (backend.asarray(w_h), u, *ints((k, c, 0))), {"U": (u, expected)}
    elif part == "input":
        x_h = g.standard_normal((n, c, h, w)).astype(np.float32)
        v = checks.poison((e, c, t))
        d = winograd_patches(x_h.astype(np.float64), pad, p, q, tile)  # (N, C, TP, TQ, tile + 2, tile + 2)
        expected = (mat_bt @ d @ mat_bt.T).transpose(4, 5, 1, 0, 2, 3).reshape(e, c, t)
        args, outputs = (backend.asarray(x_h), v, *ints((n, c, h, w, pad, tp, tq))), {"V": (v, expected)}
    else:
        m_h = g.standard_normal((e, k, t)).astype(np.float32)
        b_h = g.standard_normal(k).astype(np.float32)
        y = checks.poison((n, k, p, q))
        tiles = m_h.astype(np.float64).reshape(tile + 2, tile + 2, k, n, tp, tq).transpose(3, 2, 4, 5, 0, 1)
        full = (mat_at @ tiles @ mat_at.T).transpose(0, 1, 2, 4, 3, 5).reshape(n, k, tile * tp, tile * tq)
        expected = full[:, :, :p, :q] + b_h[None, :, None, None]
        args = (backend.asarray(m_h), backend.asarray(b_h), y, *ints((n, k, p, q, tp, tq)))
        outputs = {"y": (y, expected)}
    # F(4x4)'s sums of terms up to 8 (and 25) times their inputs: float32 rounds them at that scale
    scale = max(float(np.abs(exp).max()) for _, exp in outputs.values()) if tile == 4 else 1.0
    checks.assert_grid_stride(f"{kernel} launched with 3 blocks of 64 threads", fn, args, outputs, rtol=1e-5,
                              atol=1e-5 * scale)


@pytest.mark.kernel("conv.cu", "conv2d_backward_weight_tiled")
@pytest.mark.hint("F.conv2d runs conv.py's conv2d forward and the three backward launchers")
def test_functional_conv2d_forward_and_backward():
    import minitorch
    from minitorch import functional as F  # noqa: N812 (PyTorch's spelling)

    shape = (3, 2, 11, 10, 5, 3, 2, 1)
    n, c, h, w, k, r, stride, pad = shape
    x_h, w_h, b_h, dy_h = operands(shape, "functional")
    x, wt, b = (minitorch.tensor(a, requires_grad=True) for a in (x_h, w_h, b_h))
    checks.reset_launches()
    y = F.conv2d(x, wt, b, stride, pad)
    y.backward(minitorch.tensor(dy_h))
    launched = sorted(f for (file, f), count in kernels.launch_counts().items() if count and file == "conv.cu")
    if not any(f.startswith("conv2d_backward") or f == "col2im" for f in launched):
        raise GradeError(f"F.conv2d's backward launched none of your backward kernels: {launched}")
    checks.assert_close(y, ref_conv(x_h, w_h, b_h, stride, pad), rtol=1e-4, atol=1e-4, what="F.conv2d")
    checks.assert_close(x.grad, ref_backward_input(dy_h, w_h, x_h.shape, stride, pad), rtol=1e-4, atol=1e-4,
                        what="the input gradient of F.conv2d")
    checks.assert_close(wt.grad, ref_backward_weight(x_h, dy_h, w_h.shape, stride, pad), rtol=1e-4, atol=1e-4,
                        what="the weight gradient of F.conv2d")
    checks.assert_close(b.grad, dy_h.astype(np.float64).sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-4,
                        what="the bias gradient of F.conv2d")


# ---------------------------------------------------------------- max pooling

# (N, C, H, W, kernel, stride, padding): MNIST's 2x2, odd sizes (the last row and column belong to no window),
# overlapping windows (stride < kernel) with padding, a 1x1 window, a window as large as the input.
POOL_SHAPES = [(1, 1, 1, 1, 1, 1, 0), (2, 3, 28, 28, 2, 2, 0), (2, 3, 7, 9, 2, 2, 0), (1, 2, 9, 8, 3, 2, 1),
               (2, 2, 6, 7, 3, 1, 1), (1, 1, 5, 5, 5, 5, 2), (3, 1, 8, 6, 2, 1, 0)]
if ON_GPU:
    POOL_SHAPES += [(64, 16, 28, 28, 2, 2, 0), (5, 64, 57, 55, 3, 2, 1)]


def pool_id(shape: tuple) -> str:
    n, c, h, w, k, st, pad = shape
    return f"{n}x{c}x{h}x{w}-k{k}s{st}p{pad}"


def ref_pool(x: np.ndarray, k: int, st: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """(max, argmax) in float64 by loops over the window in row-major order: the first maximum wins."""
    n, c, h, w = x.shape
    p, q = (h + 2 * pad - k) // st + 1, (w + 2 * pad - k) // st + 1
    best, at = np.full((n, c, p, q), -np.inf), np.full((n, c, p, q), -1, np.int64)
    for r in range(k):
        for s in range(k):
            for i in range(p):
                for j in range(q):
                    hh, ww = i * st - pad + r, j * st - pad + s
                    if 0 <= hh < h and 0 <= ww < w:
                        v = x[:, :, hh, ww].astype(np.float64)
                        better = (at[:, :, i, j] < 0) | (v > best[:, :, i, j])
                        best[:, :, i, j] = np.where(better, v, best[:, :, i, j])
                        at[:, :, i, j] = np.where(better, hh * w + ww, at[:, :, i, j])
    return best, at


def ref_pool_backward(dy: np.ndarray, at: np.ndarray, x_shape: tuple) -> np.ndarray:
    n, c, h, w = x_shape
    dx = np.zeros((n * c, h * w))
    np.add.at(dx, (np.repeat(np.arange(n * c), at[0, 0].size), at.reshape(-1)), dy.astype(np.float64).reshape(-1))
    return dx.reshape(x_shape)


def tied(shape: tuple, *salt: object) -> np.ndarray:
    """Small integers: many windows hold their maximum twice or more."""
    return checks.rng("pool", shape, *salt).integers(-3, 4, shape[:4]).astype(np.float32)


@pytest.mark.kernel("maxpool.cu", "maxpool2d_forward")
@pytest.mark.parametrize("shape", POOL_SHAPES, ids=pool_id)
@pytest.mark.hint("the maximum of each window (padding left out) and its position h * W + w in the plane; on a tie "
                  "the FIRST in row-major order of the window wins (compare with >, not >=)")
def test_maxpool_forward_values(shape):
    n, c, h, w, k, st, pad = shape
    x_h = tied(shape, "forward")
    expected, expected_at = ref_pool(x_h, k, st, pad)
    y, at = checks.poison(expected.shape), backend.asarray(np.full(expected.shape, -7, np.int32))
    what = f"max_pool2d of x {x_h.shape}, kernel {k}, stride {st}, padding {pad}"
    with checks.expect_launch("maxpool.cu", "maxpool2d_forward"):
        x = backend.asarray(x_h)
        on_device(what, lambda: pool().max_pool2d(x, y, at, k, st, pad))
    checks.assert_close(y, expected, rtol=0, what=what)
    got_at = checks.to_host(at)
    if not np.array_equal(got_at, expected_at):
        i = tuple(int(v) for v in np.argwhere(got_at != expected_at)[0])
        value_there = x_h[i[0], i[1]].reshape(-1)[got_at[i]] if 0 <= got_at[i] < h * w else None
        note = (" (the same value at a later place in the window: ties go to the first maximum in row-major order)"
                if value_there == expected[i] else "")
        raise GradeError(f"{what}: argmax{list(i)} is {int(got_at[i])}, expected {int(expected_at[i])} (the index "
                         f"h * W + w of the window's maximum in its plane){note}")


@pytest.mark.kernel("maxpool.cu", "maxpool2d_forward")
@pytest.mark.hint("a NaN in a window wins over every number (it propagates), as in PyTorch")
def test_maxpool_propagates_nan():
    x_h = np.zeros((1, 1, 4, 4), np.float32)
    x_h[0, 0, 1, 0], x_h[0, 0, 3, 3] = np.nan, np.nan
    y, at = checks.poison((1, 1, 2, 2)), backend.asarray(np.full((1, 1, 2, 2), -7, np.int32))
    x = backend.asarray(x_h)
    on_device("max_pool2d with NaNs", lambda: pool().max_pool2d(x, y, at, 2))
    got = checks.to_host(y)[0, 0]
    if not (np.isnan(got[0, 0]) and np.isnan(got[1, 1]) and got[0, 1] == 0 and got[1, 0] == 0):
        raise GradeError(f"max_pool2d of a window holding a NaN must give NaN (and the others 0); got {got.tolist()}")
    if checks.to_host(at)[0, 0].tolist() != [[4, 2], [8, 15]]:
        raise GradeError(f"max_pool2d with NaNs: argmax {checks.to_host(at)[0, 0].tolist()}, expected "
                         f"[[4, 2], [8, 15]] (the NaN's position where a window holds one)")


@pytest.mark.kernel("maxpool.cu", "maxpool2d_backward")
@pytest.mark.parametrize("shape", POOL_SHAPES, ids=pool_id)
@pytest.mark.hint("each dy[n][c][p][q] goes to the ONE element argmax[n][c][p][q] names; dx is 0 elsewhere, and "
                  "an element that won several overlapping windows gets the sum of their gradients")
def test_maxpool_backward_values(shape):
    n, c, h, w, k, st, pad = shape
    x_h = tied(shape, "backward")
    _, at_h = ref_pool(x_h, k, st, pad)
    dy_h = checks.rng("pool-dy", shape).standard_normal(at_h.shape).astype(np.float32)
    expected = ref_pool_backward(dy_h, at_h, x_h.shape)
    dx = checks.poison(x_h.shape)
    what = f"max_pool2d_backward for x {x_h.shape}, kernel {k}, stride {st}, padding {pad}"
    with checks.expect_launch("maxpool.cu", "maxpool2d_backward"):
        dy, at = backend.asarray(dy_h), backend.asarray(at_h.astype(np.int32))
        on_device(what, lambda: pool().max_pool2d_backward(dy, at, dx, k, st, pad))
    got = checks.to_host(dx).astype(np.float64)
    try:
        checks.assert_close(got, expected, rtol=1e-6, atol=1e-6, what=what)
    except GradeError as err:
        losers = expected == 0
        winners_dx = np.zeros_like(expected, bool).reshape(n * c, h * w)
        winners_dx[np.repeat(np.arange(n * c), at_h[0, 0].size), at_h.reshape(-1)] = True
        stray = np.isfinite(got) & (got != 0) & ~winners_dx.reshape(expected.shape) & losers
        if stray.any():
            raise GradeError(f"{err}\n  {int(stray.sum())} elements that were no window's maximum received a "
                             f"gradient: route each dy only to the element argmax names") from None
        raise


@pytest.mark.kernel("maxpool.cu", "maxpool2d_backward")
@pytest.mark.parametrize("kernel", ["maxpool2d_forward", "maxpool2d_backward"])
@pytest.mark.hint("a grid-stride loop (i += gridDim.x * blockDim.x) lets any grid cover any number of elements")
def test_maxpool_kernels_cover_any_grid(kernel):
    shape = (2, 3, 9, 11, 2, 2, 0)
    n, c, h, w, k, st, pad = shape
    x_h = tied(shape, "grid")
    y_h, at_h = ref_pool(x_h, k, st, pad)
    p, q = y_h.shape[2:]
    ints = tuple(np.int32(v) for v in (n, c, h, w, k, st, pad, p, q))
    fn = kernels.load_kernel("maxpool.cu", kernel)
    if kernel == "maxpool2d_forward":
        y, at = checks.poison(y_h.shape), backend.asarray(np.full(y_h.shape, -7, np.int32))
        checks.assert_grid_stride(f"{kernel} with 3 blocks of 64 threads", fn, (backend.asarray(x_h), y, at, *ints),
                                  {"y": (y, y_h)}, rtol=0)
    else:
        dy_h = checks.rng("pool-grid").standard_normal(y_h.shape).astype(np.float32)
        dx = checks.poison(x_h.shape)
        checks.assert_grid_stride(f"{kernel} with 3 blocks of 64 threads", fn,
                                  (backend.asarray(dy_h), backend.asarray(at_h.astype(np.int32)), dx, *ints),
                                  {"dx": (dx, ref_pool_backward(dy_h, at_h, x_h.shape))}, rtol=1e-6)


@pytest.mark.hint("maxpool.py checks its arguments and names what it expected and what it got, before launching")
def test_maxpool_launcher_rejects_bad_arguments():
    mp = pool()
    x, y, at = backend.empty((2, 3, 8, 8)), backend.empty((2, 3, 4, 4)), backend.empty((2, 3, 4, 4), np.int32)
    checks.expect_error("max_pool2d into y of the wrong shape", lambda: mp.max_pool2d(x, backend.empty((2, 3, 3, 3)),
                                                                                      at, 2), ValueError,
                        "(2, 3, 4, 4)", "(2, 3, 3, 3)")
    checks.expect_error("max_pool2d with a float32 argmax", lambda: mp.max_pool2d(x, y, backend.empty((2, 3, 4, 4)),
                                                                                  2), TypeError, "int32", "float32")
    checks.expect_error("max_pool2d with padding past half the window", lambda: mp.max_pool2d(x, y, at, 2, 2, 2),
                        ValueError, "padding")
    checks.expect_error("max_pool2d of a 3-D x", lambda: mp.max_pool2d(backend.empty((3, 8, 8)), y, at, 2),
                        ValueError, "(3, 8, 8)")
    checks.expect_error("max_pool2d_backward with dy of the wrong shape",
                        lambda: mp.max_pool2d_backward(backend.empty((2, 3, 5, 5)), at, x, 2), ValueError,
                        "(2, 3, 4, 4)", "(2, 3, 5, 5)")


@pytest.mark.parametrize("which", ["forward", "backward"])
@pytest.mark.hint("compute the result with your kernels, on the device: nothing copied in after the launch")
def test_maxpool_results_come_from_your_kernels(which):
    shape = (2, 3, 9, 8, 2, 2, 0)
    x_h = tied(shape, "host-writes")
    x = backend.asarray(x_h)
    y_h, at_h = ref_pool(x_h, 2, 2, 0)
    mp = pool()
    if which == "forward":
        y, at = checks.poison(y_h.shape), backend.asarray(np.full(y_h.shape, -7, np.int32))
        checks.assert_computed_on_device("max_pool2d", partial(mp.max_pool2d, x, y, at, 2), inputs=(x,),
                                         outputs=(y, at))
    else:
        at, dy = backend.asarray(at_h.astype(np.int32)), backend.asarray(np.ones(y_h.shape, np.float32))
        dx = checks.poison(x_h.shape)
        checks.assert_computed_on_device("max_pool2d_backward", partial(mp.max_pool2d_backward, dy, at, dx, 2),
                                         inputs=(dy, at), outputs=(dx,))


# ---------------------------------------------------------------- performance (GPU only), against cuDNN

# (name, N, C, H, W, K): the second layer of the MNIST network at the deliverable's batch of 64, and a ResNet
# layer: 64 images of 64 channels, 56 x 56, 3 x 3 filters, padding 1.
PERF_SHAPES = [("mnist-conv2", 64, 8, 14, 14, 16), ("resnet-64x64x56x56", 64, 64, 56, 56, 64)]


def _torch_cuda():
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    try:
        import torch
    except ImportError:
        pytest.skip('not measured: PyTorch is not installed, so there is no cuDNN to race (`pip install -e ".[gpu]"`)')
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    torch.backends.cudnn.allow_tf32 = False  # float32 arithmetic, as the learner's kernels
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True    # cuDNN's fastest algorithm for each shape
    return torch


@pytest.mark.perf
@pytest.mark.parametrize("pass_", ["forward", "backward"])
@pytest.mark.parametrize("name, n, c, h, w, k", PERF_SHAPES, ids=[s[0] for s in PERF_SHAPES])
@pytest.mark.kernel("conv.cu", "conv2d_tiled")
@pytest.mark.hint("see the chapter's ladder: reuse each loaded value (tiles in shared memory, the GEMM), and give "
                  "the GPU enough blocks (split the weight gradient's long reduction)")
def test_perf_conv_best_against_cudnn(name, n, c, h, w, k, pass_, record_property):
    torch = _torch_cuda()
    import cupy

    gen = torch.Generator(device="cuda").manual_seed(checks.seed())
    xt = torch.randn(n, c, h, w, device="cuda", generator=gen)
    wt = torch.randn(k, c, 3, 3, device="cuda", generator=gen) * 0.1
    bt = torch.randn(k, device="cuda", generator=gen)
    dyt = torch.randn(n, k, h, w, device="cuda", generator=gen)
    x, wc, b, dy = (cupy.asarray(t) for t in (xt, wt, bt, dyt))
    cv = conv()
    y, dx, dw, db = cupy.empty((n, k, h, w), np.float32), cupy.empty_like(x), cupy.empty_like(wc), cupy.empty_like(b)
    flop = 2.0 * n * k * h * w * c * 9
    if pass_ == "forward":
        cv.conv2d(x, wc, b, y, 1, 1)
        expected = torch.nn.functional.conv2d(xt, wt, bt, padding=1)
        if not bool(torch.allclose(torch.as_tensor(y, device="cuda"), expected, rtol=1e-3, atol=1e-3)):
            raise GradeError(f"conv2d at {name} differs from cuDNN's")
        mine = lambda: cv.conv2d(x, wc, b, y, 1, 1)  # noqa: E731
        theirs = lambda: torch.nn.functional.conv2d(xt, wt, bt, padding=1)  # noqa: E731
    else:
        flop *= 2  # the input's and the weight's gradients, each as much work as the forward
        grad = torch.nn.grad

        def mine():
            cv.conv2d_backward_input(dy, wc, dx, 1, 1)
            cv.conv2d_backward_weight(x, dy, dw, 1, 1)
            cv.conv2d_bias_grad(dy, db)

        def theirs():
            grad.conv2d_input(xt.shape, wt, dyt, padding=1)
            grad.conv2d_weight(xt, wt.shape, dyt, padding=1)
            dyt.sum(dim=(0, 2, 3))

        mine()
        expected_dw = grad.conv2d_weight(xt, wt.shape, dyt, padding=1)
        if not bool(torch.allclose(torch.as_tensor(dw, device="cuda"), expected_dw, rtol=1e-3,
                                   atol=1e-3 * float(expected_dw.abs().max()))):
            raise GradeError(f"conv2d_backward_weight at {name} differs from cuDNN's")
    checks.perf_ratio(f"conv2d {pass_} (best) at {name}", mine, theirs, flop, f"phase6.conv_{pass_}_{name.split('-')[0]}",
                      record_property, unit="GFLOP/s", reference_name="cuDNN (torch, TF32 off)")
