"""Graded tests of Phase 4 (reductions and real data): reduce.cu / reduce.py, and the sales deliverable.

Run by `grader check phase4`, on the active device (cuda or emu), with fresh random inputs (seed
printed in the report), odd sizes and outputs poisoned with NaN before every launch. Every value is
compared with a float64 NumPy reference. The deliverable is checked by evaluating the model the lab
saved in the workspace on the test split, in float64 NumPy: no printed number is trusted.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader import checks, deliverables
from grader.checks import ODD_SIZES, GradeError, launch_checked
from grader.checks import run_without_host_transfers as on_device
from minitorch import backend, kernels

SUM_KERNELS = {"atomic": "sum_atomic", "shared": "sum_shared", "warp": "sum_warp"}
# Each variant parametrizes a test with its kernel, named when that test crashes or hangs.
VARIANTS = [pytest.param(v, id=v, marks=pytest.mark.kernel("reduce.cu", k)) for v, k in SUM_KERNELS.items()]
TREE_VARIANTS = [p for p in VARIANTS if p.values[0] != "atomic"]  # a shared-memory tree: checked for races
MAX = pytest.mark.kernel("reduce.cu", "max_warp")
COLUMNS = pytest.mark.kernel("reduce.cu", "column_mean_var")
# Shapes (rows, cols): single elements, partial 32-column tiles, many tiles, long thin columns; a tall, narrow
# matrix (many chunks of rows, the last one shorter: 100,003 is prime) and many tiles times several chunks.
COLUMN_SHAPES = [(1, 1), (7, 3), (31, 33), (257, 1), (4099, 5), (100, 65), (5, 1000), (20_011, 2), (100_003, 3),
                 (3001, 70)]
# A float32 sum of any order is within this fraction of sum(|x|) of the exact sum, for these sizes.
SUM_RTOL_OF_ABS = 1e-5


def reduce():
    return kernels.load_module("reduce.py")




def sum_kernel(variant: str) -> str:
    return SUM_KERNELS[variant]


def device_sum(host: np.ndarray, variant: str, *, expect_launch: bool = True) -> float:
    """reduce.sum of `host` (copied to the device) into a poisoned 1-element output."""
    x, out = backend.asarray(host), checks.poison(1)
    what = f"reduce.sum(x of {host.size} elements, out, variant={variant!r})"
    if expect_launch:
        with checks.expect_launch("reduce.cu", sum_kernel(variant)):
            on_device(what, lambda: reduce().sum(x, out, variant=variant))
    else:
        on_device(what, lambda: reduce().sum(x, out, variant=variant))
    return float(checks.to_host(out).reshape(-1)[0])


def check_sum(got: float, host: np.ndarray, what: str, *, exact: bool = False) -> None:
    exact_sum = float(host.astype(np.float64).sum())
    if math.isnan(got):
        raise GradeError(f"{what}: got NaN, expected {exact_sum!r} (out is poisoned with NaN before the launch: "
                         f"it was never written, or NaN came from shared memory nobody initialised)")
    tolerance = 0.0 if exact else SUM_RTOL_OF_ABS * float(np.abs(host.astype(np.float64)).sum())
    if abs(got - exact_sum) > tolerance:
        raise GradeError(f"{what}: got {got!r}, expected {exact_sum!r} (float64 sum of the same float32 values; "
                         f"error {abs(got - exact_sum):.4g}, allowed {tolerance:.4g})")


def small_integers(n: int, *salt: object) -> np.ndarray:
    """Integers in [-8, 8] as float32: every partial sum is exact in float32, so any order of summation
    gives exactly the float64 sum, and a missing or doubled element shows."""
    return checks.rng("ints", n, *salt).integers(-8, 9, n).astype(np.float32)


# ---------------------------------------------------------------- sum: values


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("every element must be added exactly once: check the grid-stride loop, the tree's bounds and "
                  "that the launcher reduces the partials of every block")
def test_sum_every_element_once(variant, n):
    host = small_integers(n, variant)
    got = device_sum(host, variant)
    check_sum(got, host, f"reduce.sum(variant={variant!r}) of {n} small integers", exact=True)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30], ids=["tiny", "unit", "huge"])
@pytest.mark.hint("accumulate in float32 (or wider) registers; the result must match the float64 sum to float32 "
                  "rounding")
def test_sum_magnitudes_against_float64(variant, scale):
    n = 1_000_003
    r = checks.rng("magnitudes", variant, scale)
    host = ((r.standard_normal(n) + 0.5) * scale).astype(np.float32)  # an offset: partial sums grow
    got = device_sum(host, variant)
    check_sum(got, host, f"reduce.sum(variant={variant!r}) of {n} values of magnitude {scale:g}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.hint("the sum must hold values of very different sizes (10^-20 .. 10^20) without overflow")
def test_sum_mixed_magnitudes(variant):
    n = 4099
    r = checks.rng("mixed", variant)
    host = (np.sign(r.standard_normal(n)) * 10.0 ** r.uniform(-20, 20, n)).astype(np.float32)
    got = device_sum(host, variant)
    check_sum(got, host, f"reduce.sum(variant={variant!r}) of {n} values from 1e-20 to 1e20")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", [7, 4099])  # 28 and 16,396 bytes: not a multiple of 16
@pytest.mark.hint("read x[i] only for i < n, in the unrolled loop and in its tail")
def test_sum_kernel_no_read_past_end(variant, n):
    """Exactly n elements, checked at the first byte past them (the emulator's check mode, on emu)."""
    host = small_integers(n, "bounds", variant)
    check_sum(device_sum(host, variant), host, f"reduce.sum(variant={variant!r}) of {n} small integers", exact=True)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.hint("the sum of no elements is 0.0: out must be written even when x is empty")
def test_sum_of_empty_is_zero(variant):
    got = device_sum(np.zeros(0, np.float32), variant, expect_launch=False)
    if got != 0.0:
        raise GradeError(f"reduce.sum(variant={variant!r}) of an empty array: got {got!r}, expected 0.0"
                         + (" (out still holds the NaN it was poisoned with)" if math.isnan(got) else ""))


@pytest.mark.kernel("reduce.cu", "sum_warp")
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 5, 7), (1, 1, 1)], ids=str)
@pytest.mark.hint("sum every one of x.size elements, whatever the shape")
def test_sum_multidimensional(shape):
    host = small_integers(int(np.prod(shape)), "md").reshape(shape)
    check_sum(device_sum(host, "warp"), host, f"reduce.sum of shape {shape}", exact=True)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.hint("a two-pass launcher: many blocks write one partial each, then one block reduces the partials")
def test_sum_is_two_pass(variant):
    n = 1_000_003
    host = small_integers(n, "passes")
    checks.reset_launches()
    got = device_sum(host, variant)
    launches = kernels.launch_count("reduce.cu", sum_kernel(variant))
    if launches < 2:
        raise GradeError(f"reduce.sum(variant={variant!r}) over {n} elements launched `{sum_kernel(variant)}` "
                         f"{launches} time(s): expected two passes (blocks -> partials, then one block -> out)")
    check_sum(got, host, f"reduce.sum(variant={variant!r})", exact=True)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("grid, threads", [(3, 64), (5, 32), (2, 1024), (7, 256)], ids=lambda v: str(v))
@pytest.mark.hint("the kernel must work for any grid and any block of 32 to 1024 threads (a power of two): a "
                  "grid-stride loop, and the tree sized by blockDim.x")
def test_sum_kernel_any_grid_and_block(variant, grid, threads):
    n = 10_007
    host = small_integers(n, "grid", grid, threads)
    kernel = kernels.load_kernel("reduce.cu", sum_kernel(variant))
    partial = backend.zeros(grid) if variant == "atomic" else checks.poison(grid)  # atomics add to a zeroed slot
    launch_checked(f"{sum_kernel(variant)} with grid {grid} x block {threads}",
                   lambda: kernel((grid,), (threads,), (backend.asarray(host), partial, np.int64(n))))
    parts = checks.to_host(partial).astype(np.float64)
    what = f"{sum_kernel(variant)} launched with grid {grid} x block {threads} for n={n}"
    unwritten = np.flatnonzero(np.isnan(parts))
    if unwritten.size:
        raise GradeError(f"{what}: partial[{unwritten[0]}] is NaN: block {unwritten[0]} never wrote its partial sum "
                         f"(or read shared memory nobody wrote)")
    check_sum(float(parts.sum()), host, f"{what}: the sum of the {grid} partials", exact=True)


@pytest.mark.parametrize("variant", TREE_VARIANTS)
@pytest.mark.hint("a barrier (__syncthreads) between every two steps of the tree: one thread reads what another "
                  "wrote in the step before", on="fault")
def test_sum_has_no_shared_memory_race(variant):
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase4 --device emu)")
    from minitorch import emu

    for n in (257, 4099):
        host = small_integers(n, "race")
        with emu.check_mode():
            got = device_sum(host, variant)
        check_sum(got, host, f"reduce.sum(variant={variant!r}) under the emulator's check mode", exact=True)


# ---------------------------------------------------------------- max


def device_max(host: np.ndarray) -> float:
    x, out = backend.asarray(host), checks.poison(1)
    with checks.expect_launch("reduce.cu", "max_warp"):
        on_device(f"reduce.max(x of {host.size} elements, out)", lambda: reduce().max(x, out))
    return float(checks.to_host(out).reshape(-1)[0])


def check_max(got: float, host: np.ndarray, what: str) -> None:
    expected = float(np.max(host.astype(np.float64)))
    same = (math.isnan(got) and math.isnan(expected)) or got == expected
    if not same:
        note = ""
        if math.isnan(got):
            note = " (NaN: out was never written, or a NaN came from shared memory nobody initialised)"
        elif got == 0.0 and expected < 0:
            note = " (0.0: is the starting value 0 instead of -infinity?)"
        raise GradeError(f"{what}: got {got!r}, expected {expected!r}{note}")


@MAX
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.hint("start every thread at -infinity and take the max over its grid-stride share, then over the block")
def test_max_values(n):
    r = checks.rng("max", n)
    host = (r.standard_normal(n) * 100).astype(np.float32)
    host[r.integers(0, n)] = np.float32(1e4)  # one clear maximum somewhere
    check_max(device_max(host), host, f"reduce.max of {n} values")
    host[-1] = np.float32(2e4)  # ... and at the very last index (the tail of the last block)
    check_max(device_max(host), host, f"reduce.max of {n} values with the maximum at the last index")


@MAX
@pytest.mark.parametrize("n", [1, 31, 4099, 1_000_003])
@pytest.mark.hint("max of all-negative values: the starting value must be -infinity, not 0")
def test_max_all_negative(n):
    host = (-1.0 - np.abs(checks.rng("neg", n).standard_normal(n)) * 1e3).astype(np.float32)
    check_max(device_max(host), host, f"reduce.max of {n} negative values")


@MAX
@pytest.mark.hint("infinities are ordinary values for max: -inf only gives -inf, one +inf gives +inf")
def test_max_infinities():
    host = np.full(1000, -np.inf, np.float32)
    check_max(device_max(host), host, "reduce.max of 1000 times -inf")
    host[517] = np.inf
    check_max(device_max(host), host, "reduce.max of -inf values and one +inf")


@MAX
@pytest.mark.parametrize("where", [0, 500, 4098])
@pytest.mark.hint("a NaN anywhere makes the max NaN (as numpy.max and torch.max): fmaxf drops NaN, so compare "
                  "with a NaN test, e.g. (b > a || b != b) ? b : a")
def test_max_propagates_nan(where):
    host = checks.rng("nan", where).standard_normal(4099).astype(np.float32)
    host[where] = np.nan
    got = device_max(host)
    if not math.isnan(got):
        raise GradeError(f"reduce.max of 4099 values with a NaN at index {where}: got {got!r}, expected NaN")


@MAX
@pytest.mark.parametrize("n", [7, 4099])
@pytest.mark.hint("read x[i] only for i < n, in the unrolled loop and in its tail")
def test_max_kernel_no_read_past_end(n):
    host = (-1.0 - np.abs(checks.rng("max-bounds", n).standard_normal(n))).astype(np.float32)
    check_max(device_max(host), host, f"reduce.max of {n} negative values")


@MAX
@pytest.mark.hint("max of an empty array is undefined: raise ValueError")
def test_max_of_empty_raises():
    with pytest.raises(ValueError):
        reduce().max(backend.zeros(0), checks.poison(1))


@MAX
@pytest.mark.parametrize("grid, threads", [(3, 64), (2, 1024), (5, 32)], ids=str)
@pytest.mark.hint("the kernel must work for any grid and any block of 32 to 1024 threads (a power of two)")
def test_max_kernel_any_grid_and_block(grid, threads):
    n = 10_007
    host = (-1.0 - np.abs(checks.rng("max-grid", grid, threads).standard_normal(n))).astype(np.float32)
    kernel = kernels.load_kernel("reduce.cu", "max_warp")
    partial = checks.poison(grid)
    launch_checked(f"max_warp with grid {grid} x block {threads}",
                   lambda: kernel((grid,), (threads,), (backend.asarray(host), partial, np.int64(n))))
    parts = checks.to_host(partial).astype(np.float64)
    if np.isnan(parts).any():
        raise GradeError(f"max_warp with grid {grid} x block {threads}: partial[{int(np.flatnonzero(np.isnan(parts))[0])}] "
                         f"is NaN (never written, or read from uninitialised shared memory)")
    check_max(float(parts.max()), host, f"max_warp with grid {grid} x block {threads}: the max of the partials")


@MAX
@pytest.mark.hint("no shared-memory races: a barrier between the warps' writes and the first warp's reads", on="fault")
def test_max_has_no_shared_memory_race():
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase4 --device emu)")
    from minitorch import emu

    host = checks.rng("max-race").standard_normal(4099).astype(np.float32)
    with emu.check_mode():
        got = device_max(host)
    check_max(got, host, "reduce.max under the emulator's check mode")


# ---------------------------------------------------------------- column mean and variance


def device_column_mean_var(host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """reduce.column_mean_var of `host` into poisoned outputs; both passes must have run."""
    cols = host.shape[1]
    x, mean, var = backend.asarray(host), checks.poison(cols), checks.poison(cols)
    checks.reset_launches()
    on_device(f"reduce.column_mean_var(x of shape {host.shape}, mean, var)",
              lambda: reduce().column_mean_var(x, mean, var))
    checks.require_launch("reduce.cu", "column_partials")
    checks.require_launch("reduce.cu", "column_mean_var")
    return checks.to_host(mean), checks.to_host(var)


def check_mean_var(host: np.ndarray, mean: np.ndarray, var: np.ndarray, what: str, *, var_rtol: float = 1e-4) -> None:
    x64 = host.astype(np.float64)
    exp_mean, exp_var = x64.mean(axis=0), x64.var(axis=0)  # population variance (divide by rows)
    scale = np.abs(x64).max(axis=0)
    checks.assert_close(mean, exp_mean, rtol=1e-5, atol=float(1e-6 * scale.max()), what=f"{what}: mean")
    if np.any(var < 0):
        c = int(np.flatnonzero(var < 0)[0])
        raise GradeError(f"{what}: var[{c}] = {var[c]!r} is negative: a variance never is (E[x^2] - E[x]^2 "
                         f"cancels catastrophically in float32; subtract the mean first)")
    try:
        checks.assert_close(var, exp_var, rtol=var_rtol, atol=float(1e-6 * exp_var.max() + 1e-30),
                            what=f"{what}: var (population variance: divide by rows)")
    except GradeError as err:
        sample = x64.var(axis=0, ddof=1) if host.shape[0] > 1 else None
        if sample is not None and np.allclose(var, sample, rtol=var_rtol):
            raise GradeError(f"{err}\n  these are sample variances (divided by rows - 1): divide by rows") from None
        raise


@COLUMNS
@pytest.mark.parametrize("shape", COLUMN_SHAPES, ids=str)
@pytest.mark.hint("mean and population variance of every column: threads past the last column must still reach "
                  "every __syncthreads(), and the last chunk of rows may be shorter than the others")
def test_column_mean_var_values(shape):
    r = checks.rng("columns", shape)
    host = (r.standard_normal(shape) * r.uniform(0.1, 10, shape[1]) + r.uniform(-5, 5, shape[1])).astype(np.float32)
    mean, var = device_column_mean_var(host)
    check_mean_var(host, mean, var, f"column_mean_var of shape {shape}")


@COLUMNS
@pytest.mark.parametrize("offset", [1e3, 1e4], ids=["mean 1e3", "mean 1e4"])
@pytest.mark.hint("a large mean and a small variance: E[x^2] - E[x]^2 subtracts two nearly equal numbers of "
                  "about 1e8 (float32 keeps 7 digits); compute the mean first, then average (x - mean)^2 (or Welford)")
def test_column_variance_is_stable_with_a_large_mean(offset):
    rows, cols = 20_011, 3
    host = (offset + checks.rng("stable", offset).standard_normal((rows, cols))).astype(np.float32)
    mean, var = device_column_mean_var(host)
    check_mean_var(host, mean, var, f"column_mean_var of {offset:g} + N(0, 1) data, shape {(rows, cols)}",
                   var_rtol=1e-3)


@COLUMNS
@pytest.mark.hint("a constant column has variance 0 (to rounding), never a negative one")
def test_column_variance_of_constant_columns():
    values = np.array([1e4 + 0.1, -3.7, 0.0], np.float32)
    host = np.tile(values, (4099, 1))
    mean, var = device_column_mean_var(host)
    checks.assert_close(mean, values.astype(np.float64), rtol=1e-5, what="column_mean_var of constant columns: mean")
    # A mean off by a few float32 roundings, d, gives a variance of d^2: tiny, and never negative.
    allowed = (1e-5 * np.abs(values.astype(np.float64))) ** 2 + 1e-12
    if np.any(var < 0) or np.any(var > allowed):
        raise GradeError(f"column_mean_var of constant columns {values.tolist()}: var = {var.tolist()}, expected 0 "
                         f"(at most {allowed.tolist()}) and never negative")


@COLUMNS
@pytest.mark.hint("no shared-memory races: a barrier after every write and before the cache is reused", on="fault")
def test_column_mean_var_has_no_shared_memory_race():
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase4 --device emu)")
    from minitorch import emu

    host = checks.rng("cmv-race").standard_normal((999, 37)).astype(np.float32)  # 2 tiles of columns
    with emu.check_mode():
        mean, var = device_column_mean_var(host)
    check_mean_var(host, mean, var, "column_mean_var under the emulator's check mode")


# Kernels alone: (rows, cols, chunk_rows, blockDim.y of column_partials, blockDim.y of column_mean_var). A last
# chunk of 1 row; more chunks than merging threads; chunks of 1 row (m2 = 0 each); a single chunk.
CHUNKINGS = [(1001, 37, 100, 4, 2), (4099, 33, 64, 8, 32), (10, 3, 1, 1, 4), (777, 5, 777, 32, 32)]


def chunk_statistics(host: np.ndarray, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 (n_chunks, cols) means and sums of squared deviations of consecutive chunks of rows."""
    x64 = host.astype(np.float64)
    chunks = [x64[k:k + chunk_rows] for k in range(0, len(x64), chunk_rows)]
    means = np.array([c.mean(axis=0) for c in chunks])
    return means, np.array([((c - m) ** 2).sum(axis=0) for c, m in zip(chunks, means, strict=True)])


def column_data(rows: int, cols: int, *salt: object) -> np.ndarray:
    r = checks.rng("column-kernels", rows, cols, *salt)
    return (r.standard_normal((rows, cols)) * r.uniform(0.1, 10, cols) + r.uniform(-50, 50, cols)).astype(np.float32)


@pytest.mark.kernel("reduce.cu", "column_partials")
@pytest.mark.parametrize("rows, cols, chunk_rows, partial_y, merge_y", CHUNKINGS, ids=str)
@pytest.mark.hint("block (tile, k) covers rows k * chunk_rows .. min((k + 1) * chunk_rows, rows) - 1: the last chunk "
                  "is shorter; divide by that chunk's own number of rows, and write slot k * cols + c")
def test_column_partials_any_chunking_and_block(rows, cols, chunk_rows, partial_y, merge_y):
    host = column_data(rows, cols)
    n_chunks = (rows + chunk_rows - 1) // chunk_rows
    chunk_mean, chunk_m2 = checks.poison((n_chunks, cols)), checks.poison((n_chunks, cols))
    what = (f"column_partials of shape {(rows, cols)}, chunk_rows={chunk_rows} ({n_chunks} chunks), grid "
            f"{((cols + 31) // 32, n_chunks)} x block {(32, partial_y)}")
    launch_checked(what, lambda: kernels.load_kernel("reduce.cu", "column_partials")(
        ((cols + 31) // 32, n_chunks), (32, partial_y),
        (backend.asarray(host), chunk_mean, chunk_m2, np.int32(rows), np.int32(cols), np.int32(chunk_rows))))
    exp_mean, exp_m2 = chunk_statistics(host, chunk_rows)
    scale = float(np.abs(host).max())
    checks.assert_close(chunk_mean, exp_mean, rtol=1e-5, atol=1e-6 * scale, what=f"{what}: chunk_mean")
    checks.assert_close(chunk_m2, exp_m2, rtol=1e-4, atol=1e-6 * float(exp_m2.max()) + 1e-30,
                        what=f"{what}: chunk_m2 (the sum of squared deviations from the chunk's mean)")


@COLUMNS
@pytest.mark.parametrize("rows, cols, chunk_rows, partial_y, merge_y", CHUNKINGS, ids=str)
@pytest.mark.hint("merge chunk k with its own number of rows, min(chunk_rows, rows - k * chunk_rows); merging with "
                  "statistics of n = 0 values (a thread with no chunk) changes nothing; var = m2 / rows")
def test_column_mean_var_merges_any_chunking_and_block(rows, cols, chunk_rows, partial_y, merge_y):
    host = column_data(rows, cols, "merge")
    n_chunks = (rows + chunk_rows - 1) // chunk_rows
    exp_mean, exp_m2 = chunk_statistics(host, chunk_rows)  # the partials, from float64: only pass 2 is graded here
    chunk_mean, chunk_m2 = (backend.asarray(a.astype(np.float32)) for a in (exp_mean, exp_m2))
    mean, var = checks.poison(cols), checks.poison(cols)
    what = (f"column_mean_var merging {n_chunks} chunks of {chunk_rows} rows (shape {(rows, cols)}), grid "
            f"{((cols + 31) // 32,)} x block {(32, merge_y)}")
    launch_checked(what, lambda: kernels.load_kernel("reduce.cu", "column_mean_var")(
        ((cols + 31) // 32,), (32, merge_y),
        (chunk_mean, chunk_m2, mean, var, np.int32(rows), np.int32(cols), np.int32(chunk_rows), np.int32(n_chunks))))
    check_mean_var(host, checks.to_host(mean), checks.to_host(var), what)


# ---------------------------------------------------------------- argument checks


@COLUMNS
@pytest.mark.hint("a matrix with no columns has no statistics to write: return without an error")
def test_column_mean_var_of_no_columns_does_nothing():
    x = backend.asarray(np.ones((5, 0), np.float32))
    mean, var = backend.empty((0,)), backend.empty((0,))
    on_device("reduce.column_mean_var(x of shape (5, 0), mean, var)", lambda: reduce().column_mean_var(x, mean, var))


@pytest.mark.hint("check the arguments before launching: TypeError for a wrong dtype, ValueError for a wrong shape "
                  "or variant, naming what was expected and what came")
def test_launchers_reject_bad_arguments():
    red = reduce()
    x = backend.asarray(np.ones(10, np.float32))
    cases = [
        ("sum with a float64 input", TypeError, lambda: red.sum(backend.asarray(np.ones(10)), checks.poison(1))),
        ("sum into a 2-element out", ValueError, lambda: red.sum(x, checks.poison(2))),
        ("sum with variant='fastest'", ValueError, lambda: red.sum(x, checks.poison(1), variant="fastest")),
        ("max with a float64 input", TypeError, lambda: red.max(backend.asarray(np.ones(10)), checks.poison(1))),
        ("max into a 2-element out", ValueError, lambda: red.max(x, checks.poison(2))),
        ("column_mean_var of a 1-D array", ValueError, lambda: red.column_mean_var(x, checks.poison(10), checks.poison(10))),
        ("column_mean_var with mean of the wrong shape", ValueError,
         lambda: red.column_mean_var(backend.asarray(np.ones((4, 3), np.float32)), checks.poison(4), checks.poison(3))),
        ("column_mean_var of 0 rows", ValueError,
         lambda: red.column_mean_var(backend.asarray(np.ones((0, 3), np.float32)), checks.poison(3), checks.poison(3))),
    ]
    for what, error, call in cases:
        try:
            call()
        except error:
            continue
        except Exception as exc:
            raise GradeError(f"{what}: raised {type(exc).__name__} ({exc}), expected {error.__name__}") from exc
        raise GradeError(f"{what}: no error; expected {error.__name__} naming what was expected and what came")


# ---------------------------------------------------------------- performance (GPU only)

PERF_N = 1 << 26  # 2^26 floats = 256 MiB


def _perf_input():
    import cupy

    x = cupy.random.RandomState(checks.seed()).standard_normal(PERF_N, dtype=np.float32)
    return x, cupy.empty(1, np.float32)


@pytest.mark.kernel("reduce.cu", "sum_warp")
@pytest.mark.perf
@pytest.mark.hint("keep several loads in flight per thread (unroll the grid-stride loop), launch enough blocks to fill "
                  "the GPU, and keep the second pass small")
def test_perf_sum_against_copy_bandwidth(record_property):
    """The final sum reads 4 bytes an element and writes nothing; a copy reads 4 and writes 4. Both are
    counted as bytes moved per second: the same DRAM bandwidth, the ceiling of a memory-bound kernel."""
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    x, out = _perf_input()
    src, dst = cupy.empty(PERF_N, np.float32), cupy.empty(PERF_N, np.float32)
    red = reduce()
    checks.perf_ratio("sum (warp) bandwidth", lambda: red.sum(x, out, variant="warp"), lambda: cupy.copyto(dst, src),
                      4 * PERF_N, "phase4.sum_vs_copy", record_property,
                      reference_name="cupy.copyto (bytes read + written)", reference_nbytes=8 * PERF_N)


@pytest.mark.kernel("reduce.cu", "sum_warp")
@pytest.mark.perf
@pytest.mark.hint("cupy.sum runs CUB's tuned reduction: vectorised loads and a single pass")
def test_perf_sum_against_cupy_sum(record_property):
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    x, out = _perf_input()
    red = reduce()
    checks.perf_ratio("sum (warp) vs cupy.sum", lambda: red.sum(x, out, variant="warp"), lambda: cupy.sum(x),
                      4 * PERF_N, "phase4.sum_vs_cupy", record_property, reference_name="cupy.sum")


@pytest.mark.parametrize("variant", ["atomic", "shared"])
@pytest.mark.perf
def test_perf_other_sum_variants_reported(variant, record_property):
    """Reported, not required (thresholds 0): the chapter's ladder, measured on your kernels."""
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    x, out = _perf_input()
    src, dst = cupy.empty(PERF_N, np.float32), cupy.empty(PERF_N, np.float32)
    red = reduce()
    checks.perf_ratio(f"sum ({variant}) bandwidth", lambda: red.sum(x, out, variant=variant),
                      lambda: cupy.copyto(dst, src), 4 * PERF_N, f"phase4.sum_{variant}", record_property,
                      reference_name="cupy.copyto (bytes read + written)", reference_nbytes=8 * PERF_N)


# ---------------------------------------------------------------- the deliverable: sales.tsv

LAB_SECTION = deliverables.SALES_LAB_SECTION


@pytest.mark.hint(f"run the section {LAB_SECTION} to its end (it saves the model); with log-space quantity and "
                  f"price, as the lab does, the model comes far under the threshold")
def test_sales_model_beats_the_mean_predictor():
    """The saved model, re-evaluated by the grader (grader/deliverables.py: NumPy float64 on the held-out
    sales). `grader grade-all` repeats this outside the sandbox, where the learner's code cannot reach it."""
    deliverables.evaluate_sales(kernels.workspace_dir())


@pytest.mark.kernel("reduce.cu", "column_partials")
@pytest.mark.perf
@pytest.mark.parametrize("shape", [(1 << 20, 16), (1 << 18, 64)], ids=str)
@pytest.mark.hint("split the rows into chunks so that a tall, narrow matrix still gives the GPU hundreds of blocks; "
                  "one block per 32 columns leaves all but one multiprocessor idle")
def test_perf_column_mean_var_tall_and_narrow(shape, record_property):
    """Bytes of x read once per second, against a copy's bytes read + written (the two passes over a chunk
    read it twice; the second read mostly hits L2). Tall and narrow: the shape of a feature matrix."""
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    rows, cols = shape
    x = cupy.random.RandomState(checks.seed()).standard_normal(shape, dtype=np.float32)
    mean, var = cupy.empty(cols, np.float32), cupy.empty(cols, np.float32)
    src, dst = cupy.empty(rows * cols, np.float32), cupy.empty(rows * cols, np.float32)
    red = reduce()
    checks.perf_ratio(f"column_mean_var {rows} x {cols}", lambda: red.column_mean_var(x, mean, var),
                      lambda: cupy.copyto(dst, src), 4 * rows * cols, "phase4.column_mean_var", record_property,
                      reference_name="cupy.copyto (bytes read + written)", reference_nbytes=8 * rows * cols)


# ---------------------------------------------------------------- results written by your kernels


@pytest.mark.parametrize("launcher", ["sum-atomic", "sum-shared", "sum-warp", "max", "column_mean_var"])
@pytest.mark.hint("compute the result with your kernel, on the device: no NumPy/CuPy result copied in after the launch")
def test_results_come_from_your_kernels(launcher):
    x = backend.asarray(small_integers(70_001, "host-writes"))
    out = checks.poison(1)
    if launcher.startswith("sum"):
        variant = launcher.split("-")[1]
        checks.assert_computed_on_device(f"reduce.sum(variant={variant!r})", lambda: reduce().sum(x, out, variant),
                                         inputs=(x,), outputs=(out,), rtol=1e-6)
    elif launcher == "max":
        checks.assert_computed_on_device("reduce.max", lambda: reduce().max(x, out), inputs=(x,), outputs=(out,))
    else:
        m = backend.asarray(small_integers(30_001 * 5, "host-writes-m").reshape(30_001, 5))
        mean, var = checks.poison(5), checks.poison(5)
        checks.assert_computed_on_device("reduce.column_mean_var", lambda: reduce().column_mean_var(m, mean, var),
                                         inputs=(m,), outputs=(mean, var), rtol=1e-5)
