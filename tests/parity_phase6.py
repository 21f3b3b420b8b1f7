"""Parity cases of Phase 6's kernels (softmax.cu, conv.cu, maxpool.cu), for tests/test_parity.py.

Each case launches one solution kernel on inputs chosen so that every result is exact in float32: small integers
for the convolutions (products and sums exact in any order, so atomics and fused multiply-adds change nothing),
and for the row kernels logits of 0 and -200 only (expf gives exactly 1 and 0, each row's sum is a power of two,
the log of a sum of 1 is 0). A GPU's expf, logf, FMAs and summation order then give the emulator's bits, and both
equal the float64 reference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minitorch import backend, kernels


def _dev(x: np.ndarray):
    return backend.asarray(np.ascontiguousarray(x))


def _poison(shape, dtype=np.float32):
    return backend.asarray(np.full(shape, np.nan if dtype == np.float32 else -7, dtype))


# ---------------------------------------------------------------- softmax.cu


def _rows_of_maxima(n: int, rng: np.random.Generator, single: bool) -> tuple[np.ndarray, int]:
    """(rows, cols) logits of 0 and -200, each row holding a power of two of zeros (exactly one if `single`), and
    the threads a row: a warp for rows up to 1024, a block of 256 beyond."""
    rows, cols = n % 13 + 1, [1, 7, 33, 1025][n % 4]
    x = np.full((rows, cols), -200.0, np.float32)
    for r in range(rows):
        k = 1 if single else 1 << int(rng.integers(0, cols.bit_length()))  # 1, 2, 4, ... <= cols
        x[r, rng.choice(cols, size=k, replace=False)] = 0.0
    return x, 32 if cols <= 1024 else 256


def _row_launch(function: str, threads: int, rows: int, *args) -> None:
    grid, block = (((rows + 7) // 8,), (32, 8)) if threads == 32 else ((rows,), (threads, 1))
    kernels.load_kernel("softmax.cu", function)(grid, block, args)


def _softmax(function: str) -> Callable:
    def case(n: int, rng: np.random.Generator):
        x, threads = _rows_of_maxima(n, rng, single=function in ("log_softmax_forward", "log_softmax_backward",
                                                                 "cross_entropy_forward", "cross_entropy_backward"))
        rows, cols = x.shape
        x64 = x.astype(np.float64)
        ones = (x64 == 0).astype(np.float64)  # exp(0) = 1; exp(-200) is 0 in float32
        p = ones / ones.sum(axis=1, keepdims=True)
        ints = (np.int32(rows), np.int32(cols))
        if function in ("softmax_forward", "log_softmax_forward"):
            out = _poison(x.shape)
            _row_launch(function, threads, rows, _dev(x), out, *ints)
            return backend.asnumpy(out), (p if function == "softmax_forward" else x64)
        if function in ("softmax_backward", "log_softmax_backward"):
            y = p.astype(np.float32) if function == "softmax_backward" else x
            dy = rng.integers(-4, 5, x.shape).astype(np.float32)
            out = _poison(x.shape)
            _row_launch(function, threads, rows, _dev(y), _dev(dy), out, *ints)
            y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
            expected = (y64 * (dy64 - (dy64 * y64).sum(axis=1, keepdims=True)) if function == "softmax_backward"
                        else dy64 - (y64 == 0) * dy64.sum(axis=1, keepdims=True))
            return backend.asnumpy(out), expected
        t = rng.integers(0, cols, rows).astype(np.int32)
        loss64 = -x64[np.arange(rows), t]  # max + log(sum) - x[t], with max 0 and a sum of exactly 1
        if function == "cross_entropy_forward":
            out = _poison(rows)
            _row_launch(function, threads, rows, _dev(x), _dev(t), out, *ints)
            return backend.asnumpy(out), loss64
        if function == "cross_entropy_mean":
            m = 1 << (n % 11)  # a power of two of rows: the mean is exact
            losses = rng.integers(0, 9, m).astype(np.float32) * 25
            out = _poison(1)
            kernels.load_kernel("softmax.cu", function)((1,), (256,), (_dev(losses), out, np.int32(m)))
            return backend.asnumpy(out), np.array([losses.astype(np.float64).mean()])
        scale = np.float32(0.25)
        out = _poison(x.shape)
        _row_launch(function, threads, rows, _dev(x), _dev(t), out, scale, *ints)
        expected = p.copy()
        expected[np.arange(rows), t] -= 1
        return backend.asnumpy(out), 0.25 * expected
    return case


SOFTMAX_KERNELS = ("softmax_forward", "log_softmax_forward", "softmax_backward", "log_softmax_backward",
                   "cross_entropy_forward", "cross_entropy_mean", "cross_entropy_backward")


# ---------------------------------------------------------------- conv.cu


def _conv_shape(n: int) -> tuple[int, ...]:
    """(N, C, H, W, K, R, stride, pad) from n: odd sizes, 1/3/5 filters, stride 1 or 2, padding 0 to 2."""
    r = [1, 3, 5][n % 3]
    return (n % 2 + 1, n % 3 + 1, n % 7 + r + 2, n % 5 + r + 1, n % 9 + 1, r, n % 2 + 1, (n // 3) % (r // 2 + 1))


def _ref_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncpqrs,kcrs->nkpq", win, w.astype(np.float64))


def _ref_backward_input(dy: np.ndarray, w: np.ndarray, x_shape, stride: int, pad: int) -> np.ndarray:
    n, c, h, wd = x_shape
    r = w.shape[2]
    p, q = dy.shape[2:]
    dxp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    for i in range(r):
        for j in range(r):
            dxp[:, :, i:i + stride * (p - 1) + 1:stride, j:j + stride * (q - 1) + 1:stride] += np.einsum(
                "nkpq,kc->ncpq", dy.astype(np.float64), w[:, :, i, j].astype(np.float64))
    return dxp[:, :, pad:pad + h, pad:pad + wd]


def _ref_weight_partials(x: np.ndarray, dy: np.ndarray, r: int, stride: int, pad: int, chunk: int) -> np.ndarray:
    """The weight gradient's partial sums, one per chunk of `chunk` positions of N*P*Q: (chunks, K, C*R*R)."""
    c, k = x.shape[1], dy.shape[1]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (r, r), axis=(2, 3))[:, :, ::stride, ::stride]
    cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(c * r * r, -1)
    dys = dy.astype(np.float64).transpose(1, 0, 2, 3).reshape(k, -1)
    chunks = (dys.shape[1] + chunk - 1) // chunk
    return np.stack([dys[:, z * chunk:(z + 1) * chunk] @ cols[:, z * chunk:(z + 1) * chunk].T for z in range(chunks)])


def _conv(function: str) -> Callable:
    def case(n: int, rng: np.random.Generator):
        nb, c, h, wd, k, r, stride, pad = _conv_shape(n)
        p, q = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - r) // stride + 1
        ints = lambda *shape: rng.integers(-2, 3, shape).astype(np.float32)  # noqa: E731
        x, w, b, dy = ints(nb, c, h, wd), ints(k, c, r, r), ints(k), ints(nb, k, p, q)
        sizes = tuple(np.int32(v) for v in (nb, c, h, wd, k, r, r, stride, pad, p, q))
        no_k = sizes[:4] + sizes[5:]  # the kernels that take no K
        launch = kernels.load_kernel("conv.cu", function)
        small = ((3,), (64,))  # a small grid: grid-stride loops cover the rest
        if function in ("conv2d_direct", "conv2d_tiled"):
            y = _poison((nb, k, p, q))
            if function == "conv2d_direct":
                launch(*small, (_dev(x), _dev(w), _dev(b), y, *sizes))
            else:
                ih, iw = 15 * stride + r, 15 * stride + r
                tiles = ((p + 15) // 16) * ((q + 15) // 16)
                launch((tiles, (k + 3) // 4, nb), (16, 16), (_dev(x), _dev(w), _dev(b), y, *sizes),
                       shared_mem=4 * 4 * (ih * iw + 4 * r * r))  # 4 channels (CGROUP) a step, 4 filters (KTILE)
            return backend.asnumpy(y), _ref_conv(x, w, stride, pad) + b[None, :, None, None]
        if function == "im2col":
            cols = _poison((c * r * r, nb * p * q))
            launch(*small, (_dev(x), cols, *no_k))
            xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
            win = np.lib.stride_tricks.sliding_window_view(xp, (r, r), axis=(2, 3))[:, :, ::stride, ::stride]
            return backend.asnumpy(cols), win.transpose(1, 4, 5, 0, 2, 3).reshape(c * r * r, nb * p * q)
        if function == "gemm_to_nchw":
            g = ints(k, nb * p * q)
            y = _poison((nb, k, p, q))
            launch(*small, (_dev(g), _dev(b), y, np.int32(nb), np.int32(k), np.int32(p * q)))
            return backend.asnumpy(y), g.reshape(k, nb, p, q).transpose(1, 0, 2, 3) + b[None, :, None, None]
        if function == "nchw_to_gemm":
            out = _poison((k, nb * p * q))
            launch(*small, (_dev(dy), out, np.int32(nb), np.int32(k), np.int32(p * q)))
            return backend.asnumpy(out), dy.transpose(1, 0, 2, 3).reshape(k, nb * p * q).astype(np.float64)
        if function == "col2im":
            # col2im of im2col(x)'s gradient structure: the input gradient of a 1-filter convolution with w = 1
            dcols = ints(c * r * r, nb * p * q)
            dx = _poison((nb, c, h, wd))
            launch(*small, (_dev(dcols), dx, *no_k))
            view = dcols.reshape(c, r, r, nb, p, q).astype(np.float64)
            expected = np.zeros((nb, c, h + 2 * pad, wd + 2 * pad))
            for i in range(r):
                for j in range(r):
                    expected[:, :, i:i + stride * (p - 1) + 1:stride, j:j + stride * (q - 1) + 1:stride] += \
                        view[:, i, j].transpose(1, 0, 2, 3)
            return backend.asnumpy(dx), expected[:, :, pad:pad + h, pad:pad + wd]
        if function == "conv2d_backward_input":
            dx = _poison((nb, c, h, wd))
            launch(*small, (_dev(dy), _dev(w), dx, *sizes))
            return backend.asnumpy(dx), _ref_backward_input(dy, w, x.shape, stride, pad)
        if function in ("conv2d_backward_weight", "conv2d_backward_weight_tiled"):
            xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
            win = np.lib.stride_tricks.sliding_window_view(xp, (r, r), axis=(2, 3))[:, :, ::stride, ::stride]
            expected = np.einsum("ncpqrs,nkpq->kcrs", win, dy.astype(np.float64))
            if function == "conv2d_backward_weight":
                dw = _poison((k, c, r, r))
                launch((5,), (64,), (_dev(x), _dev(dy), dw, *sizes))
            else:
                dw = backend.asarray(np.zeros((k, c, r, r), np.float32))  # the launcher's zeroing
                chunk = 48  # several chunks: several blocks add to each weight
                chunks = (nb * p * q + chunk - 1) // chunk
                launch(((c * r * r + 15) // 16, (k + 63) // 64, chunks), (16, 16),
                       (_dev(x), _dev(dy), dw, *sizes, np.int32(chunk)))
            return backend.asnumpy(dw), expected
        if function == "conv2d_bias_grad":
            # chunks of 4 values (float4 loads where P*Q allows) or 3 (scalar loads), a block each; 64 threads
            chunk = 4 if n % 2 else 3
            splits = (nb * p * q + chunk - 1) // chunk
            partial = _poison((splits, k))
            launch((k, splits), (64,), (_dev(dy), partial, np.int32(nb), np.int32(k), np.int32(p * q),
                                        np.int32(chunk)))
            values = dy.astype(np.float64).transpose(1, 0, 2, 3).reshape(k, nb * p * q)  # channel k's, in order
            expected = np.stack([values[:, z * chunk:(z + 1) * chunk].sum(axis=1) for z in range(splits)])
            return backend.asnumpy(partial), expected
        if function == "conv2d_igemm":
            y = _poison((nb, k, p, q))
            launch(((nb * p * q + 127) // 128, (k + 63) // 64), (256,), (_dev(x), _dev(w), _dev(b), y, *sizes))
            return backend.asnumpy(y), _ref_conv(x, w, stride, pad) + b[None, :, None, None]
        if function == "conv2d_backward_input_tiled":  # stride 1 (a forward of dy); 2 channels of dy a step
            p, q = h + 2 * pad - r + 1, wd + 2 * pad - r + 1
            dy, kgroup, ict = ints(nb, k, p, q), 2, 4  # ICT: conv.cu's input channels a block
            sizes = tuple(np.int32(v) for v in (nb, c, h, wd, k, r, r, 1, pad, p, q))
            dx = _poison((nb, c, h, wd))
            tiles = ((h + 15) // 16) * ((wd + 15) // 16)
            launch((tiles, (c + ict - 1) // ict, nb), (16, 16), (_dev(dy), _dev(w), dx, *sizes, np.int32(kgroup)),
                   shared_mem=4 * kgroup * ((15 + r) * (15 + r) + r * r * ict))
            return backend.asnumpy(dx), _ref_backward_input(dy, w, x.shape, 1, pad)
        if function == "conv2d_backward_input_igemm":
            dx = _poison((nb, c, h, wd))
            launch(((nb * h * wd + 127) // 128, (c + 63) // 64), (256,), (_dev(dy), _dev(w), dx, *sizes))
            return backend.asnumpy(dx), _ref_backward_input(dy, w, x.shape, stride, pad)
        if function == "conv2d_backward_weight_igemm":
            chunk = 16  # several chunks: one partial sum each
            expected = _ref_weight_partials(x, dy, r, stride, pad, chunk)
            partial = _poison(expected.shape)
            launch(((c * r * r + 63) // 64, (k + 63) // 64, len(expected)), (256,),
                   (_dev(x), _dev(dy), partial, *sizes, np.int32(chunk)))
            return backend.asnumpy(partial), expected
        if function == "conv2d_regtile" and n % 2 == 0:  # the forward: 4 positions x 8 channels a thread
            y = _poison((nb, k, p, q))
            launch(((nb * p * q + 511) // 512, (k + 7) // 8), (128,),
                   (_dev(x), _dev(w), _dev(b), y, *sizes, np.int32(0)))
            return backend.asnumpy(y), _ref_conv(x, w, stride, pad) + b[None, :, None, None]
        if function == "conv2d_regtile":  # flip = 1: the input's gradient at stride 1, dy with w rotated
            p, q = h + 2 * pad - r + 1, wd + 2 * pad - r + 1
            dy = ints(nb, k, p, q)
            dx = _poison((nb, c, h, wd))
            flipped = tuple(np.int32(v) for v in (nb, k, p, q, c, r, r, 1, r - 1 - pad, h, wd, 1))
            launch(((nb * h * wd + 511) // 512, (c + 7) // 8), (128,),
                   (_dev(dy), _dev(w), _dev(np.zeros(c, np.float32)), dx, *flipped))
            return backend.asnumpy(dx), _ref_backward_input(dy, w, x.shape, 1, pad)
        if function == "conv2d_backward_weight_regtile":
            chunk = 13  # several chunks, some shorter than the block: one partial sum each
            expected = _ref_weight_partials(x, dy, r, stride, pad, chunk)
            partial = _poison(expected.shape)
            launch(((c * r * r + 7) // 8, (k + 7) // 8, len(expected)), (64,),
                   (_dev(x), _dev(dy), partial, *sizes, np.int32(chunk)))
            return backend.asnumpy(partial), expected
        if function == "splitk_reduce":
            parts = ints(n % 4 + 1, k * c + 5)
            out = _poison(parts.shape[1])
            launch(*small, (_dev(parts), out, np.int32(parts.shape[0]), np.int64(parts.shape[1])))
            return backend.asnumpy(out), parts.astype(np.float64).sum(axis=0)
        raise AssertionError(function)
    return case


CONV_KERNELS = ("conv2d_direct", "im2col", "gemm_to_nchw", "nchw_to_gemm", "col2im", "conv2d_tiled",
                "conv2d_backward_input", "conv2d_backward_weight", "conv2d_backward_weight_tiled", "conv2d_bias_grad",
                "conv2d_igemm", "conv2d_backward_input_igemm", "conv2d_backward_input_tiled",
                "conv2d_backward_weight_igemm", "conv2d_backward_weight_regtile", "conv2d_regtile", "splitk_reduce")

# Winograd F(2x2, 3x3) (conv.cu's rung 5): with small integers every transform is exact (the filter's halves
# and quarters included), and so is the batched GEMM.
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


WINOGRAD4_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                        [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
WINOGRAD4_BT = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                         [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], dtype=np.float64)
WINOGRAD4_AT = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                        dtype=np.float64)


def _winograd(function: str) -> Callable:
    tile = 4 if function.startswith("winograd4") else 2  # rung 6, F(4x4, 3x3), or rung 5, F(2x2, 3x3)
    mat_g, mat_bt, mat_at = ((WINOGRAD4_G, WINOGRAD4_BT, WINOGRAD4_AT) if tile == 4
                             else (WINOGRAD_G, WINOGRAD_BT, WINOGRAD_AT))
    alpha = tile + 2
    e = alpha * alpha

    def case(n: int, rng: np.random.Generator):
        nb, c, h, wd, k = n % 2 + 1, n % 3 + 1, n % 7 + 2, n % 5 + 3, n % 9 + 1
        pad = n % 2
        p, q = h + 2 * pad - 2, wd + 2 * pad - 2
        tp, tq = (p + tile - 1) // tile, (q + tile - 1) // tile
        t = nb * tp * tq
        ints = lambda *shape: rng.integers(-2, 3, shape).astype(np.float32)  # noqa: E731
        launch = kernels.load_kernel("conv.cu", function)
        small = ((3,), (64,))
        i32 = lambda *v: tuple(np.int32(a) for a in v)  # noqa: E731
        if function.endswith("_filter"):  # odd cases: flip = 1, the input gradient's U[e][c][k] of w rotated
            # F(4x4)'s G divides by 4, 6, 12 and 24, twice: multiples of 576 keep every step a whole number
            w, flip = ints(k, c, 3, 3) * (576 if tile == 4 else 1), n % 2
            u = _poison((e, c, k) if flip else (e, k, c))
            launch(*small, (_dev(w), u, *i32(k, c, flip)))
            g = w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3) if flip else w
            exact = mat_g @ g @ mat_g.T  # whole numbers, which float64's 1/6 misses by an ulp: rounded back
            exact = np.rint(exact) if tile == 4 else exact
            return backend.asnumpy(u), exact.reshape(*g.shape[:2], e).transpose(2, 0, 1)
        if function.endswith("_input"):
            x = ints(nb, c, h, wd)
            v = _poison((e, c, t))
            launch(*small, (_dev(x), v, *i32(nb, c, h, wd, pad, tp, tq)))
            xp = np.zeros((nb, c, tile * tp + 2, tile * tq + 2))
            rows, cols = min(h, tile * tp + 2 - pad), min(wd, tile * tq + 2 - pad)
            xp[:, :, pad:pad + rows, pad:pad + cols] = x[:, :, :rows, :cols]
            d = np.lib.stride_tricks.sliding_window_view(xp, (alpha, alpha), axis=(2, 3))[:, :, ::tile, ::tile]
            return backend.asnumpy(v), (mat_bt @ d @ mat_bt.T).transpose(4, 5, 1, 0, 2, 3).reshape(e, c, t)
        if function == "winograd_gemm":
            u, v = ints(16, k, c), ints(16, c, t)
            m = _poison((16, k, t))
            launch(((t + 127) // 128, (k + 63) // 64, 16), (256,), (_dev(u), _dev(v), m, *i32(k, c, t)))
            return backend.asnumpy(m), np.einsum("ekc,ect->ekt", u.astype(np.float64), v.astype(np.float64))
        m, b = ints(e, k, t), ints(k)
        y = _poison((nb, k, p, q))
        launch(*small, (_dev(m), _dev(b), y, *i32(nb, k, p, q, tp, tq)))
        tiles = m.astype(np.float64).reshape(alpha, alpha, k, nb, tp, tq).transpose(3, 2, 4, 5, 0, 1)
        full = (mat_at @ tiles @ mat_at.T).transpose(0, 1, 2, 4, 3, 5).reshape(nb, k, tile * tp, tile * tq)
        return backend.asnumpy(y), full[:, :, :p, :q] + b[None, :, None, None]
    return case


WINOGRAD_KERNELS = ("winograd_filter", "winograd_input", "winograd_gemm", "winograd_output", "winograd4_filter",
                    "winograd4_input", "winograd4_output")


# ---------------------------------------------------------------- maxpool.cu


def _maxpool(function: str) -> Callable:
    def case(n: int, rng: np.random.Generator):
        kernel, stride = [2, 3, 2][n % 3], [2, 2, 1][n % 3]
        pad = n % 2 if kernel == 3 else 0
        nb, c, h, w = n % 2 + 1, n % 3 + 1, n % 7 + kernel, n % 5 + kernel
        p, q = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
        x = rng.integers(-3, 4, (nb, c, h, w)).astype(np.float32)  # ties in most windows
        best = np.full((nb, c, p, q), -np.inf)
        at = np.full((nb, c, p, q), -1, np.int64)
        for r in range(kernel):
            for s in range(kernel):
                for i in range(p):
                    for j in range(q):
                        hh, ww = i * stride - pad + r, j * stride - pad + s
                        if 0 <= hh < h and 0 <= ww < w:
                            v = x[:, :, hh, ww]
                            better = (at[:, :, i, j] < 0) | (v > best[:, :, i, j])
                            best[:, :, i, j] = np.where(better, v, best[:, :, i, j])
                            at[:, :, i, j] = np.where(better, hh * w + ww, at[:, :, i, j])
        sizes = tuple(np.int32(v) for v in (nb, c, h, w, kernel, stride, pad, p, q))
        launch = kernels.load_kernel("maxpool.cu", function)
        if function == "maxpool2d_forward":
            y, idx = _poison((nb, c, p, q)), _poison((nb, c, p, q), np.int32)
            launch((3,), (64,), (_dev(x), y, idx, *sizes))
            return (np.concatenate([backend.asnumpy(y).ravel(), backend.asnumpy(idx).ravel().astype(np.float32)]),
                    np.concatenate([best.ravel(), at.ravel()]))
        dy = rng.integers(-4, 5, (nb, c, p, q)).astype(np.float32)
        dx = _poison(x.shape)
        launch((3,), (64,), (_dev(dy), _dev(at.astype(np.int32)), dx, *sizes))
        expected = np.zeros((nb * c, h * w))
        np.add.at(expected, (np.repeat(np.arange(nb * c), p * q), at.reshape(-1)), dy.astype(np.float64).reshape(-1))
        return backend.asnumpy(dx), expected.reshape(x.shape)
    return case


PHASE6_CASES: dict[tuple[str, str], Callable] = {
    **{("softmax.cu", f): _softmax(f) for f in SOFTMAX_KERNELS},
    **{("conv.cu", f): _conv(f) for f in CONV_KERNELS},
    **{("conv.cu", f): _winograd(f) for f in WINOGRAD_KERNELS},
    **{("maxpool.cu", f): _maxpool(f) for f in ("maxpool2d_forward", "maxpool2d_backward")},
}
NOTEBOOKS = ("phase5_fast.ipynb", "phase6_cnn.ipynb")  # the files these cases launch (gemm.py: none; kept whole)
