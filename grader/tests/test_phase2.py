"""Graded tests of Phase 2 (first kernels and naive matmul): elementwise.cu/.py, transpose.cu/.py,
matmul.cu/.py.

Run by `grader check phase2`, on the active device (cuda or emu), with fresh random inputs (seed
printed in the report), odd and ragged sizes, empty and size-1 arrays, outputs poisoned with NaN before
every launch, and padding after the outputs that must stay untouched. Every expected value comes from
NumPy in float64.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

import minitorch
from grader import checks
from grader.checks import ODD_SIZES, GradeError, launch_checked
from grader.checks import run_without_host_transfers as on_device
from minitorch import backend, kernels

BINARY = ("add", "mul")
UNARY = ("scalar_mul", "relu")
ELEMENTWISE = BINARY + UNARY
TILE, BLOCK_ROWS = 32, 8  # the transposes: one TILE x TILE tile a block of TILE x BLOCK_ROWS threads (the lab's contract)
TRANSPOSES = ("transpose_naive", "transpose_tiled")
EPS32 = float(np.finfo(np.float32).eps)  # 2**-23

TRANSPOSE_SHAPES = [(1, 1), (1, 97), (97, 1), (32, 32), (31, 33), (33, 65), (65, 33), (64, 96), (257, 130)]
MATMUL_SHAPES = [(1, 1, 1), (1, 7, 1), (7, 1, 5), (16, 16, 16), (17, 16, 15), (33, 17, 65), (65, 33, 17),
                 (1, 64, 129), (129, 64, 1), (128, 64, 128), (9, 2049, 8)]  # (M, K, N)


def elementwise():
    return kernels.load_module("elementwise.py")


def transpose_module():
    return kernels.load_module("transpose.py")


def matmul_module():
    return kernels.load_module("matmul.py")


def on_kernel(file: str, function: str, *values: Any) -> Any:
    """A pytest.param that names the kernel it launches (reported when the test crashes or hangs)."""
    return pytest.param(*values, marks=pytest.mark.kernel(file, function), id="-".join(map(str, values)))




def check_padding(host: np.ndarray, n: int, what: str, hint: str) -> None:
    """The elements after the first n of a padded buffer were poisoned with NaN and must still be NaN."""
    written = np.flatnonzero(~np.isnan(host[n:]))
    if written.size:
        raise GradeError(f"{what} wrote past the end of its output: out-of-bounds write at index {n + written[0]} "
                         f"({written.size} elements past the {n} of the output were written; {hint})")



# ---------------------------------------------------------------- elementwise


def elementwise_inputs(op: str, shape: int | tuple[int, ...], *salt: object) -> list[np.ndarray]:
    """Random float32 inputs; relu's include zeros, -0.0 and tiny negatives."""
    r = checks.rng(op, shape, *salt)
    inputs = [(r.standard_normal(shape) * 10).astype(np.float32) for _ in range(2 if op in BINARY else 1)]
    if op == "relu" and inputs[0].size:
        flat = inputs[0].reshape(-1)
        specials = np.array([0.0, -0.0, -1e-30, 1e-30, -1e-45, -3e38], dtype=np.float32)
        flat[r.integers(0, flat.size, size=min(flat.size, specials.size))] = specials[:min(flat.size, specials.size)]
    return inputs


def elementwise_expected(op: str, inputs: list[np.ndarray], s: float) -> np.ndarray:
    x = [v.astype(np.float64) for v in inputs]
    return {"add": lambda: x[0] + x[1], "mul": lambda: x[0] * x[1], "scalar_mul": lambda: s * x[0],
            "relu": lambda: np.maximum(x[0], 0.0)}[op]()


def random_scalar(*salt: object) -> float:
    """A float32-representable scalar, so that s * a[i] is the float32 rounding of an exact product."""
    return float(np.float32(checks.rng("scalar", *salt).uniform(-4, 4)))


def run_elementwise(op: str, device_inputs: list[Any], out: Any, s: float) -> None:
    fn = getattr(elementwise(), op)
    if op == "scalar_mul":
        fn(device_inputs[0], s, out)
    else:
        fn(*device_inputs, out)


def check_elementwise(op: str, out: Any, inputs: list[np.ndarray], s: float, what: str) -> None:
    got = checks.to_host(out)
    if op == "relu":
        negative = np.flatnonzero(got.reshape(-1) < 0)
        if negative.size:
            i = int(negative[0])
            raise GradeError(f"{what}: {negative.size} outputs are negative, e.g. index {i}: relu({float(inputs[0].reshape(-1)[i])!r}) "
                             f"gave {float(got.reshape(-1)[i])!r}; relu must turn every negative value into 0")
    # float32 + and * are correctly rounded: within 2**-24 relative of the exact float64 result
    checks.assert_close(got, elementwise_expected(op, inputs, s), rtol=1e-6, what=what)


def elementwise_kernel_args(op: str, device_inputs: list[Any], out: Any, n: int, s: float) -> tuple:
    if op == "scalar_mul":
        return (device_inputs[0], np.float32(s), out, np.int64(n))
    return (*device_inputs, out, np.int64(n))


@pytest.mark.parametrize("op, n", [on_kernel("elementwise.cu", op, op, n) for op in ELEMENTWISE
                                   for n in (0, *ODD_SIZES)])
@pytest.mark.hint("out[i] = op(a[i], ...) for every i in [0, n): nothing more, nothing less")
def test_elementwise_values(op, n):
    inputs, s = elementwise_inputs(op, n), random_scalar(op, n)
    device_inputs, out = [backend.asarray(v) for v in inputs], checks.poison(n)
    checks.reset_launches()
    on_device(f"elementwise.{op}(n={n})", lambda: run_elementwise(op, device_inputs, out, s))
    if n:
        checks.require_launch("elementwise.cu", op)
    check_elementwise(op, out, inputs, s, f"elementwise.{op} with n={n}")
    for name, dev, host in zip("ab", device_inputs, inputs, strict=False):
        checks.assert_bitwise_equal(dev, host, what=f"input {name} after elementwise.{op} (must not change)")


@pytest.mark.parametrize("op, shape", [on_kernel("elementwise.cu", op, op, shape)
                                       for op in ELEMENTWISE for shape in [(), (3, 5), (2, 3, 5, 7), (4, 0)]])
@pytest.mark.hint("an elementwise op works on out.size elements, whatever the shape")
def test_elementwise_any_shape(op, shape):
    inputs, s = elementwise_inputs(op, shape, "shape"), random_scalar(op, shape)
    device_inputs, out = [backend.asarray(v) for v in inputs], checks.poison(shape)
    on_device(f"elementwise.{op}(shape={shape})", lambda: run_elementwise(op, device_inputs, out, s))
    check_elementwise(op, out, inputs, s, f"elementwise.{op} on shape {shape}")


@pytest.mark.parametrize("op", [on_kernel("elementwise.cu", op, op) for op in ELEMENTWISE])
@pytest.mark.hint("use a grid-stride loop: for (i = global index; i < n; i += gridDim.x * blockDim.x)")
def test_elementwise_kernel_small_grid_covers_all(op):
    n = 10_007
    inputs, s = elementwise_inputs(op, n, "grid"), random_scalar(op, "grid")
    device_inputs, out = [backend.asarray(v) for v in inputs], checks.poison(n)
    kernel = kernels.load_kernel("elementwise.cu", op)
    launch_checked(f"{op} with grid 3 x block 64",
                   lambda: kernel((3,), (64,), elementwise_kernel_args(op, device_inputs, out, n, s)))
    with checks.grid_stride_advice(out, 3, 64):
        check_elementwise(op, out, inputs, s, f"{op} kernel launched with grid 3 x block 64 for n={n}")


@pytest.mark.parametrize("op", [on_kernel("elementwise.cu", op, op) for op in ELEMENTWISE])
@pytest.mark.hint("past 16,384 blocks the launcher caps the grid: each thread must then loop over several elements")
def test_elementwise_launcher_past_the_grid_cap(op):
    n = checks.GRID_CAP_ELEMENTS
    inputs, s = elementwise_inputs(op, n, "cap"), random_scalar(op, "cap")
    device_inputs, out = [backend.asarray(v) for v in inputs], checks.poison(n)
    on_device(f"elementwise.{op}(n={n})", lambda: run_elementwise(op, device_inputs, out, s))
    check_elementwise(op, out, inputs, s, f"elementwise.{op} with n={n}, past the launcher's grid cap")


@pytest.mark.parametrize("op, n", [on_kernel("elementwise.cu", op, op, n) for op in ELEMENTWISE
                                   for n in (1, 31, 1000, 4099)])
@pytest.mark.hint("check `i < n` before reading or writing: the last block has threads past the end")
def test_elementwise_kernel_no_write_past_n(op, n):
    pad, threads = 1024, 256
    blocks = (n + pad) // threads  # more threads than n, none past the padded buffer
    inputs, s = elementwise_inputs(op, n, "bounds"), random_scalar(op, "bounds")
    device_inputs = [backend.asarray(v) for v in inputs]  # exactly n: a read past n faults on the emulator
    kernel = kernels.load_kernel("elementwise.cu", op)
    padded = checks.poison(n + pad)
    launch_checked(f"{op} n={n} (grid {blocks} x block {threads})",
                   lambda: kernel((blocks,), (threads,), elementwise_kernel_args(op, device_inputs, padded, n, s)))
    exact = checks.poison(n)  # the emulator stops any access past the end of an array at once, naming the line
    launch_checked(f"{op} n={n} into arrays of exactly n elements",
                   lambda: kernel((blocks,), (threads,), elementwise_kernel_args(op, device_inputs, exact, n, s)))
    host = checks.to_host(padded)
    check_padding(host, n, f"{op} with n={n}", "the bounds check `i < n` is missing?")
    check_elementwise(op, host[:n], inputs, s, f"{op} n={n}")


@pytest.mark.parametrize("op", ELEMENTWISE)
@pytest.mark.hint("keep the argument checks of elementwise.py: they run before any launch")
def test_elementwise_rejects_bad_arguments(op):
    ew = elementwise()
    fn = getattr(ew, op)
    good, wrong = backend.asarray(np.ones(5, np.float32)), backend.asarray(np.ones(4, np.float32))
    f64 = backend.asarray(np.ones(5, np.float64))
    host = np.ones(5, np.float32)

    def call(a, out, b=None):
        return (lambda: fn(a, 2.0, out)) if op == "scalar_mul" else \
            (lambda: fn(a, out)) if op == "relu" else (lambda: fn(a, b if b is not None else good, out))

    checks.expect_error(f"{op} with out of shape (4,) for inputs of shape (5,)", call(good, wrong), ValueError,
                     "(4,)", "(5,)")
    checks.expect_error(f"{op} with a float64 input", call(f64, backend.empty(5)), TypeError, "float64", "float32")
    checks.expect_error(f"{op} with a NumPy (host) input", call(host, backend.empty(5)), TypeError, "numpy")
    if op in BINARY:
        checks.expect_error(f"{op} with b of shape (4,) and a of shape (5,)", call(good, backend.empty(5), wrong),
                         ValueError, "(4,)", "(5,)")


# ---------------------------------------------------------------- transpose


def random_matrix(shape: tuple[int, ...], *salt: object) -> np.ndarray:
    m = (checks.rng("matrix", shape, *salt).standard_normal(shape) * 100).astype(np.float32)
    flat = m.reshape(-1)
    if flat.size >= 3:  # bits that must survive the move: -0.0 and infinities
        flat[[0, flat.size // 2, flat.size - 1]] = [-0.0, np.inf, -np.inf]
    return m


def transpose_grid(rows: int, cols: int) -> tuple[int, int]:
    return ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE)


@pytest.mark.parametrize("kernel, shape", [on_kernel("transpose.cu", k, k, s)
                                           for k in TRANSPOSES for s in TRANSPOSE_SHAPES])
@pytest.mark.hint("out[c][r] = a[r][c] for every element; blocks at the right and bottom edges hang over: "
                  "check the bounds on the read and on the write, each against its own matrix")
def test_transpose_values(kernel, shape):
    host = random_matrix(shape)
    a, out = backend.asarray(host), checks.poison(shape[::-1])
    with checks.expect_launch("transpose.cu", kernel):
        on_device(f"transpose {shape} (tiled={kernel == 'transpose_tiled'})",
                  partial(transpose_module().transpose, a, out, tiled=kernel == "transpose_tiled"))
    checks.assert_bitwise_equal(out, np.ascontiguousarray(host.T), what=f"{kernel} of a {shape[0]} x {shape[1]} matrix")
    checks.assert_bitwise_equal(a, host, what=f"the input of {kernel} (must not change)")


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.hint("launch blocks of TILE x BLOCK_ROWS = 32 x 8 threads, the shape the kernels are written for "
                  "(Exercise 4): with 32 x 32, four threads write every element of the tile")
def test_transpose_launches_32_by_8_blocks(tiled):
    a, out = backend.asarray(random_matrix((70, 45), "blocks")), backend.empty((45, 70))
    with kernels.recording() as launches:
        on_device("transpose (70, 45)", partial(transpose_module().transpose, a, out, tiled=tiled))
    blocks = {launch.block for launch in launches if launch.kernel.filename == "transpose.cu"}
    if blocks != {(TILE, BLOCK_ROWS)}:
        raise GradeError(f"transpose(tiled={tiled}) launched blocks of {sorted(blocks)} threads; expected "
                         f"({TILE}, {BLOCK_ROWS}): TILE x BLOCK_ROWS, each thread handling four rows of its tile")


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)], ids=str)
@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.hint("an empty matrix needs no launch: a grid dimension of 0 is an invalid launch configuration")
def test_transpose_empty(shape, tiled):
    out = backend.empty(shape[::-1])
    transpose_module().transpose(backend.empty(shape), out, tiled=tiled)
    if tuple(out.shape) != shape[::-1]:
        raise GradeError(f"transpose of an empty {shape} matrix: out has shape {out.shape}, expected {shape[::-1]}")


@pytest.mark.parametrize("kernel, shape", [on_kernel("transpose.cu", k, k, s) for k in TRANSPOSES
                                           for s in [(33, 65), (65, 33), (1, 100), (100, 1), (45, 45)]])
@pytest.mark.hint("the kernel is launched with 32 x 8 blocks on grid (ceil(cols / 32), ceil(rows / 32)): x runs "
                  "along the columns of the input; no thread may write outside the cols x rows output")
def test_transpose_kernel_no_write_past_end(kernel, shape):
    rows, cols = shape
    host = random_matrix(shape, "bounds")
    a = backend.asarray(host)
    fn = kernels.load_kernel("transpose.cu", kernel)
    grid, pad = transpose_grid(rows, cols), 2 * TILE * TILE
    padded = checks.poison(rows * cols + pad)
    launch_checked(f"{kernel} {rows} x {cols} (grid {grid} x block ({TILE}, {BLOCK_ROWS}))",
                   lambda: fn(grid, (TILE, BLOCK_ROWS), (a, padded, np.int32(rows), np.int32(cols))))
    exact = checks.poison((cols, rows))  # the emulator stops a write past its end at once, naming the line
    launch_checked(f"{kernel} {rows} x {cols} into an output of exactly {cols} x {rows}",
                   lambda: fn(grid, (TILE, BLOCK_ROWS), (a, exact, np.int32(rows), np.int32(cols))))
    got = checks.to_host(padded)
    check_padding(got, rows * cols, f"{kernel} of a {rows} x {cols} matrix",
                  "check the bounds of the write against out, which is cols x rows")
    checks.assert_bitwise_equal(got[:rows * cols].reshape(cols, rows), np.ascontiguousarray(host.T),
                                what=f"{kernel} of a {rows} x {cols} matrix launched on grid {grid}")


@pytest.mark.kernel("transpose.cu", "transpose_tiled")
@pytest.mark.hint("__syncthreads() between writing the tile and reading it: a thread reads elements other threads wrote")
def test_transpose_tiled_does_not_depend_on_thread_order():
    host = random_matrix((70, 45), "order")
    fn = kernels.load_kernel("transpose.cu", "transpose_tiled")

    def run():
        out = checks.poison((45, 70))
        fn(transpose_grid(70, 45), (TILE, BLOCK_ROWS), (backend.asarray(host), out, np.int32(70), np.int32(45)))
        return out

    if minitorch.get_device() == "emu":
        from minitorch import emu

        try:
            result = emu.fuzz_schedules(run)  # forward, reverse and random orders of threads and blocks
        except emu.ScheduleMismatch as err:
            raise GradeError(f"transpose_tiled: {err}") from None
    else:
        result = checks.to_host(run())
    checks.assert_bitwise_equal(result, np.ascontiguousarray(host.T), what="transpose_tiled of a 70 x 45 matrix")


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.hint("keep the argument checks of transpose.py: they run before any launch")
def test_transpose_rejects_bad_arguments(tiled):
    tr = transpose_module()
    a = backend.asarray(np.ones((3, 5), np.float32))
    checks.expect_error("transpose of (3, 5) into (3, 5)", lambda: tr.transpose(a, backend.empty((3, 5)), tiled=tiled),
                     ValueError, "(3, 5)", "(5, 3)")
    checks.expect_error("transpose of a 1-D array", lambda: tr.transpose(backend.empty(15), backend.empty(15), tiled=tiled),
                     ValueError, "(15,)")
    checks.expect_error("transpose of float64", lambda: tr.transpose(
        backend.asarray(np.ones((3, 5))), backend.empty((5, 3)), tiled=tiled), TypeError, "float64", "float32")
    checks.expect_error("transpose of a NumPy array", lambda: tr.transpose(
        np.ones((3, 5), np.float32), backend.empty((5, 3)), tiled=tiled), TypeError, "numpy")


# ---------------------------------------------------------------- matmul


def matmul_inputs(m: int, k: int, n: int, *salt: object) -> tuple[np.ndarray, np.ndarray]:
    r = checks.rng("matmul", m, k, n, *salt)
    return r.uniform(-1, 1, (m, k)).astype(np.float32), r.uniform(-1, 1, (k, n)).astype(np.float32)


def matmul_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|C - A·B| <= K·eps·(|A|·|B|): the worst-case rounding error of a float32 dot product of length K,
    whatever the order of the sum (float64 reference)."""
    k = a.shape[1]
    return k * EPS32 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


def _matmul_diagnosis(got: np.ndarray, a: np.ndarray, b: np.ndarray, bound: np.ndarray) -> str:
    """Name a classic indexing mistake when the result matches it."""
    (m, k), n = a.shape, b.shape[1]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if np.isnan(got).any():
        return (f"{int(np.isnan(got).sum())} elements of C were never written (still NaN): does the grid cover "
                f"all of C, with x along the N columns and y along the M rows?")
    candidates = {
        "C written column-major (C[col * M + row]) instead of C[row * N + col]":
            (a64 @ b64).T.reshape(m, n),
        "A read as if it were column-major (A[k * M + row]) instead of A[row * K + k]":
            a.reshape(-1).reshape(k, m).T.astype(np.float64) @ b64,
        "B read as if it were column-major (B[col * K + k]) instead of B[k * N + col]":
            a64 @ b.reshape(-1).reshape(n, k).T.astype(np.float64),
    }
    for mistake, value in candidates.items():
        if np.all(np.abs(got - value) <= bound + 1e-30):
            return f"the result is that of {mistake}"
    return ""


def assert_matmul_close(got: Any, a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Compare with A·B in float64, each element within the rounding bound of a length-K float32 dot product."""
    got_h = checks.to_host(got).astype(np.float64)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    if got_h.shape != expected.shape:
        raise GradeError(f"{what}: shape {got_h.shape}, expected {expected.shape}")
    bound = matmul_bound(a, b)
    err = np.abs(got_h - expected)
    bad = ~(err <= bound)  # NaN is bad
    if not bad.any():
        return
    r, c = (int(i) for i in np.argwhere(bad)[0])
    lines = [f"{what}: {int(bad.sum())} of {expected.size} values differ from A·B (float64) by more than "
             f"K·eps·(|A|·|B|), the float32 rounding bound for K = {a.shape[1]}",
             f"  first bad element C[{r}][{c}]: expected {float(expected[r, c])!r}, got {float(got_h[r, c])!r} "
             f"(allowed error {bound[r, c]:.3g})"]
    finite = bad & np.isfinite(got_h)
    if finite.any():
        lines.append(f"  max abs error {float(err[finite].max()):.3g}")
    if diagnosis := _matmul_diagnosis(got_h, a, b, bound):
        lines.append(f"  {diagnosis}")
    raise GradeError("\n".join(lines))


MATMUL = pytest.mark.kernel("matmul.cu", "matmul_naive")


@MATMUL
@pytest.mark.parametrize("m, k, n", MATMUL_SHAPES, ids=lambda v: str(v))
@pytest.mark.hint("C[row][col] = sum over k of A[row * K + k] * B[k * N + col]; x -> column, y -> row; "
                  "threads outside C do nothing")
def test_matmul_values(m, k, n):
    a_host, b_host = matmul_inputs(m, k, n)
    a, b, out = backend.asarray(a_host), backend.asarray(b_host), checks.poison((m, n))
    with checks.expect_launch("matmul.cu", "matmul_naive"):
        on_device(f"matmul.matmul {m}x{k} @ {k}x{n}", partial(matmul_module().matmul, a, b, out))
    assert_matmul_close(out, a_host, b_host, f"matmul of ({m} x {k}) @ ({k} x {n})")
    checks.assert_bitwise_equal(a, a_host, what="A after matmul (must not change)")
    checks.assert_bitwise_equal(b, b_host, what="B after matmul (must not change)")


@MATMUL
@pytest.mark.parametrize("m, k, n", [(5, 0, 7), (1, 0, 1)], ids=str)
@pytest.mark.hint("with K = 0, C is a sum of no products: every element must be written as 0")
def test_matmul_inner_dimension_zero(m, k, n):
    out = checks.poison((m, n))
    on_device(f"matmul ({m} x 0) @ (0 x {n})",
              partial(matmul_module().matmul, backend.empty((m, k)), backend.empty((k, n)), out))
    checks.assert_close(out, np.zeros((m, n)), rtol=0, what=f"matmul of ({m} x 0) @ (0 x {n})")


@pytest.mark.parametrize("m, k, n", [(0, 4, 3), (3, 4, 0), (0, 0, 0)], ids=str)
@pytest.mark.hint("an empty C needs no launch: a grid dimension of 0 is an invalid launch configuration")
def test_matmul_empty_output(m, k, n):
    out = backend.empty((m, n))
    matmul_module().matmul(backend.empty((m, k)), backend.empty((k, n)), out)
    if tuple(out.shape) != (m, n):
        raise GradeError(f"matmul with an empty result: out has shape {out.shape}, expected {(m, n)}")


@MATMUL
@pytest.mark.parametrize("block", [(16, 16), (32, 8), (8, 32), (1, 1), (7, 3)], ids=str)
@pytest.mark.hint("the kernel must work for any block shape (use blockDim, not 16), with x -> column (N) and "
                  "y -> row (M), and write nothing outside the M x N output")
def test_matmul_kernel_any_block_no_write_past_end(block):
    m, k, n = 33, 17, 65
    a_host, b_host = matmul_inputs(m, k, n, "block")
    a, b = backend.asarray(a_host), backend.asarray(b_host)
    fn = kernels.load_kernel("matmul.cu", "matmul_naive")
    grid, pad = ((n + block[0] - 1) // block[0], (m + block[1] - 1) // block[1]), 4 * 32 * 32
    padded = checks.poison(m * n + pad)
    args = (np.int32(m), np.int32(n), np.int32(k))
    launch_checked(f"matmul_naive {m}x{k} @ {k}x{n} on grid {grid} x block {block}",
                   lambda: fn(grid, block, (a, b, padded, *args)))
    exact = checks.poison((m, n))  # the emulator stops a write past its end at once, naming the line
    launch_checked(f"matmul_naive into an output of exactly {m} x {n}", lambda: fn(grid, block, (a, b, exact, *args)))
    got = checks.to_host(padded)
    check_padding(got, m * n, f"matmul_naive ({m} x {n} output, block {block})", "check row < M and col < N")
    assert_matmul_close(got[:m * n].reshape(m, n), a_host, b_host,
                        f"matmul_naive ({m} x {k}) @ ({k} x {n}) launched on grid {grid} x block {block}")


@pytest.mark.hint("matmul.py must check that the shapes fit, and name them in the error, before launching")
def test_matmul_rejects_bad_arguments():
    mm = matmul_module()
    a, b = backend.asarray(np.ones((3, 4), np.float32)), backend.asarray(np.ones((4, 2), np.float32))
    checks.expect_error("matmul (3, 4) @ (5, 2)", lambda: mm.matmul(a, backend.empty((5, 2)), backend.empty((3, 2))),
                     ValueError, "(3, 4)", "(5, 2)")
    checks.expect_error("matmul (3, 4) @ (4, 2) into (2, 3)", lambda: mm.matmul(a, b, backend.empty((2, 3))),
                     ValueError, "(2, 3)", "(3, 2)")
    checks.expect_error("matmul with a 1-D b", lambda: mm.matmul(a, backend.empty(4), backend.empty((3, 1))),
                     ValueError, "(4,)")
    checks.expect_error("matmul with float64 a", lambda: mm.matmul(
        backend.asarray(np.ones((3, 4))), b, backend.empty((3, 2))), TypeError, "float64", "float32")
    checks.expect_error("matmul with a NumPy b", lambda: mm.matmul(
        a, np.ones((4, 2), np.float32), backend.empty((3, 2))), TypeError, "numpy")


# ---------------------------------------------------------------- performance (GPU only)

PERF_N = checks.PERF_BYTES // 4  # 64 Mi floats: 256 MiB an array
PERF_SIDE = 8192                 # 8192 x 8192 floats: 256 MiB
MATMUL_PERF_SIZE = 1024


def _gpu():
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    return cupy


@pytest.mark.perf
@pytest.mark.parametrize("op", [on_kernel("elementwise.cu", op, op) for op in ELEMENTWISE])
@pytest.mark.hint("a grid-stride loop over enough blocks to fill the GPU, one load per input and one store")
def test_perf_elementwise_bandwidth(op, record_property):
    cupy = _gpu()
    a, b, out = (cupy.random.standard_normal(PERF_N, dtype=np.float32) for _ in range(3))
    ew = elementwise()
    learner = {"add": lambda: ew.add(a, b, out), "mul": lambda: ew.mul(a, b, out),
               "scalar_mul": lambda: ew.scalar_mul(a, 1.5, out), "relu": lambda: ew.relu(a, out)}[op]
    moved = (12 if op in BINARY else 8) * PERF_N  # bytes read + written
    checks.perf_ratio(f"{op} bandwidth", learner, lambda: cupy.copyto(out, a), moved, f"phase2.{op}",
                      record_property, reference_name="cupy.copyto (bytes read + written)", reference_nbytes=8 * PERF_N)


def _transpose_perf(kernel: str, record_property) -> None:
    cupy = _gpu()
    a = cupy.random.standard_normal((PERF_SIDE, PERF_SIDE), dtype=np.float32)
    out = cupy.empty_like(a)
    tr = transpose_module()
    with checks.expect_launch("transpose.cu", kernel):
        tr.transpose(a, out, tiled=kernel == "transpose_tiled")
    if not bool(cupy.array_equal(out, a.T)):
        raise GradeError(f"{kernel}: the {PERF_SIDE} x {PERF_SIDE} transpose is wrong")
    flat_src, flat_dst = a.reshape(-1), out.reshape(-1)
    checks.perf_ratio(f"{kernel} bandwidth", lambda: tr.transpose(a, out, tiled=kernel == "transpose_tiled"),
                      lambda: cupy.copyto(flat_dst, flat_src), 8 * PERF_SIDE * PERF_SIDE, f"phase2.{kernel}",
                      record_property, reference_name="cupy.copyto (bytes read + written)")


@pytest.mark.perf
@pytest.mark.kernel("transpose.cu", "transpose_tiled")
@pytest.mark.hint("stage a 32 x 32 tile in shared memory so that both the reads and the writes of a warp are "
                  "consecutive; pad it to [32][33] so that reading a column of the tile has no bank conflicts")
def test_perf_transpose_tiled_bandwidth(record_property):
    _transpose_perf("transpose_tiled", record_property)


@pytest.mark.perf
@pytest.mark.kernel("transpose.cu", "transpose_naive")
@pytest.mark.hint("recorded for comparison with the tiled transpose (threshold 0 in grader/thresholds.toml)")
def test_perf_transpose_naive_bandwidth(record_property):
    _transpose_perf("transpose_naive", record_property)


@pytest.mark.perf
@MATMUL
@pytest.mark.hint("x -> column, so that the 32 threads of a warp read 32 consecutive elements of a row of B")
def test_perf_matmul_naive_vs_cublas(record_property):
    cupy = _gpu()
    size = MATMUL_PERF_SIZE
    a = cupy.random.uniform(-1, 1, (size, size), dtype=np.float32)
    b = cupy.random.uniform(-1, 1, (size, size), dtype=np.float32)
    out, ref = cupy.empty((size, size), np.float32), cupy.empty((size, size), np.float32)
    mm = matmul_module()
    with checks.expect_launch("matmul.cu", "matmul_naive"):
        mm.matmul(a, b, out)
    cupy.matmul(a, b, out=ref)
    if float(cupy.abs(out - ref).max()) > 1e-2:
        raise GradeError(f"matmul_naive: the {size} x {size} product differs from cupy.matmul")
    checks.perf_ratio(f"matmul_naive {size}^3", lambda: mm.matmul(a, b, out), lambda: cupy.matmul(a, b, out=ref),
                      2 * size**3, "phase2.matmul_naive", record_property, unit="GFLOP/s",
                      reference_name="cupy.matmul (cuBLAS)")


# ---------------------------------------------------------------- results written by your kernels


@pytest.mark.parametrize("launcher", [*ELEMENTWISE, "transpose", "matmul"])
@pytest.mark.hint("compute the result with your kernel, on the device: no NumPy/CuPy result copied in after the launch")
def test_results_come_from_your_kernels(launcher):
    if launcher in ELEMENTWISE:
        inputs, s = elementwise_inputs(launcher, 4099, "host-writes"), random_scalar(launcher, "host-writes")
        device_inputs, out = [backend.asarray(v) for v in inputs], checks.poison(4099)
        call = lambda: run_elementwise(launcher, device_inputs, out, s)  # noqa: E731
    elif launcher == "transpose":
        device_inputs, out = [backend.asarray(random_matrix((37, 70), "host-writes"))], checks.poison((70, 37))
        call = partial(transpose_module().transpose, device_inputs[0], out)
    else:
        device_inputs = [backend.asarray(random_matrix(s, "host-writes")) for s in ((33, 17), (17, 29))]
        out = checks.poison((33, 29))
        call = partial(matmul_module().matmul, *device_inputs, out)
    checks.assert_computed_on_device(launcher, call, inputs=tuple(device_inputs), outputs=(out,), rtol=1e-4)
