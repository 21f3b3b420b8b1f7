"""Every kernel of the course's solutions gives the same results on the emulator and on a GPU.

Each case builds inputs with NumPy, runs one solution kernel, and returns the output. On ``emu`` the
output is compared with a NumPy float64 reference (CI); on a GPU the cuda and emu outputs must agree
bit for bit (``make test-gpu``). A new solution kernel without a case here fails the coverage test.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

from minitorch import backend, kernels
from tests.parity_phase6 import NOTEBOOKS as PHASE6_NOTEBOOKS
from tests.parity_phase6 import PHASE6_CASES
from tests.parity_phase7_layernorm import PHASE7_LAYERNORM_THREAD_CASES
from tests.parity_phase8a import NOTEBOOKS as PHASE8A_NOTEBOOKS
from tests.parity_phase8a import PHASE8A_CASES
from tests.parity_phase8b import NOTEBOOKS as PHASE8B_NOTEBOOKS
from tests.parity_phase8b import PHASE8B_CASES
from tests.solution_files import all_kernel_sources, solution_files

SIZES = [1, 31, 256, 257, 4099, 100_003]


def _fill(n: int, rng: np.random.Generator):
    value = np.float32(rng.standard_normal())
    out = backend.asarray(np.full(n, np.nan, np.float32))
    grid = max(1, min((n + 255) // 256, 8))  # a small grid: the grid-stride loop must cover the rest
    kernels.load_kernel("memory.cu", "fill")((grid,), (256,), (out, value, np.int64(n)))
    return backend.asnumpy(out), np.full(n, value, np.float64)


def _copy(n: int, rng: np.random.Generator):
    src = rng.standard_normal(n).astype(np.float32)
    dst = backend.asarray(np.full(n, np.nan, np.float32))
    kernels.load_kernel("memory.cu", "copy")((3,), (128,), (backend.asarray(src), dst, np.int64(n)))
    return backend.asnumpy(dst), src.astype(np.float64)


def _elementwise(function: str):
    """A Phase 2 elementwise kernel on a small grid; the float32 NumPy result is exact (one rounding)."""
    def case(n: int, rng: np.random.Generator):
        a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        s = np.float32(rng.standard_normal())
        out = backend.asarray(np.full(n, np.nan, np.float32))
        args = {"add": (a, b), "mul": (a, b), "scalar_mul": (a, s), "relu": (a,)}[function]
        args = tuple(backend.asarray(x) if isinstance(x, np.ndarray) else x for x in args)
        kernels.load_kernel("elementwise.cu", function)((7,), (128,), (*args, out, np.int64(n)))
        expected = {"add": a + b, "mul": a * b, "scalar_mul": s * a, "relu": np.where(a > 0, a, np.float32(0))}[function]
        return backend.asnumpy(out), expected.astype(np.float64)
    return case


def _transpose(function: str):
    def case(n: int, rng: np.random.Generator):
        rows = max(1, int(n ** 0.5) - 3)
        cols = n // rows  # ragged on both sides for most n
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        out = backend.asarray(np.full((cols, rows), np.nan, np.float32))
        grid = ((cols + 31) // 32, (rows + 31) // 32)
        kernels.load_kernel("transpose.cu", function)(grid, (32, 8), (backend.asarray(a), out, np.int32(rows),
                                                                        np.int32(cols)))
        return backend.asnumpy(out), a.T.astype(np.float64)
    return case


def _matmul_naive(n: int, rng: np.random.Generator):
    # small integers: every product and partial sum is exact in float32, so a GPU's fused multiply-adds and the
    # emulator's separate multiply and add give the same bits
    m, k, cols = max(1, n % 61), n % 97 + 1, max(1, n % 45)
    a = rng.integers(-8, 9, (m, k)).astype(np.float32)
    b = rng.integers(-8, 9, (k, cols)).astype(np.float32)
    out = backend.asarray(np.full((m, cols), np.nan, np.float32))
    grid = ((cols + 15) // 16, (m + 15) // 16)
    kernels.load_kernel("matmul.cu", "matmul_naive")(grid, (16, 16), (backend.asarray(a), backend.asarray(b), out,
                                                                      np.int32(m), np.int32(cols), np.int32(k)))
    return backend.asnumpy(out), a.astype(np.float64) @ b.astype(np.float64)



def _reduce_partials(function: str):
    """One pass of a Phase 4 reduction on 7 blocks of 128 threads: block b's partial is the sum (max) of its
    grid-stride share, the elements i with (i // 128) % 7 == b."""
    grid, threads = 7, 128

    def case(n: int, rng: np.random.Generator):
        if function == "max_warp":
            x = rng.standard_normal(n).astype(np.float32)
        else:  # small integers: every partial sum is exact whatever the order of the additions (atomics)
            x = rng.integers(-8, 9, n).astype(np.float32)
        start = np.zeros(grid, np.float32) if function == "sum_atomic" else np.full(grid, np.nan, np.float32)
        partial = backend.asarray(start)
        kernels.load_kernel("reduce.cu", function)((grid,), (threads,), (backend.asarray(x), partial, np.int64(n)))
        block = (np.arange(n) // threads) % grid
        identity = -np.inf if function == "max_warp" else 0.0
        combine = np.max if function == "max_warp" else np.sum
        expected = np.array([combine(x[block == b].astype(np.float64)) if np.any(block == b) else identity
                             for b in range(grid)])
        return backend.asnumpy(partial), expected
    return case


def _chunk_statistics(x: np.ndarray, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 (n_chunks, cols) means and sums of squared deviations of consecutive chunks of rows."""
    chunks = [x[k:k + chunk_rows].astype(np.float64) for k in range(0, len(x), chunk_rows)]
    means = np.array([c.mean(axis=0) for c in chunks])
    return means, np.array([((c - m) ** 2).sum(axis=0) for c, m in zip(chunks, means, strict=True)])


def _column_partials(n: int, rng: np.random.Generator):
    # Small integers in chunks of 64 rows and a last chunk of 32: every count is a power of two, so each chunk's
    # mean is exact, and so is every later step in float32: a GPU's fused multiply-adds and the emulator's separate
    # ones give the same bits
    chunk_rows, cols = 64, n % 37 + 1
    rows = chunk_rows * (n % 5 + 1) + 32
    n_chunks = (rows + chunk_rows - 1) // chunk_rows
    x = rng.integers(-2, 3, (rows, cols)).astype(np.float32)
    chunk_mean = backend.asarray(np.full((n_chunks, cols), np.nan, np.float32))
    chunk_m2 = backend.asarray(np.full((n_chunks, cols), np.nan, np.float32))
    kernels.load_kernel("reduce.cu", "column_partials")(
        ((cols + 31) // 32, n_chunks), (32, 8),
        (backend.asarray(x), chunk_mean, chunk_m2, np.int32(rows), np.int32(cols), np.int32(chunk_rows)))
    return (np.concatenate([backend.asnumpy(chunk_mean).ravel(), backend.asnumpy(chunk_m2).ravel()]),
            np.concatenate([a.ravel() for a in _chunk_statistics(x, chunk_rows)]))


def _column_mean_var(n: int, rng: np.random.Generator):
    # The merge alone, of chunk statistics computed by NumPy: 1 to 8 chunks of 64 rows of small integers, blocks of
    # (32, 4), so a thread merges at most two chunks and the tree merges equal counts: every weight n_b / n is 1/2,
    # and every step is exact in float32 (fused multiply-adds or not)
    chunk_rows, cols = 64, n % 37 + 1
    n_chunks = 1 << (n % 4)
    rows = chunk_rows * n_chunks
    x = rng.integers(-2, 3, (rows, cols)).astype(np.float32)
    chunk_mean, chunk_m2 = (backend.asarray(a.astype(np.float32)) for a in _chunk_statistics(x, chunk_rows))
    mean = backend.asarray(np.full(cols, np.nan, np.float32))
    var = backend.asarray(np.full(cols, np.nan, np.float32))
    kernels.load_kernel("reduce.cu", "column_mean_var")(
        ((cols + 31) // 32,), (32, 4),
        (chunk_mean, chunk_m2, mean, var, np.int32(rows), np.int32(cols), np.int32(chunk_rows), np.int32(n_chunks)))
    x64 = x.astype(np.float64)
    return (np.concatenate([backend.asnumpy(mean), backend.asnumpy(var)]),
            np.concatenate([x64.mean(axis=0), x64.var(axis=0)]))


def _phase3(function: str):
    """A Phase 3 kernel on a small grid. Inputs are chosen so that every result is exact in float32 (small
    integers, dyadic rates, the saturated and central values of the sigmoid): a GPU's fused multiply-adds, its
    expf and the order of its atomics then give the emulator's bits."""
    grid, threads = 3, 128

    def dev(x: np.ndarray):
        return backend.asarray(np.ascontiguousarray(x, dtype=np.float32))

    def poisoned(shape):
        return backend.asarray(np.full(shape, np.nan, np.float32))

    def launch(*args) -> None:
        kernels.load_kernel(*file_of[function])((grid,), (threads,), args)

    def case(n: int, rng: np.random.Generator):
        ints = lambda shape: rng.integers(-8, 9, shape).astype(np.float32)  # noqa: E731
        if function == "add_bias":
            rows, cols = max(1, n // 37), min(n, 37)
            x, bias, out = rng.standard_normal((rows, cols)).astype(np.float32), ints(cols), poisoned((rows, cols))
            launch(dev(x), dev(bias), out, np.int32(rows), np.int32(cols))
            return backend.asnumpy(out), (x + bias).astype(np.float64)
        if function == "sigmoid":
            x = rng.choice(np.array([0.0, -0.0, 200.0, -200.0, np.inf, -np.inf], np.float32), n)
            out = poisoned(n)
            launch(dev(x), out, np.int64(n))
            return backend.asnumpy(out), np.where(x > 0, 1.0, np.where(x < 0, 0.0, 0.5))
        if function in ("sigmoid_backward", "relu_backward"):
            first = rng.integers(-4, 5, n).astype(np.float32) / 4  # y in multiples of 1/4: y (1 - y) is exact
            g, out = ints(n), poisoned(n)
            launch(dev(first), dev(g), out, np.int64(n))
            expected = g * first * (1 - first) if function == "sigmoid_backward" else np.where(first > 0, g, 0)
            return backend.asnumpy(out), expected.astype(np.float64)
        if function == "bias_grad":
            rows, cols = max(1, n // 37), min(n, 37)
            g, out = ints((rows, cols)), poisoned(cols)
            launch(dev(g), out, np.int32(rows), np.int32(cols))
            return backend.asnumpy(out), g.astype(np.float64).sum(axis=0)
        if function == "mse_loss":
            m = 1 << (n.bit_length() - 1)  # a power of two: each thread's sum / m is exact
            p, t, loss = ints(m), ints(m), backend.asarray(np.zeros(1, np.float32))
            launch(dev(p), dev(t), loss, np.int64(m))
            return backend.asnumpy(loss), np.array([np.mean((p.astype(np.float64) - t) ** 2)])
        if function == "mse_backward":
            p, t, out = ints(n), ints(n), poisoned(n)
            scale = np.float32(0.75)
            launch(dev(p), dev(t), out, scale, np.int64(n))
            factor = np.float32(2.0) * scale / np.float32(n)  # the kernel's own float32 steps
            return backend.asnumpy(out), (factor * (p - t)).astype(np.float64)
        if function == "sgd_momentum":
            param, grad, velocity = ints(n), ints(n), ints(n)
            p_dev, v_dev = dev(param), dev(velocity)
            launch(p_dev, dev(grad), v_dev, np.float32(0.25), np.float32(0.5), np.int64(n))
            v = 0.5 * velocity.astype(np.float64) + grad
            return (np.concatenate([backend.asnumpy(p_dev), backend.asnumpy(v_dev)]),
                    np.concatenate([param - 0.25 * v, v]))
        raise AssertionError(function)

    file_of = {**{k: ("forward.cu", k) for k in ("add_bias", "sigmoid")},
               **{k: ("backward.cu", k) for k in ("sigmoid_backward", "relu_backward", "bias_grad", "mse_loss",
                                                  "mse_backward")},
               "sgd_momentum": ("sgd.cu", "sgd_momentum")}
    return case


def _gemm(variant: str):
    """A rung of Phase 5's GEMM ladder through gemm.py (which sizes the grid), every transposed mode
    the rung reads. Small integers and K < 100: every product and partial sum is an integer below
    2^24, exact in float32 in any order, with or without fused multiply-adds."""
    def case(n: int, rng: np.random.Generator):
        gm = kernels.load_module("gemm.py")
        m, k, cols = (n * 7) % 263 + 1, n % 97 + 1, (n * 13) % 271 + 1  # 1 to 3 tiles, ragged
        got, expected = [], []
        modes = [(False, False)] + ([(True, False), (False, True), (True, True)]
                                    if variant in gm.TRANSPOSING else [])
        for ta, tb in modes:
            a = rng.integers(-8, 9, (k, m) if ta else (m, k)).astype(np.float32)
            b = rng.integers(-8, 9, (cols, k) if tb else (k, cols)).astype(np.float32)
            out = backend.asarray(np.full((m, cols), np.nan, np.float32))
            gm.gemm(backend.asarray(a), backend.asarray(b), out, variant, transpose_a=ta, transpose_b=tb)
            got.append(backend.asnumpy(out).ravel())
            expected.append(((a.T if ta else a).astype(np.float64) @ (b.T if tb else b)).ravel())
        return np.concatenate(got), np.concatenate(expected)
    return case


def _gemm_split_k(n: int, rng: np.random.Generator):
    """Rung 9's split-K (A stored K x M, B K x N) and the sum of its partial products: small integers, so
    every partial product and their sum are exact in float32."""
    gm = kernels.load_module("gemm.py")
    m, k, cols = (n * 7) % 131 + 1, n % 300 + 130, (n * 13) % 133 + 1
    a = rng.integers(-8, 9, (k, m)).astype(np.float32)
    b = rng.integers(-8, 9, (k, cols)).astype(np.float32)
    out = backend.asarray(np.full((m, cols), np.nan, np.float32))
    gm.gemm(backend.asarray(a), backend.asarray(b), out, "double_buffered", transpose_a=True,
            splits=2 + n % 5)
    return backend.asnumpy(out).ravel(), (a.T.astype(np.float64) @ b).ravel()


GEMM_RUNGS = {"sgemm_1_naive": "naive", "sgemm_2_coalesced": "coalesced", "sgemm_3_shared": "shared",
              "sgemm_4_blocktile_1d": "blocktile_1d", "sgemm_5_blocktile_2d": "blocktile_2d",
              "sgemm_6_vectorized": "vectorized", "sgemm_7_autotuned": "autotuned",
              "sgemm_8_warptiling": "warptiling", "sgemm_9_double_buffered": "double_buffered",
              "sgemm_10_regtile": "regtile"}

PHASE3_KERNELS = {("forward.cu", k) for k in ("add_bias", "sigmoid")} | {
    ("backward.cu", k) for k in ("sigmoid_backward", "relu_backward", "bias_grad", "mse_loss", "mse_backward")} | {
    ("sgd.cu", "sgd_momentum")}

def _phase7(function: str):
    """A Phase 7 kernel on a small grid, on inputs whose every result is exact in float32 whatever the order of
    the additions or atomics and whether multiply-adds are fused: small integers and dyadic fractions, GELU at 0
    and where tanhf saturates, rows whose variance plus eps is 4, softmax rows of equal visible scores (the
    others -1e4: expf gives exactly 0), a clip total that is a perfect square (sqrtf and / are correctly rounded
    on both devices)."""
    def dev(x: np.ndarray, dtype=np.float32):
        return backend.asarray(np.ascontiguousarray(x, dtype=dtype))

    def poisoned(shape):
        return backend.asarray(np.full(shape, np.nan, np.float32))

    def launch(file: str, grid, block, *args, shared_mem: int = 0) -> None:
        kernels.load_kernel(file, function)(grid, block, args, shared_mem=shared_mem)

    def ln_rows(n: int, rng: np.random.Generator):
        """Rows of 2 to 16 columns: an integer mean plus or minus 1 (variance 1), eps 3: rstd is 1/2."""
        cols, rows = 2 << (n % 4), max(1, n % 45)
        signs = np.where(rng.integers(0, 2, (rows, cols // 2)) > 0, 1.0, -1.0)
        dev_ = np.concatenate([signs, -signs], axis=1)  # every row sums its deviations to 0
        x = (rng.integers(-8, 9, (rows, 1)) + dev_).astype(np.float32)
        return x, rows, cols

    def case(n: int, rng: np.random.Generator):
        ints = lambda shape: rng.integers(-8, 9, shape).astype(np.float32)  # noqa: E731
        if function in ("gelu_forward", "gelu_backward"):
            x = rng.choice(np.array([0.0, 20.0, -20.0, 100.0, -100.0], np.float32), n)
            out = poisoned(n)
            if function == "gelu_forward":
                launch("gelu.cu", (3,), (128,), dev(x), out, np.int64(n))
                return backend.asnumpy(out), np.where(x > 0, x, 0.0)
            g = ints(n)
            launch("gelu.cu", (3,), (128,), dev(x), dev(g), out, np.int64(n))
            return backend.asnumpy(out), np.where(x > 0, g, np.where(x < 0, 0.0, 0.5 * g))
        if function == "layernorm_forward":
            x, rows, cols = ln_rows(n, rng)
            w, b = ints(cols), ints(cols)
            out, mean, rstd = poisoned((rows, cols)), poisoned(rows), poisoned(rows)
            launch("layernorm.cu", (2,), (64,), dev(x), dev(w), dev(b), out, mean, rstd, np.int32(rows),
                   np.int32(cols), np.float32(3.0))
            m = x.astype(np.float64).mean(axis=1)
            expected = (x - m[:, None]) * 0.5 * w + b
            return (np.concatenate([backend.asnumpy(out).ravel(), backend.asnumpy(mean), backend.asnumpy(rstd)]),
                    np.concatenate([expected.ravel(), m, np.full(rows, 0.5)]))
        if function == "layernorm_backward":
            x, rows, cols = ln_rows(n, rng)
            w, g = ints(cols), ints((rows, cols))
            m = x.astype(np.float64).mean(axis=1)
            grid, threads = 2, 64
            dx, wp, bp = poisoned((rows, cols)), poisoned((grid, cols)), poisoned((grid, cols))
            launch("layernorm.cu", (grid,), (threads,), dev(g), dev(x), dev(w), dev(m), dev(np.full(rows, 0.5)), dx,
                   wp, bp, np.int32(rows), np.int32(cols), shared_mem=threads // 32 * 2 * cols * 4)  # a warp's sums
            xhat = (x - m[:, None]) * 0.5
            gw = g.astype(np.float64) * w
            expected_dx = 0.5 * (gw - gw.mean(axis=1, keepdims=True)
                                 - xhat * (gw * xhat).mean(axis=1, keepdims=True))
            block = (np.arange(rows) % (grid * threads // 32)) // (threads // 32)  # the block whose warp has row r
            exp_wp = np.array([(g * xhat)[block == k].sum(axis=0) for k in range(grid)])
            exp_bp = np.array([g[block == k].astype(np.float64).sum(axis=0) for k in range(grid)])
            return (np.concatenate([backend.asnumpy(a).ravel() for a in (dx, wp, bp)]),
                    np.concatenate([a.ravel() for a in (expected_dx, exp_wp, exp_bp)]))
        if function == "layernorm_param_grads":
            parts, cols = n % 9 + 1, n % 70 + 1
            wp, bp = ints((parts, cols)), ints((parts, cols))
            gw, gb = poisoned(cols), poisoned(cols)
            launch("layernorm.cu", (1,), (32, 4), dev(wp), dev(bp), gw, gb, np.int32(parts), np.int32(cols))
            return (np.concatenate([backend.asnumpy(gw), backend.asnumpy(gb)]),
                    np.concatenate([wp.astype(np.float64).sum(axis=0), bp.astype(np.float64).sum(axis=0)]))
        if function in ("embedding_forward", "embedding_backward"):
            vocab, dim, count = n % 13 + 1, n % 7 + 1, max(1, n // 10)
            ids = rng.integers(0, vocab, count)
            if function == "embedding_forward":
                table, out = rng.standard_normal((vocab, dim)).astype(np.float32), poisoned((count, dim))
                launch("embedding.cu", (3,), (128,), dev(ids, np.int32), dev(table), out, np.int64(count),
                       np.int32(dim), np.int32(vocab))
                return backend.asnumpy(out), table[ids].astype(np.float64)
            g, grad = ints((count, dim)), backend.zeros((vocab, dim))
            launch("embedding.cu", (3,), (128,), dev(ids, np.int32), dev(g), grad, np.int64(count), np.int32(dim),
                   np.int32(vocab))
            expected = np.zeros((vocab, dim))
            np.add.at(expected, ids, g)
            return backend.asnumpy(grad), expected
        if function in ("bmm", "bmm_regtile"):  # the same contract: grid, blocks, arguments
            batch, m, k, cols = n % 3 + 1, max(1, n % 61), n % 97 + 1, max(1, n % 45)
            ta, tb = bool(n % 2), bool(n % 3 == 0)
            a, b = ints((batch, k, m) if ta else (batch, m, k)), ints((batch, cols, k) if tb else (batch, k, cols))
            out = poisoned((batch, m, cols))
            launch("attention.cu", ((cols + 63) // 64, (m + 63) // 64, batch), (16, 16), dev(a), dev(b), out,
                   np.int32(m), np.int32(cols), np.int32(k), np.int64(m * k), np.int64(k * cols),
                   np.int64(m * cols), np.int32(ta), np.int32(tb))
            a64 = np.swapaxes(a, 1, 2).astype(np.float64) if ta else a.astype(np.float64)
            b64 = np.swapaxes(b, 1, 2).astype(np.float64) if tb else b.astype(np.float64)
            return backend.asnumpy(out), a64 @ b64
        if function in ("softmax_forward", "softmax_forward_rows"):  # a warp a row, a thread a row
            t, heads = n % 33 + 1, n % 3 + 1
            s = np.where(rng.integers(0, 2, (heads, t, t)) > 0, 0.0, -1e4).astype(np.float32)
            s[:, np.arange(t), np.arange(t)] = 0.0  # every query sees itself at the maximum
            p = poisoned((heads, t, t))
            launch("attention.cu", (2,), (64,), dev(s), p, np.int64(heads * t), np.int32(t), np.float32(0.25),
                   np.int32(1))
            visible = np.tril(np.ones((t, t), bool)) & (s == 0)
            count = visible.sum(axis=-1, keepdims=True).astype(np.float32)
            return backend.asnumpy(p), np.where(visible, np.float32(1) / count, 0).astype(np.float64)
        if function in ("softmax_backward", "softmax_backward_rows"):
            t, heads = n % 33 + 1, n % 3 + 1
            p = np.tril(rng.choice(np.array([0.0, 0.25, 0.5], np.float32), (heads, t, t)))
            dp, ds = ints((heads, t, t)), poisoned((heads, t, t))
            launch("attention.cu", (2,), (64,), dev(p), dev(dp), ds, np.int64(heads * t), np.int32(t),
                   np.float32(0.5), np.int32(1))
            dot = (p.astype(np.float64) * dp).sum(axis=-1, keepdims=True)
            return backend.asnumpy(ds), np.tril(0.5 * p * (dp - dot))
        if function in ("split_heads", "merge_heads", "split_heads_x4", "merge_heads_x4"):
            quads = function.endswith("_x4")  # D a multiple of 4, sizes passed in quads of 4 floats
            b, t, h, d = n % 3 + 1, n % 11 + 1, n % 4 + 1, 4 * (n % 5 + 1) if quads else n % 5 + 1
            c, part = h * d, n % 3
            x = rng.standard_normal((b, t, 3 * c)).astype(np.float32)
            heads = np.ascontiguousarray(x[:, :, part * c:(part + 1) * c].reshape(b, t, h, d).transpose(0, 2, 1, 3))
            q = 4 if quads else 1
            args = (np.int32(b), np.int32(t), np.int32(h), np.int32(d // q), np.int32(3 * c // q),
                    np.int32(part * c // q))
            if function.startswith("split_heads"):
                out = poisoned((b, h, t, d))
                launch("attention.cu", (3,), (64,), dev(x), out, *args)
                return backend.asnumpy(out), heads.astype(np.float64)
            out = dev(np.zeros_like(x))
            launch("attention.cu", (3,), (64,), dev(heads), out, *args)
            expected = np.zeros_like(x, dtype=np.float64)
            expected[:, :, part * c:(part + 1) * c] = x[:, :, part * c:(part + 1) * c]
            return backend.asnumpy(out), expected
        if function == "sum_squares":
            x, total = ints(n), backend.zeros(1)
            launch("clip.cu", (3,), (128,), dev(x), total, np.int64(n))
            return backend.asnumpy(total), np.array([(x.astype(np.float64) ** 2).sum()])
        if function == "clip_coefficient":
            k = np.float32(n % 1000 + 16)
            norm, coef = poisoned(1), poisoned(1)
            launch("clip.cu", (1,), (1,), dev(np.array([k * k])), norm, coef, np.float32(100.0))
            expected = min(np.float32(1), np.float32(100.0) / (k + np.float32(1e-6)))
            return np.concatenate([backend.asnumpy(norm), backend.asnumpy(coef)]), np.array([k, expected], np.float64)
        if function == "scale_by":
            x = ints(n)
            xd = dev(x)
            launch("clip.cu", (3,), (128,), xd, dev(np.array([0.25])), np.int64(n))
            return backend.asnumpy(xd), x * 0.25
        raise AssertionError(function)
    return case


PHASE7_KERNELS = {("gelu.cu", k) for k in ("gelu_forward", "gelu_backward")} | {
    ("layernorm.cu", k) for k in ("layernorm_forward", "layernorm_backward", "layernorm_param_grads")} | {
    ("embedding.cu", k) for k in ("embedding_forward", "embedding_backward")} | {
    ("attention.cu", k) for k in ("bmm", "softmax_forward", "softmax_backward", "split_heads", "merge_heads",
                                  "split_heads_x4", "merge_heads_x4", "bmm_regtile", "softmax_forward_rows",
                                  "softmax_backward_rows")} | {
    ("clip.cu", k) for k in ("sum_squares", "clip_coefficient", "scale_by")}

CASES: dict[tuple[str, str], Callable] = {
    ("memory.cu", "fill"): _fill,
    ("memory.cu", "copy"): _copy,
    **{("elementwise.cu", f): _elementwise(f) for f in ("add", "mul", "scalar_mul", "relu")},
    **{("transpose.cu", f): _transpose(f) for f in ("transpose_naive", "transpose_tiled")},
    ("matmul.cu", "matmul_naive"): _matmul_naive,
    **{("reduce.cu", f): _reduce_partials(f) for f in ("sum_atomic", "sum_shared", "sum_warp", "max_warp")},
    ("reduce.cu", "column_partials"): _column_partials,
    ("reduce.cu", "column_mean_var"): _column_mean_var,
    **{key: _phase3(key[1]) for key in PHASE3_KERNELS},
    **{("gemm.cu", kernel): _gemm(variant) for kernel, variant in GEMM_RUNGS.items()},
    ("gemm.cu", "sgemm_sum_splits"): _gemm_split_k,
    **{key: _phase7(key[1]) for key in PHASE7_KERNELS},
}
CASES.update(PHASE6_CASES)  # tests/parity_phase6.py
CASES.update(PHASE7_LAYERNORM_THREAD_CASES)  # tests/parity_phase7_layernorm.py
CASES.update(PHASE8A_CASES)  # tests/parity_phase8a.py
CASES.update(PHASE8B_CASES)  # tests/parity_phase8b.py



def _adam(function: str):
    """Phase 5's Adam kernels on values where every operation is exact (powers of two, small integers,
    eps = 0, a first step from m = v = 0): a GPU's fused multiply-adds change nothing, so cuda, emu and
    NumPy agree bit for bit."""
    def case(n: int, rng: np.random.Generator):
        if function == "adam_step":
            step, bias = backend.asarray(np.array([n], np.int64)), backend.asarray(np.full(2, np.nan, np.float32))
            kernels.load_kernel("adam.cu", "adam_step")((1,), (1,), (step, bias, np.float32(0.5), np.float32(0.25)))
            t = n + 1
            return (np.concatenate([backend.asnumpy(step).astype(np.float64), backend.asnumpy(bias)]),
                    np.array([t, np.float32(1 - 0.5**t), np.float32(1 - 0.25**t)], np.float64))
        p = 8.0 * rng.integers(-8, 9, n)
        g = 2.0 * rng.integers(-8, 8, n) + 1  # odd: never 0, nor g + p / 2
        outs, expected = [], []
        for decoupled in (0, 1):
            arrays = [backend.asarray(a.astype(np.float32)) for a in (p, g, np.zeros(n), np.zeros(n))]
            bias = backend.asarray(np.array([0.5, 0.25], np.float32))  # t = 1 with betas 0.5, 0.75
            kernels.load_kernel("adam.cu", "adam_update")((3,), (64,), (
                *arrays, bias, np.float32(0.25), np.float32(0.5), np.float32(0.75), np.float32(0.0),
                np.float32(0.5), np.int32(decoupled), np.int64(n)))
            outs += [backend.asnumpy(arrays[i]) for i in (0, 2, 3)]
            q, grad = (p - 0.125 * p, g) if decoupled else (p, g + 0.5 * p)
            m, v = 0.5 * grad, 0.25 * grad**2
            expected += [q - 0.25 * (m / 0.5) / np.sqrt(v / 0.25), m, v]
        return np.concatenate(outs), np.concatenate(expected)
    return case


def _philox(function: str):
    """init.cu's draws against minitorch.philox: the uniforms are exact; the normals are the host's
    double-precision Box-Muller rounded to float32 (equal unless a last-bit difference of the device's
    log, sin or cos meets a rounding boundary)."""
    def case(n: int, rng: np.random.Generator):
        from minitorch import philox

        seed, offset = int(rng.integers(2**63)) * 2 + 1, int(rng.integers(2**40))
        out = backend.asarray(np.full(n, np.nan, np.float32))
        kernels.load_kernel("init.cu", function)((5,), (64,), (out, np.uint64(seed), np.uint64(offset),
                                                               np.float32(1.0), np.int64(n)))
        unit = (2 * philox.uniform(n, seed, offset) - 1 if function == "philox_uniform"
                else philox.normal(n, seed, offset))
        return backend.asnumpy(out), unit.astype(np.float64)
    return case


def _recipe(function: str):
    """Phase 7's online softmax and recipe.cu on inputs whose results are exact on both devices: softmax rows of 0
    and -inf (probabilities 1/count, sums count, maxima 0 or -inf), dropout with p = 1/2 (scale 2) against
    minitorch.philox, and the schedule's warmup (divisions only, correctly rounded; a weight decay of 1/2)."""
    def case(n: int, rng: np.random.Generator):
        from minitorch import philox

        if function == "online_softmax":
            rows, cols = n % 37 + 1, n % 45 + 1
            x = np.where(rng.integers(0, 3, (rows, cols)) > 0, 0.0, -np.inf).astype(np.float32)
            x[rows // 2] = -np.inf  # nothing visible: zeros, max -inf, sum 0
            out = backend.asarray(np.full((rows, cols), np.nan, np.float32))
            m, total = backend.asarray(np.full(rows, np.nan, np.float32)), backend.asarray(np.full(rows, np.nan,
                                                                                                   np.float32))
            kernels.load_kernel("online_softmax.cu", function)(((rows + 3) // 4,), (128,), (
                backend.asarray(x), out, m, total, np.int32(rows), np.int32(cols)))
            count = (x == 0).sum(axis=1, keepdims=True).astype(np.float32)
            probs = np.where(x == 0, np.float32(1) / np.maximum(count, 1), np.float32(0))
            want_m = np.where(count[:, 0] > 0, 0.0, -np.inf)
            got = np.concatenate([backend.asnumpy(out).ravel(), backend.asnumpy(m), backend.asnumpy(total)])
            return got, np.concatenate([probs.ravel(), want_m, count[:, 0]]).astype(np.float64)
        if function == "dropout_apply":
            seed, step, site = int(rng.integers(2**63)), int(rng.integers(2**40)), int(rng.integers(2**16))
            x = rng.integers(-64, 65, n).astype(np.float32)
            out, used = backend.asarray(np.full(n, np.nan, np.float32)), backend.asarray(np.zeros(1, np.int64))
            kernels.load_kernel("recipe.cu", function)((5,), (64,), (
                backend.asarray(x), out, backend.asarray(np.array([step], np.int64)), used, np.uint64(seed),
                np.int64(site), np.float32(0.5), np.float32(2.0), np.int64(n)))
            keep = philox.uniform(n, seed, (step << 16) + site) >= np.float32(0.5)
            got = np.concatenate([backend.asnumpy(out).astype(np.float64), backend.asnumpy(used).astype(np.float64)])
            return got, np.concatenate([np.where(keep, 2.0 * x, 0.0), [float(step)]])
        if function == "dropout_apply_x4":  # four elements a thread: n rounded up to a multiple of 4
            n4 = -(-n // 4) * 4
            seed, step, site = int(rng.integers(2**63)), int(rng.integers(2**40)), int(rng.integers(2**16))
            x = rng.integers(-64, 65, n4).astype(np.float32)
            out, used = backend.asarray(np.full(n4, np.nan, np.float32)), backend.asarray(np.zeros(1, np.int64))
            kernels.load_kernel("recipe.cu", function)((5,), (64,), (
                backend.asarray(x), out, backend.asarray(np.array([step], np.int64)), used, np.uint64(seed),
                np.int64(site), np.float32(0.5), np.float32(2.0), np.int64(n4 // 4)))
            keep = philox.uniform(n4, seed, (step << 16) + site) >= np.float32(0.5)
            got = np.concatenate([backend.asnumpy(out).astype(np.float64), backend.asnumpy(used).astype(np.float64)])
            return got, np.concatenate([np.where(keep, 2.0 * x, 0.0), [float(step)]])
        if function in ("dropout_add", "dropout_add_x4"):  # x + dropout(h); x4: n rounded up to a multiple of 4
            n = -(-n // 4) * 4 if function.endswith("x4") else n
            seed, step, site = int(rng.integers(2**63)), int(rng.integers(2**40)), int(rng.integers(2**16))
            x, h = rng.integers(-64, 65, n).astype(np.float32), rng.integers(-64, 65, n).astype(np.float32)
            out, used = backend.asarray(np.full(n, np.nan, np.float32)), backend.asarray(np.zeros(1, np.int64))
            kernels.load_kernel("recipe.cu", function)((5,), (64,), (
                backend.asarray(x), backend.asarray(h), out, backend.asarray(np.array([step], np.int64)), used,
                np.uint64(seed), np.int64(site), np.float32(0.5), np.float32(2.0),
                np.int64(n // 4 if function.endswith("x4") else n)))
            keep = philox.uniform(n, seed, (step << 16) + site) >= np.float32(0.5)
            got = np.concatenate([backend.asnumpy(out).astype(np.float64), backend.asnumpy(used).astype(np.float64)])
            return got, np.concatenate([x + np.where(keep, 2.0 * h, 0.0), [float(step)]])
        if function == "dropout_advance":
            step = backend.asarray(np.array([n], np.int64))
            kernels.load_kernel("recipe.cu", function)((1,), (1,), (step,))
            return backend.asnumpy(step), np.array([n + 1], np.float64)
        if function == "lr_schedule":
            warmup, t = n % 97 + 1, n % 97 + 1  # it = t - 1 < warmup: the linear warmup
            max_lr, bias0 = np.float32(3e-3), np.float32(0.1875)
            bias, rate, decay = (backend.asarray(np.array(v, np.float32)) for v in ([bias0, 0.5], [np.nan], [np.nan]))
            kernels.load_kernel("recipe.cu", function)((1,), (1,), (
                backend.asarray(np.array([t], np.int64)), bias, rate, decay, np.float32(0.5), max_lr,
                np.float32(3e-4), np.int64(warmup), np.int64(warmup + 100)))
            r = float(max_lr) * t / (warmup + 1)
            want = [np.float32(float(bias0) / r), 0.5, np.float32(r), np.float32(1.0 - r * 0.5)]
            got = np.concatenate([backend.asnumpy(bias), backend.asnumpy(rate), backend.asnumpy(decay)])
            return got, np.array(want, np.float64)
        raise AssertionError(function)
    return case


CASES.update({("adam.cu", f): _adam(f) for f in ("adam_step", "adam_update")})
CASES.update({("init.cu", f): _philox(f) for f in ("philox_uniform", "philox_normal")})
CASES.update({("online_softmax.cu", "online_softmax"): _recipe("online_softmax")})
CASES.update({("recipe.cu", f): _recipe(f) for f in ("dropout_apply", "dropout_apply_x4", "dropout_add",
                                                     "dropout_add_x4", "dropout_advance", "lr_schedule")})

@pytest.fixture
def solution_workspace(workspace):
    for notebook in ("phase1_memory.ipynb", "phase2_kernels.ipynb", "phase3a_forward.ipynb",
                     "phase3b_backward.ipynb", "phase4_reductions.ipynb", *PHASE6_NOTEBOOKS,
                     "phase7_gpt.ipynb", *PHASE8A_NOTEBOOKS, *PHASE8B_NOTEBOOKS):
        for name, text in solution_files(notebook).items():
            kernels.write_source(name, text)
    return workspace


# A templated kernel (template <...> __global__ void [__launch_bounds__(...)] name(...)): launched by
# its instantiations, e.g. sgemm_9_double_buffered<128, 128, 8, 32, 64, 0, 0>.
_TEMPLATED = re.compile(r"template\s*<[^>]*>\s*__global__\s+void\s+"
                        r"(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(")


# Files built for one GPU architecture only (their cell says ``%%kernel <file> --arch=sm_90a``): the emulator
# cannot run them, so they have no parity case; Phase 8a's rung 6 is checked on an H100 by
# grader/tests/test_phase8a_wgmma.py and tests/grader/test_grader_fixtures_phase8a_wgmma.py (gpu), Phase 8b's
# rung 8 by grader/tests/test_phase8b.py (its wgmma cases) and tests/grader/test_grader_fixtures_phase8b_wgmma.py.
GPU_ARCH_ONLY = {"hgemm_wgmma.cu", "flash_wgmma.cu"}


def test_every_solution_kernel_has_a_parity_case():
    defined = {(f, k) for f, src in all_kernel_sources().items() if f not in GPU_ARCH_ONLY
               for k in [*kernels.kernel_signatures(src), *_TEMPLATED.findall(src)]}
    assert defined == set(CASES), f"kernels without a case: {defined - set(CASES)}"


def _run(device: str, case, n: int, seed: int):
    previous = backend.get_device()
    backend.set_device(device)
    try:
        return case(n, np.random.default_rng(seed))
    finally:
        backend.set_device(previous)


@pytest.mark.parametrize("key", sorted(CASES), ids=":".join)
@pytest.mark.parametrize("n", SIZES)
def test_emulator_matches_numpy(solution_workspace, key, n):
    got, expected = _run("emu", CASES[key], n, seed=n)
    np.testing.assert_array_equal(got.astype(np.float64), expected)


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(CASES), ids=":".join)
@pytest.mark.parametrize("n", SIZES)
def test_gpu_matches_emulator(solution_workspace, key, n):
    on_gpu, expected = _run("cuda", CASES[key], n, seed=n)
    on_emu, _ = _run("emu", CASES[key], n, seed=n)
    assert on_gpu.tobytes() == on_emu.tobytes()
    np.testing.assert_array_equal(on_gpu.astype(np.float64), expected)
