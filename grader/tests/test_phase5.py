"""Graded tests of Phase 5, the GEMM ladder: gemm.cu / gemm.py.

Run by `grader check phase5`, on the active device (cuda or emu), with fresh random inputs (seed
printed in the report), sizes that are no multiple of any tile, outputs poisoned with NaN before every
launch, and a check that the learner's kernel really ran. Every value is compared with A·B computed
by NumPy in float64, within the rounding bound of a float32 dot product. Performance (GPU only) is a
ratio to cuBLAS (`cupy.matmul`) or to the grader's own naive and coalesced kernels, measured in the same
run.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import numpy as np
import pytest

from grader import checks
from grader.checks import GradeError, launch_checked
from minitorch import backend, kernels

RUNGS = {  # variant -> kernel in gemm.cu (templated rungs: the name before their template arguments)
    "naive": "sgemm_1_naive", "coalesced": "sgemm_2_coalesced", "shared": "sgemm_3_shared",
    "blocktile_1d": "sgemm_4_blocktile_1d", "blocktile_2d": "sgemm_5_blocktile_2d",
    "vectorized": "sgemm_6_vectorized", "autotuned": "sgemm_7_autotuned", "warptiling": "sgemm_8_warptiling",
    "double_buffered": "sgemm_9_double_buffered", "regtile": "sgemm_10_regtile",
}
TRANSPOSING = ("coalesced", "double_buffered", "regtile", "best")
TILED = ("shared", "blocktile_1d", "blocktile_2d", "vectorized", "autotuned", "warptiling", "double_buffered")
EPS32 = float(np.finfo(np.float32).eps)
ON_GPU = backend.get_device() == "cuda"
# What variant="best" runs when nothing is tuned: rung 9 on a GPU, rung 10 on the emulator (gemm.py's best())
BEST_KERNEL = "sgemm_9_double_buffered" if ON_GPU else "sgemm_10_regtile"
# (M, K, N): single elements, odd sizes, K = 1, tall-and-skinny, short-and-wide, long dot products, exact
# tile multiples (a kernel right only there passes these and fails the others), and whole 128 x 128 tiles of C
# with rows of A and B 16-byte aligned (K and N multiples of 4: what rung 9's unchecked fast path asks) but
# one condition of that path missing: K = 12 is no multiple of BK = 8; M = 129 leaves a partial row of tiles.
# The emulator runs CUDA C on the CPU: 1000 and 1023 cubed only on a GPU.
SHAPES = [(1, 1, 1), (7, 7, 7), (129, 129, 129), (129, 1, 130), (1000, 33, 7), (7, 33, 1000), (3, 1000, 5),
          (256, 64, 128), (131, 67, 260), (128, 12, 128), (129, 16, 128)]
if ON_GPU:
    SHAPES += [(1000, 1000, 1000), (1023, 1023, 1023), (4099, 17, 33), (33, 17, 4099)]
# 128 x 16 x 128: whole tiles, the fast path with the operands read in place (A stored K x M, B N x K).
# 129 x 16 x 130: with transpose_a, A's rows are M = 129 floats, not 16-byte aligned although K = 16 is a
# multiple of 4: a float4 load of them faults on a GPU (misaligned address); the emulator does not check
# alignment, so there only the values are compared.
TRANSPOSED_SHAPES = [(1, 1, 1), (7, 7, 7), (129, 1, 130), (131, 67, 260), (1000, 33, 7), (7, 33, 1000),
                     (128, 16, 128), (129, 16, 130)]
if ON_GPU:
    TRANSPOSED_SHAPES += [(1023, 1023, 1023)]
# Other tile sizes of the templated rungs (the launcher's `config`): the kernels must be right for any
# valid configuration, not only the default one.
CONFIGS = {"autotuned": [(64, 64, 8, 4, 8), (128, 64, 16, 8, 4), (64, 128, 8, 8, 8)],
           "double_buffered": [(64, 64, 8, 32, 32), (128, 256, 8, 64, 64), (64, 128, 16, 32, 64)]}


def gemm_module():
    return kernels.load_module("gemm.py")


def rung(variant: str, *extra: Any, **kw: Any) -> Any:
    """A pytest.param naming the rung's kernel (reported when the test crashes or hangs)."""
    kernel = RUNGS.get(variant, BEST_KERNEL)
    return pytest.param(variant, *extra, marks=pytest.mark.kernel("gemm.cu", kernel),
                        id="-".join(str(v) for v in (variant, *extra)), **kw)


def launches_of(kernel: str) -> int:
    """Launches of `kernel` from gemm.cu since the last reset, template instantiations included."""
    return sum(n for (file, function), n in kernels.launch_counts().items()
               if file == "gemm.cu" and (function == kernel or function.startswith(kernel + "<")))


def operands(m: int, k: int, n: int, ta: bool, tb: bool, *salt: object) -> tuple[np.ndarray, np.ndarray]:
    """Host A and B as stored: A (M, K), or (K, M) when ta; B (K, N), or (N, K) when tb."""
    r = checks.rng("gemm", m, k, n, ta, tb, *salt)
    a = r.uniform(-1, 1, (k, m) if ta else (m, k)).astype(np.float32)
    b = r.uniform(-1, 1, (n, k) if tb else (k, n)).astype(np.float32)
    return a, b


def assert_gemm_close(got: Any, a: np.ndarray, b: np.ndarray, ta: bool, tb: bool, what: str) -> None:
    """op(A)·op(B) in float64, each element within K·eps·(|op(A)|·|op(B)|), the worst-case rounding of a
    float32 dot product of length K in any order."""
    a64, b64 = (a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64)
    expected = a64 @ b64
    got_h = checks.to_host(got).astype(np.float64)
    if got_h.shape != expected.shape:
        raise GradeError(f"{what}: shape {got_h.shape}, expected {expected.shape}")
    k = a64.shape[1]
    bound = k * EPS32 * (np.abs(a64) @ np.abs(b64))
    bad = ~(np.abs(got_h - expected) <= bound)  # NaN is bad
    if not bad.any():
        return
    r, c = (int(i) for i in np.argwhere(bad)[0])
    lines = [f"{what}: {int(bad.sum())} of {expected.size} values differ from op(A)·op(B) (float64) by more "
             f"than K·eps·(|A|·|B|), the float32 rounding bound for K = {k}",
             f"  first bad element C[{r}][{c}]: expected {float(expected[r, c])!r}, got {float(got_h[r, c])!r}"]
    unwritten = int(checks.is_poison(checks.to_host(got)).sum())
    if unwritten:
        lines.append(f"  {unwritten} elements were never written (still the NaN poison): does the grid cover all "
                     f"of C, and does every thread of an edge tile store the outputs inside C?")
    rows_bad, cols_bad = np.flatnonzero(bad.any(axis=1)), np.flatnonzero(bad.any(axis=0))
    m, n = expected.shape
    if rows_bad.min() > 0 or cols_bad.min() > 0:
        lines.append(f"  the wrong values are in rows {rows_bad.min()}..{rows_bad.max()} and columns "
                     f"{cols_bad.min()}..{cols_bad.max()} of a {m} x {n} output: an edge tile? (bounds of "
                     f"loads and stores: M, N and K need not be multiples of a tile)")
    raise GradeError("\n".join(lines))


def run_gemm(variant: str, m: int, k: int, n: int, *, ta: bool = False, tb: bool = False,
             config: tuple | None = None, salt: object = "") -> None:
    """gemm() of fresh operands into a poisoned output: the rung's kernel must run, the result be right and
    the operands untouched."""
    a_host, b_host = operands(m, k, n, ta, tb, variant, salt)
    a, b, out = backend.asarray(a_host), backend.asarray(b_host), checks.poison((m, n))
    kwargs = {"transpose_a": ta, "transpose_b": tb} | ({"config": config} if config else {})
    what = (f"gemm(variant={variant!r}{', config=' + str(config) if config else ''}) of "
            f"op(A) {m} x {k} @ op(B) {k} x {n}" + (" (A transposed)" if ta else "") + (" (B transposed)" if tb else ""))
    checks.reset_launches()
    launch_checked(what, lambda: gemm_module().gemm(a, b, out, variant, **kwargs))
    if variant != "best" and launches_of(RUNGS[variant]) == 0:
        raise GradeError(f"{what}: no launch of `{RUNGS[variant]}` from gemm.cu was recorded: the result was "
                         f"computed without that kernel")
    if variant == "best" and not any(launches_of(k) for k in RUNGS.values()):
        raise GradeError(f"{what}: no launch of a kernel of gemm.cu was recorded")
    assert_gemm_close(out, a_host, b_host, ta, tb, what)
    checks.assert_bitwise_equal(a, a_host, what=f"{what}: A after the call (must not change)")
    checks.assert_bitwise_equal(b, b_host, what=f"{what}: B after the call (must not change)")


# ---------------------------------------------------------------- values


@pytest.mark.parametrize("m, k, n", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("variant", [rung(v) for v in RUNGS])
@pytest.mark.hint("every rung must be right at every size: loads outside A or B read 0, stores outside C are "
                  "skipped, and the grid covers all of C")
def test_rung_values(variant, m, k, n):
    run_gemm(variant, m, k, n)


@pytest.mark.parametrize("m, k, n", TRANSPOSED_SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("ta, tb", [(True, False), (False, True), (True, True)], ids=["At", "Bt", "AtBt"])
@pytest.mark.parametrize("variant", [rung(v) for v in TRANSPOSING])
@pytest.mark.hint("with transpose_a, A is stored (K, M): A(row, k) is A[k * M + row]; with transpose_b, B is "
                  "stored (N, K): B(k, col) is B[col * K + k]. Read them in place, without a transpose kernel")
def test_transposed_operands(variant, ta, tb, m, k, n):
    run_gemm(variant, m, k, n, ta=ta, tb=tb)
    launched = [f for (file, f), count in kernels.launch_counts().items() if count and file != "gemm.cu"]
    if launched:
        raise GradeError(f"gemm(variant={variant!r}) with transposed operands launched {launched[0]} besides "
                         f"gemm.cu: read the operands in place")


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (131, 67, 260), (257, 40, 129)], ids=lambda v: str(v))
@pytest.mark.parametrize("variant, config", [rung(v, c) for v, cs in CONFIGS.items() for c in cs])
@pytest.mark.hint("the templated rungs must be right for any configuration that config_problem accepts: use "
                  "the template parameters (BM, BN, BK, ...) everywhere, never the numbers of the default")
def test_templated_rungs_other_tile_sizes(variant, config, m, k, n):
    run_gemm(variant, m, k, n, config=config)


@pytest.mark.kernel("gemm.cu", BEST_KERNEL)
@pytest.mark.parametrize("m, k, n", [(5, 0, 7), (1, 0, 1)], ids=str)
@pytest.mark.parametrize("variant", ["double_buffered", "shared", "regtile", "best"])
@pytest.mark.hint("with K = 0, C is a sum of no products: every element must be written as 0")
def test_inner_dimension_zero(variant, m, k, n):
    out = checks.poison((m, n))
    launch_checked(f"gemm(variant={variant!r}) of ({m} x 0) @ (0 x {n})",
                   lambda: gemm_module().gemm(backend.empty((m, k)), backend.empty((k, n)), out, variant))
    checks.assert_close(out, np.zeros((m, n)), rtol=0, what=f"gemm(variant={variant!r}) with K = 0")


@pytest.mark.parametrize("m, k, n", [(0, 4, 3), (3, 4, 0), (0, 0, 0)], ids=str)
@pytest.mark.hint("an empty C needs no launch: a grid dimension of 0 is an invalid launch configuration")
def test_empty_output(m, k, n):
    for variant in list(RUNGS) + ["best"]:
        out = backend.empty((m, n))
        gemm_module().gemm(backend.empty((m, k)), backend.empty((k, n)), out, variant)


@pytest.mark.parametrize("variant", [rung(v) for v in TILED])
@pytest.mark.hint("a barrier (__syncthreads) after the tiles are stored and before they are overwritten: "
                  "one thread reads what others wrote", on="fault")
def test_rung_has_no_shared_memory_race(variant):
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase5 --device emu)")
    from minitorch import emu

    with emu.check_mode():
        run_gemm(variant, 65, 33, 70, salt="race")
        if variant == "double_buffered":
            run_gemm(variant, 65, 33, 70, ta=True, tb=True, salt="race")
            run_gemm(variant, 128, 16, 256, salt="race")  # whole tiles: the unchecked loads


# ---------------------------------------------------------------- the launcher


@pytest.mark.hint("gemm.py checks its arguments, and names what it expected and what it got, before launching")
def test_launcher_rejects_bad_arguments():
    gm = gemm_module()
    a, b = backend.asarray(np.ones((3, 4), np.float32)), backend.asarray(np.ones((4, 2), np.float32))
    out = backend.empty((3, 2))
    checks.expect_error("gemm (3, 4) @ (5, 2)", lambda: gm.gemm(a, backend.empty((5, 2)), out),
                        ValueError, "(3, 4)", "(5, 2)")
    checks.expect_error("gemm (3, 4) @ (4, 2) into (2, 3)", lambda: gm.gemm(a, b, backend.empty((2, 3))),
                        ValueError, "(2, 3)", "(3, 2)")
    checks.expect_error("gemm with transpose_a: a (3, 4) is K x M, so b needs 3 rows",
                        lambda: gm.gemm(a, b, backend.empty((4, 2)), transpose_a=True), ValueError, "(4, 2)")
    checks.expect_error("gemm with float64 a", lambda: gm.gemm(backend.asarray(np.ones((3, 4))), b, out),
                        TypeError, "float64")
    checks.expect_error("gemm with a NumPy b", lambda: gm.gemm(a, np.ones((4, 2), np.float32), out),
                        TypeError, "numpy")
    checks.expect_error("gemm with a 1-D b", lambda: gm.gemm(a, backend.empty(4), out), ValueError, "(4,)")
    checks.expect_error("gemm with an unknown variant", lambda: gm.gemm(a, b, out, "fastest"),
                        ValueError, "fastest")
    checks.expect_error("gemm(variant='shared') with a transposed operand",
                        lambda: gm.gemm(a, backend.empty((3, 2)), backend.empty((4, 2)), "shared",
                                        transpose_a=True), ValueError, "shared")
    checks.expect_error("rung 9 with a config whose warp tile does not divide the block's",
                        lambda: gm.gemm(a, b, out, "double_buffered", config=(128, 128, 8, 48, 64)),
                        ValueError, "(128, 128, 8, 48, 64)")


@pytest.mark.kernel("gemm.cu", BEST_KERNEL)
@pytest.mark.hint("the launcher launches your kernels and lets them write C: nothing computed on the host")
def test_results_come_from_your_kernels():
    gm = gemm_module()
    for ta, tb in ((False, False), (True, False), (False, True)):
        a_host, b_host = operands(67, 33, 70, ta, tb, "replay")
        a, b, out = backend.asarray(a_host), backend.asarray(b_host), checks.poison((67, 70))
        call = partial(gm.gemm, a, b, out, "best", transpose_a=ta, transpose_b=tb)
        checks.assert_computed_on_device(f"gemm(variant='best', transpose_a={ta}, transpose_b={tb})", call,
                                         inputs=(a, b), outputs=(out,))


@pytest.mark.hint("variant='best' must run the winner that autotune() stored for this GPU in gemm_tuning.json")
def test_best_uses_the_autotuned_winner():
    gm = gemm_module()
    entries = gm.tuning().get(gm.device_name(), {}) if hasattr(gm, "tuning") else {}
    if not entries:
        pytest.skip("no autotune() result for this device in the workspace (gemm_tuning.json)")
    size, entry = max(entries.items(), key=lambda item: int(item[0]))
    want = gm.kernel_name(entry["variant"], tuple(entry["config"]) if entry.get("config") else None)
    n = int(size)
    checks.reset_launches()
    run_gemm("best", n, 64, n, salt="tuned")
    launched = [f for (file, f), count in kernels.launch_counts().items() if count and file == "gemm.cu"]
    if want not in launched:
        raise GradeError(f"gemm_tuning.json names {want} as the fastest at {size}^3 on {gm.device_name()}, but "
                         f"variant='best' launched {launched}")


@pytest.mark.kernel("gemm.cu", BEST_KERNEL)
@pytest.mark.hint("from Phase 5 on, ops.matmul runs on gemm.py, and the backward pass reads transposed "
                  "operands in place")
def test_matmul_forward_and_backward_run_on_gemm():
    import minitorch

    r = checks.rng("autograd")
    x_host, w_host = r.standard_normal((37, 19)).astype(np.float32), r.standard_normal((19, 11)).astype(np.float32)
    g_host = r.standard_normal((37, 11)).astype(np.float32)
    x = minitorch.tensor(x_host, requires_grad=True)
    w = minitorch.tensor(w_host, requires_grad=True)
    checks.reset_launches()
    y = x @ w
    y.backward(minitorch.tensor(g_host))
    launched = {(file, f.split("<")[0]) for (file, f), count in kernels.launch_counts().items() if count}
    if not any(file == "gemm.cu" for file, _ in launched):
        raise GradeError(f"x @ w and its backward pass launched no kernel of gemm.cu: {sorted(launched)}")
    if any(file in ("transpose.cu", "matmul.cu") for file, _ in launched):
        raise GradeError(f"the backward pass of x @ w launched {sorted(launched)}: Phase 5's gemm reads the "
                         f"transposed operands in place (transpose_a / transpose_b)")
    x64, w64, g64 = x_host.astype(np.float64), w_host.astype(np.float64), g_host.astype(np.float64)
    checks.assert_close(y, x64 @ w64, rtol=1e-4, atol=1e-4, what="x @ w")
    checks.assert_close(x.grad, g64 @ w64.T, rtol=1e-4, atol=1e-4, what="dX = dY·Wᵀ")
    checks.assert_close(w.grad, x64.T @ g64, rtol=1e-4, atol=1e-4, what="dW = Xᵀ·dY")


# ---------------------------------------------------------------- performance (GPU only)


def _gpu():
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    return cupy


def _square(cupy, size: int, seed: int) -> tuple[Any, Any, Any]:
    a = cupy.random.RandomState(seed).uniform(-1, 1, (size, size), dtype=np.float32)
    b = cupy.random.RandomState(seed + 1).uniform(-1, 1, (size, size), dtype=np.float32)
    return a, b, cupy.empty((size, size), np.float32)


# The yardsticks of rung 3, compiled by the grader (so no learner's rung 1 can lower the bar): the naive
# kernel (threadIdx.x down the rows of C, the ladder's rung 1) and the coalesced one (threadIdx.x along a row,
# rung 2, which Phase 2's matmul_naive already is). Tiles in shared memory must beat both.
_YARDSTICKS = r"""
extern "C" __global__ void naive(const float* A, const float* B, float* C, int M, int N, int K) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x, col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
extern "C" __global__ void coalesced(const float* A, const float* B, float* C, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
"""


def _yardsticks(cupy, a: Any, b: Any, out: Any) -> dict[str, Any]:
    """The grader's naive and coalesced GEMMs on (a, b) into out, as zero-argument launches (32 x 32 blocks)."""
    module = cupy.RawModule(code=_YARDSTICKS)
    (m, k), n = a.shape, b.shape[1]
    size = (np.int32(m), np.int32(n), np.int32(k))
    tiles = ((m + 31) // 32, (n + 31) // 32)
    naive, coalesced = module.get_function("naive"), module.get_function("coalesced")
    return {"naive": lambda: naive(tiles, (32, 32), (a, b, out) + size),
            "coalesced": lambda: coalesced(tiles[::-1], (32, 32), (a, b, out) + size)}


@pytest.mark.perf
@pytest.mark.kernel("gemm.cu", "sgemm_3_shared")
@pytest.mark.hint("rung 3 stages 32 x 32 tiles of A and B in shared memory, loaded coalesced, and reads each "
                  "value 32 times from there")
def test_perf_shared_memory_tiling_against_naive(record_property):
    cupy = _gpu()
    size = 1024
    a, b, out = _square(cupy, size, 0)
    gm = gemm_module()
    run_gemm("shared", 129, 65, 129, salt="perf")  # right before it is fast
    yardsticks = _yardsticks(cupy, a, b, out)
    yardsticks["naive"]()
    np.testing.assert_allclose(cupy.asnumpy(out), cupy.asnumpy(a @ b), rtol=1e-3, atol=1e-3)  # the yardstick
    checks.perf_ratio(f"rung 3 (shared) vs the naive kernel, {size}^3", lambda: gm.gemm(a, b, out, "shared"),
                      yardsticks["naive"], 2 * size ** 3, "phase5.shared_vs_naive", record_property,
                      unit="GFLOP/s", reference_name="the grader's naive kernel (rung 1)")
    checks.perf_ratio(f"rung 3 (shared) vs the coalesced kernel, {size}^3", lambda: gm.gemm(a, b, out, "shared"),
                      yardsticks["coalesced"], 2 * size ** 3, "phase5.shared_vs_coalesced", record_property,
                      unit="GFLOP/s", reference_name="the grader's coalesced kernel (rung 2, Phase 2's)")


@pytest.mark.perf
@pytest.mark.parametrize("size", [1024, 4096])
@pytest.mark.parametrize("variant", [rung(v) for v in list(RUNGS) + ["best"]])
@pytest.mark.hint("see the chapter's ladder: what does this rung change in how the data moves?")
def test_perf_rung_against_cublas(variant, size, record_property):
    cupy = _gpu()
    a, b, out = _square(cupy, size, 1)
    gm = gemm_module()
    gm.gemm(a, b, out, variant)
    if not bool(cupy.allclose(out, a @ b, rtol=1e-3, atol=1e-3)):
        raise GradeError(f"gemm(variant={variant!r}) at {size}^3 differs from cupy.matmul")
    key = f"phase5.{variant}_{size}"
    try:
        checks.threshold(key)
    except KeyError:
        key = "phase5.reported_only"
    checks.perf_ratio(f"{variant} at {size}^3", lambda: gm.gemm(a, b, out, variant),
                      lambda: cupy.matmul(a, b, out=out), 2 * size ** 3, key, record_property, unit="GFLOP/s",
                      reference_name="cupy.matmul (cuBLAS SGEMM)")


@pytest.mark.perf
@pytest.mark.kernel("gemm.cu", "sgemm_9_double_buffered")
@pytest.mark.parametrize("ta, tb", [(True, False), (False, True)], ids=["At", "Bt"])
@pytest.mark.hint("transposed operands: load each tile along the dimension that is contiguous in memory")
def test_perf_transposed_best_against_cublas(ta, tb, record_property):
    cupy = _gpu()
    size = 4096
    a, b, out = _square(cupy, size, 2)
    gm = gemm_module()
    gm.gemm(a, b, out, "best", transpose_a=ta, transpose_b=tb)
    expected = (a.T if ta else a) @ (b.T if tb else b)
    if not bool(cupy.allclose(out, expected, rtol=1e-3, atol=1e-3)):
        raise GradeError(f"gemm(transpose_a={ta}, transpose_b={tb}) at {size}^3 differs from cupy.matmul")
    checks.perf_ratio(f"best, {'A' if ta else 'B'} transposed, at {size}^3",
                      lambda: gm.gemm(a, b, out, "best", transpose_a=ta, transpose_b=tb),
                      lambda: cupy.matmul(a.T if ta else a, b.T if tb else b, out=out), 2 * size ** 3,
                      "phase5.best_transposed_4096", record_property, unit="GFLOP/s",
                      reference_name="cupy.matmul of the same transposed views (cuBLAS)")


def test_tuning_file_is_valid_json():
    """A tuning file the learner's autotune() wrote must be readable (it decides what `best` runs)."""
    gm = gemm_module()
    path = kernels.workspace_dir() / getattr(gm, "TUNING_FILE", "gemm_tuning.json")
    if not path.exists():
        pytest.skip("no gemm_tuning.json in the workspace (autotune() has not run)")
    try:
        json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise GradeError(f"{path} is not valid JSON ({err}): run gemm.autotune() again") from None
