"""Parity cases of Phase 7's thread-a-row LayerNorm kernels (layernorm.cu: layernorm_forward_thread,
layernorm_backward_thread, layernorm_param_partials), for tests/test_parity.py.

The inputs are the warp kernels' (tests/test_parity.py's ``_phase7``): rows of 2 to 16 columns, an integer mean
plus or minus 1 (variance 1) with eps 3, so rstd is exactly 1/2; integer weights, biases and upstream gradients.
Every sum, mean and product is then a small dyadic number, exact in float32 in any order and whether or not
multiply-adds are fused: a GPU gives the emulator's bits, and both equal the float64 reference. Grids are small
(a few blocks of a few threads) so the grid-stride loops over rows and over columns run more than once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minitorch import backend, kernels


def _dev(x: np.ndarray):
    return backend.asarray(np.ascontiguousarray(x, dtype=np.float32))


def _poison(shape):
    return backend.asarray(np.full(shape, np.nan, np.float32))


def _rows(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) x whose rows have an integer mean and deviations of +-1, and those means (float64)."""
    cols, rows = 2 << (n % 4), max(1, n % 301)
    signs = np.where(rng.integers(0, 2, (rows, cols // 2)) > 0, 1.0, -1.0)
    mean = rng.integers(-8, 9, rows).astype(np.float64)
    return (mean[:, None] + np.concatenate([signs, -signs], axis=1)).astype(np.float32), mean


def _case(function: str) -> Callable:
    def launch(grid, block, *args) -> None:
        kernels.load_kernel("layernorm.cu", function)(grid, block, args)

    def case(n: int, rng: np.random.Generator):
        x, mean = _rows(n, rng)
        rows, cols = x.shape
        ints = lambda *shape: rng.integers(-8, 9, shape).astype(np.float32)  # noqa: E731
        xhat = (x - mean[:, None]) * 0.5
        if function == "layernorm_forward_thread":
            w, b = ints(cols), ints(cols)
            out, m, r = _poison((rows, cols)), _poison(rows), _poison(rows)
            launch((2,), (32,), _dev(x), _dev(w), _dev(b), out, m, r, np.int32(rows), np.int32(cols),
                   np.float32(3.0))
            return (np.concatenate([backend.asnumpy(out).ravel(), backend.asnumpy(m), backend.asnumpy(r)]),
                    np.concatenate([(xhat * w + b).ravel(), mean, np.full(rows, 0.5)]))
        g = ints(rows, cols)
        if function == "layernorm_backward_thread":
            w = ints(cols)
            dx = _poison((rows, cols))
            launch((2,), (32,), _dev(g), _dev(x), _dev(w), _dev(mean), _dev(np.full(rows, 0.5)), dx, np.int32(rows),
                   np.int32(cols))
            gw = g.astype(np.float64) * w
            expected = 0.5 * (gw - gw.mean(axis=1, keepdims=True) - xhat * (gw * xhat).mean(axis=1, keepdims=True))
            return backend.asnumpy(dx), expected
        if function == "layernorm_param_partials":
            chunk_rows = n % 7 + 1
            chunks = (rows + chunk_rows - 1) // chunk_rows
            wp, bp = _poison((chunks, cols)), _poison((chunks, cols))
            launch((1, chunks), (4,), _dev(g), _dev(x), _dev(mean), _dev(np.full(rows, 0.5)), wp, bp,
                   np.int32(rows), np.int32(cols), np.int32(chunk_rows))  # 4 threads: columns loop
            terms = [(g * xhat)[k * chunk_rows:(k + 1) * chunk_rows] for k in range(chunks)]
            exp_wp = np.array([t.sum(axis=0) for t in terms])
            exp_bp = np.array([g[k * chunk_rows:(k + 1) * chunk_rows].astype(np.float64).sum(axis=0)
                               for k in range(chunks)])
            return (np.concatenate([backend.asnumpy(wp).ravel(), backend.asnumpy(bp).ravel()]),
                    np.concatenate([exp_wp.ravel(), exp_bp.ravel()]))
        raise AssertionError(function)
    return case


PHASE7_LAYERNORM_THREAD_CASES: dict[tuple[str, str], Callable] = {
    ("layernorm.cu", k): _case(k)
    for k in ("layernorm_forward_thread", "layernorm_backward_thread", "layernorm_param_partials")}
