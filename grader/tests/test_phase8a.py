"""Graded tests of Phase 8a, tensor cores: convert.cu / convert.py and hgemm.cu / hgemm.py.

Run by `grader check phase8a`, on the active device (cuda or emu), with fresh random inputs (seed printed in the
report), outputs poisoned before every launch, and checks that the learner's kernels computed the results.

Conversions are compared bit for bit with an independent NumPy reference on every class of float32 bit pattern
(any NaN of the right sign is accepted for a NaN). HGEMM results are compared with the float64 product of the
same 16-bit inputs, within the bound derived in `hgemm_bound`. Performance (GPU only) is a ratio to cuBLAS on
the same dtypes, measured in the same run: `torch.matmul` when PyTorch imports, else `cupy.matmul` for fp16 (CuPy
has no bf16: the bf16 figure is then skipped, with the reason).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from grader import checks
from grader.checks import GradeError, launch_checked
from minitorch import backend, kernels

ON_GPU = backend.get_device() == "cuda"
FORMATS = ("bfloat16", "float16")
STORAGE = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16)}
RUNGS = {"wmma": "hgemm_1_wmma", "wmma_shared": "hgemm_2_wmma_shared", "mma": "hgemm_3_mma",
         "swizzle": "hgemm_4_swizzle", "pipeline": "hgemm_5_pipeline"}
LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]
U32 = 2.0 ** -24  # the unit roundoff of float32 (round to nearest)
U_OUT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}  # the unit roundoff of the 16-bit output
TINY_OUT = {"bfloat16": 2.0 ** -134, "float16": 2.0 ** -25}  # half the spacing of the output's subnormals
# (M, K, N): multiples of no tile (16, 32, 64, 128), K = 1, tall-and-skinny, short-and-wide, a whole tile with
# 16-byte rows (the vectorised path: K and N multiples of 8), a partial one with them, and a long dot product
# (K = 1000: what an fp16 accumulator fails). The emulator runs CUDA C on the CPU: the big ones on a GPU only.
SHAPES = [(1, 1, 1), (17, 1, 33), (70, 40, 9), (33, 24, 130), (300, 16, 5), (5, 16, 300), (128, 32, 128),
          (136, 40, 72), (24, 1000, 40)]
if ON_GPU:
    SHAPES += [(1000, 136, 72), (4099, 40, 8), (8, 40, 3001), (257, 1000, 263), (384, 4096, 512),
               (1023, 1023, 1023)]


def convert_module():
    return kernels.load_module("convert.py")


def hgemm_module():
    return kernels.load_module("hgemm.py")


def rung(variant: str, *extra: Any) -> Any:
    """A pytest.param naming the rung's kernel (reported when the test crashes or hangs)."""
    return pytest.param(variant, *extra, marks=pytest.mark.kernel("hgemm.cu", RUNGS[variant]),
                        id="-".join(str(v) for v in (variant, *extra)))


def launches_of(filename: str, kernel: str) -> int:
    """Launches of `kernel` (its template instantiations included) from `filename` since the last reset."""
    return sum(n for (file, function), n in kernels.launch_counts().items()
               if file == filename and (function == kernel or function.startswith(kernel + "<")))


# ---------------------------------------------------------------- the references


def float_patterns() -> np.ndarray:
    """float32 bit patterns of every class, both signs: every exponent with fractions at, just below and just
    above the rounding ties of fp16 (13 dropped bits) and bf16 (16), odd and even kept parts; fp16's overflow
    boundary (65504, 65520 = the tie that goes to inf), its subnormal range down to 2^-25 (the tie that goes to
    0) and below; float32 subnormals; +-0, +-inf, quiet and signalling NaNs; and random patterns."""
    fractions = [0, 1, 2, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x5000, 0x7FFF, 0x8000, 0x8001, 0xFFFF,
                 0x10000, 0x18000, 0x28000, 0x400000, 0x7FF000, 0x7FFFFF]
    grid = (np.arange(256, dtype=np.uint32)[:, None] << 23) | np.array(fractions, np.uint32)[None, :]
    edges = np.array([0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x477FFFFF,  # 65504 .. 65520 .. 65536
                      0x33000000, 0x33000001, 0x32FFFFFF, 0x33800000, 0x33C00000,  # 2^-25 (a tie: to 0), 2^-24
                      0x387FC000, 0x387FE000, 0x387FF000, 0x387FFFFF,  # up to fp16's smallest normal, 2^-14
                      0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,  # bf16 overflow
                      0x00000001, 0x007FFFFF, 0x00400000,  # float32 subnormals
                      0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x7FA00000], np.uint32)
    rand = checks.rng("float patterns").integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32)
    positive = np.concatenate([grid.ravel(), edges, rand])
    return np.concatenate([positive, positive | np.uint32(0x80000000)])


def half_reference(x: np.ndarray) -> np.ndarray:
    """float32 -> fp16 bits by NumPy's own conversion (round to nearest even, subnormals, overflow to inf)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).view(np.uint16)


def bfloat16_reference(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits decided by value: the nearer of the two bf16 neighbours compared in float64, the
    even one on a tie; one step past the largest finite bf16 is inf. (Not by adding a rounding bias to the bits,
    as a kernel does.) A NaN stays a NaN of its sign; the comparison accepts any NaN of the right sign."""
    bits = x.view(np.uint32).astype(np.uint64)
    down = bits & 0xFFFF0000
    up = down + 0x10000
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = np.abs(x.astype(np.float64))
        low = np.abs(down.astype(np.uint32).view(np.float32).astype(np.float64))
        high = np.abs(up.astype(np.uint32).view(np.float32).astype(np.float64))
        high = np.where(np.isinf(high), 2.0 ** 128, high)
        below, above = magnitude - low, high - magnitude
    pick_up = (above < below) | ((above == below) & ((down >> 16) & 1 == 1))
    out = (np.where(pick_up, up, down) >> 16).astype(np.uint16)
    inf, nan = np.isinf(x), np.isnan(x)
    out[inf] = (bits[inf] >> 16).astype(np.uint16)
    out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)  # its payload may lie in the dropped bits
    return out


def pattern_class(bits32: int) -> str:
    """A float32 pattern's class, in words (for the report of the first wrong conversion)."""
    magnitude, sign = bits32 & 0x7FFFFFFF, "-" if bits32 >> 31 else "+"
    value = float(np.uint32(bits32).view(np.float32))
    if magnitude > 0x7F800000:
        return f"{sign}NaN"
    if magnitude == 0x7F800000:
        return f"{sign}inf"
    if magnitude == 0:
        return f"{sign}0"
    if magnitude < 0x00800000:
        return "a float32 subnormal"
    if magnitude & 0xFFF == 0 and magnitude & 0x1000:
        kind = "a tie of fp16 (13 dropped bits exactly half a step)"
    elif magnitude & 0xFFFF == 0x8000:
        kind = "a tie of bf16 (16 dropped bits exactly half a step)"
    else:
        kind = "a normal float"
    if abs(value) >= 65520:
        kind += ", past fp16's range (>= 65520 rounds to inf)"
    elif abs(value) < 2.0 ** -14:
        kind += ", in fp16's subnormal range (< 2^-14)" if abs(value) >= 2.0 ** -25 else ", below 2^-25 (fp16: 0)"
    return kind


def hgemm_bound(a64: np.ndarray, b64: np.ndarray, dtype: str, out16: bool) -> np.ndarray:
    """The largest error an element of C = A·B may have against the float64 product of the same 16-bit inputs.

    Derivation. Every product a·b of two 16-bit numbers is exact in float32: their significands have 11 (fp16)
    or 8 (bf16) bits, the product at most 22, and float32 keeps 24; the exponents stay in float32's range. So the
    only errors are in the K additions into a float32 accumulator. Whatever the order and grouping the hardware
    uses (WMMA and mma.sync add 16 products at a time, and the tensor cores may truncate rather than round to
    nearest), each addition changes the running sum s by at most 2u|s| with u = 2^-24 (u for rounding to nearest,
    2u for truncation), and every partial sum is bounded by S = sum_k |a_ik||b_kj|. So
    |c - c64| <= K·2u·S + O(K²u²S); the second-order term is below 1% of the first while K·u < 0.005 (K < 80,000),
    hence the bound 2·K·u·S·1.01. (The typical error is far smaller, about sqrt(K)·u·S: the rounding errors of
    random data add like a random walk. An fp16 accumulator, whose u is 2^-11, fails this bound at K = 1000.)

    A 16-bit C is then rounded once, to nearest even: at most u_out = 2^-8 (bf16) or 2^-11 (fp16) of |c|, with
    |c| <= |c64| + the accumulation's bound, plus half the spacing of the format's subnormals near 0.
    """
    k = a64.shape[1]
    magnitude = np.abs(a64) @ np.abs(b64)
    accumulation = 2.0 * max(k, 1) * U32 * magnitude * 1.01
    if not out16:
        return accumulation
    return accumulation + U_OUT[dtype] * (np.abs(a64 @ b64) + accumulation) + TINY_OUT[dtype]


def to_16bit_host(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> the 16-bit format's host array (finite inputs)."""
    return half_reference(x).view(np.float16) if dtype == "float16" else bfloat16_reference(x)


def widen_host(x16: np.ndarray, dtype: str) -> np.ndarray:
    """A 16-bit host array -> float64, exactly."""
    x16 = np.asarray(x16)
    if dtype == "float16":
        return x16.view(np.float16).astype(np.float64)
    return (x16.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# ---------------------------------------------------------------- conversions


# (sign bit, exponent mask, fraction mask) of each format's bit patterns
LAYOUT_BITS = {"float16": (0x8000, 0x7C00, 0x3FF), "bfloat16": (0x8000, 0x7F80, 0x7F),
               "float32": (0x80000000, 0x7F800000, 0x7FFFFF)}


def _compare_conversion(what: str, src_bits: np.ndarray, got: np.ndarray, want: np.ndarray, fmt: str) -> None:
    """Bit-for-bit equality with the reference `want` (patterns of format `fmt`), any NaN of the right sign
    accepted for a NaN; the first difference is named with the class of its input pattern."""
    sign, exponent, fraction = LAYOUT_BITS[fmt]
    got, want = got.astype(np.uint64), want.astype(np.uint64)

    def is_nan(bits: np.ndarray) -> np.ndarray:
        return ((bits & exponent) == exponent) & ((bits & fraction) != 0)

    ok = np.where(is_nan(want), is_nan(got) & ((got & sign) == (want & sign)), got == want)
    if ok.all():
        return
    bad = np.flatnonzero(~ok)
    i, digits = int(bad[0]), 4 if fmt != "float32" else 8
    narrowing = fmt != "float32"  # the inputs were float32 patterns
    source = (f"0x{int(src_bits[i]):08X} ({pattern_class(int(src_bits[i]))})" if narrowing
              else f"0x{int(src_bits[i]):04X}")
    lines = [f"{what}: {bad.size} of {ok.size} patterns differ from the reference",
             f"  first: input {source} gave 0x{int(got[i]):0{digits}X}, expected 0x{int(want[i]):0{digits}X}"
             + (" (or any NaN of this sign)" if is_nan(want[i:i + 1])[0] else "")]
    if narrowing:
        classes: dict[str, int] = {}
        for j in bad[:5000]:
            name = pattern_class(int(src_bits[j]))
            classes[name] = classes.get(name, 0) + 1
        lines.append("  wrong, by class of input: " + "; ".join(f"{n}: {c}" for n, c in sorted(classes.items())))
    raise GradeError("\n".join(lines))


# The launcher converts four elements a thread (the _x4 kernels) when the count is a multiple of 4 and both
# arrays are 16-byte aligned, one a thread otherwise: each test runs both paths and checks which kernel ran
PATHS = {"one": "", "x4": "_x4"}


def sized_for(path: str, values: np.ndarray) -> np.ndarray:
    """`values` with as many of its first elements repeated as make its count a multiple of 4 (path "x4") or not."""
    extra = (-values.size) % 4 if path == "x4" else (1 if values.size % 4 == 0 else 0)
    return np.concatenate([values, values[:extra]])


@pytest.mark.kernel("convert.cu", "float_to_half")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.hint("round to nearest, ties to even, by integer operations on the bits: NaN -> a NaN of the same "
                  "sign (quiet bit set), |x| >= 65520 -> inf (fp16), subnormal results shifted and rounded, "
                  "below half the smallest subnormal -> +-0; the _x4 kernels store element 0 in the low 16 bits")
def test_float32_to_16bit_every_class_of_pattern(dtype, path):
    bits = sized_for(path, float_patterns())
    x = bits.view(np.float32)
    out = checks.poison(x.shape, STORAGE[dtype])
    what = f"to_16bit(x, out, {dtype!r}) of {x.size} elements"
    kernel = ("float_to_half" if dtype == "float16" else "float_to_bfloat16") + PATHS[path]
    checks.reset_launches()
    x_dev = backend.asarray(x)
    checks.run_without_host_transfers(what, lambda: convert_module().to_16bit(x_dev, out, dtype))
    if launches_of("convert.cu", kernel) == 0:
        raise GradeError(f"{what}: no launch of `{kernel}` from convert.cu was recorded")
    got = checks.to_host(out).view(np.uint16)
    want = half_reference(x) if dtype == "float16" else bfloat16_reference(x)
    _compare_conversion(f"{what}, float32 -> {dtype}", bits, got, want, dtype)


@pytest.mark.kernel("convert.cu", "half_to_float")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.hint("widening is exact: rebias the exponent; fp16 subnormals become float32 normals (shift the "
                  "fraction up to its leading 1); exponent all ones: inf or NaN, sign kept; the _x4 kernels read "
                  "element 0 from the low 16 bits")
def test_16bit_to_float32_every_pattern(dtype, path):
    every = sized_for(path, np.arange(65536, dtype=np.uint32).astype(np.uint16))
    x = every.view(np.float16) if dtype == "float16" else every
    out = checks.poison(every.shape)
    what = f"from_16bit(x, out, {dtype!r}) of {x.size} elements"
    kernel = ("half_to_float" if dtype == "float16" else "bfloat16_to_float") + PATHS[path]
    checks.reset_launches()
    x_dev = backend.asarray(x)
    checks.run_without_host_transfers(what, lambda: convert_module().from_16bit(x_dev, out, dtype))
    if launches_of("convert.cu", kernel) == 0:
        raise GradeError(f"{what}: no launch of `{kernel}` from convert.cu was recorded")
    got = checks.to_host(out).view(np.uint32)
    with np.errstate(invalid="ignore"):
        want_f = widen_host(every, dtype).astype(np.float32)
    _compare_conversion(f"{what}, {dtype} -> float32", every, got, want_f.view(np.uint32), "float32")


@pytest.mark.kernel("convert.cu", "float_to_bfloat16")
@pytest.mark.parametrize("n", [1, 7, 1000] + ([(1 << 22) + 3, 1 << 22] if ON_GPU else []), ids=str)
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "misaligned"])
@pytest.mark.hint("a grid-stride loop over all n elements (n / 4 quads in the _x4 kernels), n of any size; "
                  "nothing written past the end; an array that does not start 16-byte aligned goes to the kernels "
                  "of one element a thread")
def test_conversions_at_every_length(n, aligned):
    x = checks.rng("lengths", n).standard_normal(n).astype(np.float32) * 1000
    x_dev = checks.view_at_alignment(backend.zeros((n + 8,), np.float32), n, aligned)
    x_dev.set(x)
    where = "16-byte aligned" if aligned else "not 16-byte aligned"
    for dtype in FORMATS:
        out_buffer = checks.poison((n + 8,), STORAGE[dtype])
        out = checks.view_at_alignment(out_buffer, n, aligned)
        launch_checked(f"to_16bit of {n} elements", partial(convert_module().to_16bit, x_dev, out, dtype))
        want = half_reference(x) if dtype == "float16" else bfloat16_reference(x)
        checks.assert_bitwise_equal(checks.to_host(out).view(np.uint16), want,
                                    what=f"to_16bit(x, out, {dtype!r}) of {n} elements (bits), {where}")
        checks.assert_untouched_around(out_buffer, out, f"to_16bit(x, out, {dtype!r}) of {n} elements, {where}")
        back_buffer = checks.poison((n + 8,))
        back = checks.view_at_alignment(back_buffer, n, aligned)
        launch_checked(f"from_16bit of {n} elements", partial(convert_module().from_16bit, out, back, dtype))
        checks.assert_bitwise_equal(back, widen_host(want, dtype).astype(np.float32),
                                    what=f"from_16bit(x, out, {dtype!r}) of {n} elements, {where}")
        checks.assert_untouched_around(back_buffer, back, f"from_16bit(x, out, {dtype!r}) of {n} elements, {where}")


@pytest.mark.kernel("convert.cu", "float_to_bfloat16_column_sums")
@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 13), (70, 36), (300, 384), (1000, 6)]
                         + ([(16384, 1152)] if ON_GPU else []), ids=str)
@pytest.mark.hint("one pass: each element rounded as to_16bit rounds it, and the float32 sum of every column of x "
                  "(the launcher zeroes sums: the blocks of rows add into it); columns past cols neither read nor "
                  "written; 16-byte loads only where cols is a multiple of 4 and the arrays are aligned")
def test_conversion_with_column_sums(rows, cols):
    x = checks.rng("column sums", rows, cols).standard_normal((rows, cols)).astype(np.float32) * 100
    for dtype in FORMATS:
        for aligned in (True, False) if rows * cols > 1 else (True,):
            x_dev = checks.view_at_alignment(backend.zeros((rows * cols + 8,), np.float32), rows * cols, aligned)
            x_dev.set(x.reshape(-1))
            out_buffer = checks.poison((rows * cols + 8,), STORAGE[dtype])
            out = checks.view_at_alignment(out_buffer, rows * cols, aligned)
            sums = checks.poison((cols,))
            where = "16-byte aligned" if aligned else "not 16-byte aligned"
            what = f"to_16bit_column_sums(x {rows} x {cols}, out, sums, {dtype!r}), {where}"
            launch_checked(what, partial(convert_module().to_16bit_column_sums, x_dev.reshape(rows, cols),
                                         out.reshape(rows, cols), sums, dtype))
            want = half_reference(x) if dtype == "float16" else bfloat16_reference(x)
            checks.assert_bitwise_equal(checks.to_host(out).view(np.uint16).reshape(rows, cols), want,
                                        what=f"{what}: out (bits)")
            checks.assert_untouched_around(out_buffer, out, what)
            # float32 sums of `rows` values: within rows * 2^-24 * sum |x| of the float64 sum (any order)
            exact = x.astype(np.float64).sum(axis=0)
            bound = rows * 2.0 ** -24 * np.abs(x.astype(np.float64)).sum(axis=0) * 1.01 + 1e-30
            got = checks.to_host(sums).astype(np.float64)
            bad = ~(np.abs(got - exact) <= bound)
            if bad.any():
                c = int(np.flatnonzero(bad)[0])
                raise GradeError(f"{what}: {int(bad.sum())} of {cols} column sums are wrong; first column {c}: got "
                                 f"{got[c]!r}, expected {exact[c]!r} (float64; bound {bound[c]:.3g})"
                                 + (" — NaN: was sums zeroed before the blocks added into it?"
                                    if np.isnan(got[c]) else ""))


# a 16-bit value's rounding: half an ulp (bfloat16 2^-8 relative, float16 2^-11), a little more for tanhf's
ROUNDING = {"bfloat16": 2.0 ** -8 * 1.05, "float16": 2.0 ** -11 * 1.5}


@pytest.mark.kernel("convert.cu", "bfloat16_column_sums")
@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 13), (300, 384)] + ([(16384, 1152)] if ON_GPU else []), ids=str)
@pytest.mark.hint("column_sums_16bit (given) widens each 16-bit value with your half_bits_to_float (bfloat16: the "
                  "bits moved up 16) and sums the columns in float32; check from_16bit's tests first")
def test_column_sums_of_16bit_values(rows, cols):
    x = checks.rng("16-bit column sums", rows, cols).standard_normal((rows, cols)).astype(np.float32) * 100
    for dtype in FORMATS:
        bits = half_reference(x) if dtype == "float16" else bfloat16_reference(x)
        values = widen_host(bits, dtype).astype(np.float64)
        x16 = backend.asarray(bits.view(STORAGE[dtype]))
        sums = checks.poison((cols,))
        what = f"column_sums_16bit(x {rows} x {cols}, sums, {dtype!r})"
        launch_checked(what, partial(convert_module().column_sums_16bit, x16, sums, dtype))
        bound = rows * 2.0 ** -24 * np.abs(values).sum(axis=0) * 1.01 + 1e-30
        checks.assert_close(sums, values.sum(axis=0), rtol=0.0, atol=bound, what=what)


@pytest.mark.kernel("convert.cu", "gelu_to_bfloat16")
@pytest.mark.parametrize("n", [1, 1003, 4096] + ([1 << 22] if ON_GPU else []), ids=str)
@pytest.mark.hint("gelu_16bit and gelu_backward_16bit (given) round with your float_bits_to_* and widen with "
                  "half_bits_to_float: check the conversions' tests first")
def test_gelu_in_16_bits(n):
    r = checks.rng("16-bit gelu", n)
    x = (r.standard_normal(n) * 3).astype(np.float32)
    g = r.standard_normal(n).astype(np.float32)
    v = x.astype(np.float64)
    t = np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))
    slope = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * v * v)
    cv = convert_module()
    for dtype in FORMATS:
        out = checks.poison((n,), STORAGE[dtype])
        launch_checked(f"gelu_16bit of {n} elements, {dtype!r}", partial(cv.gelu_16bit, backend.asarray(x), out,
                                                                        dtype))
        got = widen_host(checks.to_host(out).view(np.uint16), dtype).astype(np.float64)
        # the float32 formula loses digits where tanh is near -1 (1 + t cancels): about |x| 2^-24 absolute
        checks.assert_close(got, 0.5 * v * (1 + t), rtol=ROUNDING[dtype], atol=np.abs(v) * 2.0 ** -22 + 2.0 ** -24,
                            what=f"gelu_16bit of {n} elements ({dtype})")
        g_bits = half_reference(g) if dtype == "float16" else bfloat16_reference(g)
        grad_in = checks.poison((n,), STORAGE[dtype])
        launch_checked(f"gelu_backward_16bit of {n} elements, {dtype!r}", partial(
            cv.gelu_backward_16bit, backend.asarray(x), backend.asarray(g_bits.view(STORAGE[dtype])), grad_in,
            dtype))
        got = widen_host(checks.to_host(grad_in).view(np.uint16), dtype).astype(np.float64)
        want = widen_host(g_bits, dtype).astype(np.float64) * slope
        checks.assert_close(got, want, rtol=ROUNDING[dtype],
                            atol=np.abs(widen_host(g_bits, dtype) * v) * 2.0 ** -21 + 2.0 ** -24,
                            what=f"gelu_backward_16bit of {n} elements ({dtype})")


@pytest.mark.hint("convert.py checks its arguments, and names what it expected and what it got, before launching")
def test_column_sums_launcher_rejects_bad_arguments():
    cv = convert_module()
    x = backend.asarray(np.ones((3, 4), np.float32))
    out = backend.empty((3, 4), np.uint16)
    checks.expect_error("to_16bit_column_sums with 3 sums for 4 columns", lambda: cv.to_16bit_column_sums(
        x, out, backend.empty((3,), np.float32), "bfloat16"), ValueError, "(4,)", "(3,)")
    checks.expect_error("to_16bit_column_sums of a 1-D x", lambda: cv.to_16bit_column_sums(
        x.reshape(12), out.reshape(12), backend.empty((12,), np.float32), "bfloat16"), ValueError, "matrix")
    checks.expect_error("to_16bit_column_sums with float64 sums", lambda: cv.to_16bit_column_sums(
        x, out, backend.empty((4,), np.float64), "bfloat16"), TypeError, "float64")


@pytest.mark.hint("convert.py checks its arguments, and names what it expected and what it got, before launching")
def test_conversion_launcher_rejects_bad_arguments():
    cv = convert_module()
    x = backend.asarray(np.ones((3, 4), np.float32))
    checks.expect_error("to_16bit with an unknown format", lambda: cv.to_16bit(x, backend.empty((3, 4), np.uint16),
                                                                               "float8"), ValueError, "float8")
    checks.expect_error("to_16bit into a float16 array for bfloat16",
                        lambda: cv.to_16bit(x, backend.empty((3, 4), np.float16), "bfloat16"), TypeError,
                        "uint16", "float16")
    checks.expect_error("to_16bit into a uint16 array for float16",
                        lambda: cv.to_16bit(x, backend.empty((3, 4), np.uint16), "float16"), TypeError,
                        "float16", "uint16")
    checks.expect_error("to_16bit of a float64 array",
                        lambda: cv.to_16bit(backend.asarray(np.ones((3, 4))), backend.empty((3, 4), np.uint16),
                                            "bfloat16"), TypeError, "float64")
    checks.expect_error("to_16bit into an array of another shape",
                        lambda: cv.to_16bit(x, backend.empty((4, 3), np.uint16), "bfloat16"), ValueError,
                        "(4, 3)", "(3, 4)")
    checks.expect_error("to_16bit of a NumPy array",
                        lambda: cv.to_16bit(np.ones((3, 4), np.float32), backend.empty((3, 4), np.uint16),
                                            "bfloat16"), TypeError, "numpy")
    checks.expect_error("from_16bit into a float16 array",
                        lambda: cv.from_16bit(backend.empty((3, 4), np.uint16), backend.empty((3, 4), np.float16),
                                              "bfloat16"), TypeError, "float32", "float16")


@pytest.mark.kernel("convert.cu", "float_to_bfloat16")
@pytest.mark.hint("the launcher launches your kernels and lets them write the result: nothing computed on the host")
def test_conversions_come_from_your_kernels():
    cv = convert_module()
    x_host = checks.rng("replay convert").standard_normal((33, 17)).astype(np.float32)
    for dtype in FORMATS:
        x, out = backend.asarray(x_host), checks.poison((33, 17), STORAGE[dtype])
        # the kernels get the 16-bit arrays as their bits (uint16): compare those
        checks.assert_computed_on_device(f"to_16bit(x, out, {dtype!r})", partial(cv.to_16bit, x, out, dtype),
                                         inputs=(x,), outputs=(out.view(np.uint16),), rtol=0, atol=0)
        back = checks.poison((33, 17))
        checks.assert_computed_on_device(f"from_16bit(x, out, {dtype!r})", partial(cv.from_16bit, out, back, dtype),
                                         inputs=(out,), outputs=(back,), rtol=0, atol=0)


# ---------------------------------------------------------------- the HGEMM ladder


def operands(m: int, k: int, n: int, dtype: str, ta: bool, tb: bool, *salt: object) -> tuple[np.ndarray, ...]:
    """Host 16-bit A and B as stored (A (M, K) or, with ta, (K, M); B (K, N) or, with tb, (N, K)), and op(A),
    op(B) in float64."""
    r = checks.rng("hgemm", m, k, n, dtype, ta, tb, *salt)
    a16 = to_16bit_host(r.uniform(-1, 1, (m, k)).astype(np.float32), dtype)
    b16 = to_16bit_host(r.uniform(-1, 1, (k, n)).astype(np.float32), dtype)
    a64, b64 = widen_host(a16, dtype), widen_host(b16, dtype)
    stored_a = np.ascontiguousarray(a16.T) if ta else a16
    stored_b = np.ascontiguousarray(b16.T) if tb else b16
    return stored_a, stored_b, a64, b64


def assert_hgemm_close(got_dev: Any, a64: np.ndarray, b64: np.ndarray, dtype: str, out16: bool, what: str) -> None:
    got_raw = checks.to_host(got_dev)
    got = widen_host(got_raw, dtype) if out16 else got_raw.astype(np.float64)
    expected = a64 @ b64
    if got.shape != expected.shape:
        raise GradeError(f"{what}: shape {got.shape}, expected {expected.shape}")
    bound = hgemm_bound(a64, b64, dtype, out16)
    err = np.abs(got - expected)
    bad = ~(err <= bound)  # NaN is bad
    if not bad.any():
        return
    r, c = (int(i) for i in np.argwhere(bad)[0])
    k = a64.shape[1]
    lines = [f"{what}: {int(bad.sum())} of {expected.size} values differ from op(A)·op(B) (float64, of the same "
             f"16-bit inputs) by more than the bound of a float32 accumulation of K = {k} products"
             + (" and one rounding to 16 bits" if out16 else ""),
             f"  first bad element C[{r}][{c}]: expected {float(expected[r, c])!r}, got {float(got[r, c])!r}, "
             f"error {float(err[r, c]):.3g}, bound {float(bound[r, c]):.3g}"]
    finite = np.isfinite(err) & bad
    if finite.any() and float((err[finite] / bound[finite]).max()) < 64 and k >= 256:
        lines.append("  the errors are small but past the bound, and grow with K: is the accumulator float32? (an "
                     "fp16 accumulator rounds every partial sum to 11 bits)")
    unwritten = int(np.isnan(got).sum())
    if unwritten:
        lines.append(f"  {unwritten} elements are NaN: never written (the output was poisoned), or computed from "
                     f"an unwritten or unloaded tile: does the grid cover all of C, and does every edge tile store "
                     f"what lies inside C?")
    rows_bad, cols_bad = np.flatnonzero(bad.any(axis=1)), np.flatnonzero(bad.any(axis=0))
    m, n = expected.shape
    if bad.sum() < bad.size and (rows_bad.min() > 0 or cols_bad.min() > 0):
        lines.append(f"  the wrong values are in rows {rows_bad.min()}..{rows_bad.max()} and columns "
                     f"{cols_bad.min()}..{cols_bad.max()} of a {m} x {n} output: an edge tile? (loads outside A or "
                     f"B read 0, stores outside C are skipped: M, N and K need not be multiples of a tile)")
    raise GradeError("\n".join(lines))


def run_hgemm(variant: str, m: int, k: int, n: int, dtype: str, ta: bool, tb: bool, out16: bool,
              salt: object = "") -> None:
    """hgemm() of fresh 16-bit operands into a poisoned output (on a GPU with a poisoned guard past its end):
    the rung's kernel must run, the result be within the bound, the operands unchanged and nothing written
    past C."""
    stored_a, stored_b, a64, b64 = operands(m, k, n, dtype, ta, tb, variant, salt)
    a, b = backend.asarray(stored_a), backend.asarray(stored_b)
    out_dtype = STORAGE[dtype] if out16 else np.dtype(np.float32)
    guard_n = 64 if ON_GPU else 0  # the emulator faults on a write past an array by itself
    whole = checks.poison((m * n + guard_n,), out_dtype)
    out = whole[: m * n].reshape(m, n) if guard_n else whole.reshape(m, n)
    what = (f"hgemm(variant={variant!r}, dtype={dtype!r}) of op(A) {m} x {k} @ op(B) {k} x {n} into "
            f"{out_dtype}" + (", A stored K x M" if ta else "") + (", B stored N x K" if tb else ""))
    checks.reset_launches()
    checks.run_without_host_transfers(what, lambda: hgemm_module().hgemm(a, b, out, dtype, variant,
                                                                          transpose_a=ta, transpose_b=tb))
    kernel = RUNGS.get(variant)
    if kernel and launches_of("hgemm.cu", kernel) == 0:
        raise GradeError(f"{what}: no launch of `{kernel}` from hgemm.cu was recorded: the result was computed "
                         f"without that kernel")
    if not kernel and not any(launches_of("hgemm.cu", name) for name in RUNGS.values()):
        raise GradeError(f"{what}: no launch of a kernel of hgemm.cu was recorded")
    assert_hgemm_close(out, a64, b64, dtype, out16, what)
    if guard_n:
        tail = checks.to_host(whole)[m * n:]
        # the poison: float32's payload NaN, float16's NaN (NumPy's), bfloat16's bits (uint16) all ones
        untouched = tail == 0xFFFF if out_dtype == np.uint16 else checks.is_poison(tail)
        if not untouched.all():
            raise GradeError(f"{what}: wrote past the end of C (the elements after it changed)")
    checks.assert_bitwise_equal(a, stored_a, what=f"{what}: A after the call (must not change)")
    checks.assert_bitwise_equal(b, stored_b, what=f"{what}: B after the call (must not change)")


@pytest.mark.parametrize("m, k, n", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("variant", [rung(v) for v in RUNGS])
@pytest.mark.hint("every rung must be right at every size, in both formats, with both outputs and all four "
                  "layouts: loads outside A or B read 0, stores outside C are skipped, the grid covers all of C")
def test_rung_values(variant, m, k, n):
    for dtype in FORMATS:
        for out16 in (False, True):
            for ta, tb in LAYOUTS:
                run_hgemm(variant, m, k, n, dtype, ta, tb, out16)


def run_bias(variant: str, m: int, k: int, n: int, dtype: str, tb: bool, out16: bool) -> None:
    """hgemm(..., bias=) of fresh operands: C = op(A)·op(B) + bias (every row), the bias added in float32 before
    C is stored or rounded; the bias and the operands unchanged."""
    stored_a, stored_b, a64, b64 = operands(m, k, n, dtype, False, tb, variant, "bias")
    a, b = backend.asarray(stored_a), backend.asarray(stored_b)
    bias_host = checks.rng("bias", m, k, n, dtype).uniform(-4, 4, n).astype(np.float32)
    bias = backend.asarray(bias_host)
    out = checks.poison((m, n), STORAGE[dtype] if out16 else np.dtype(np.float32))
    what = (f"hgemm(variant={variant!r}, dtype={dtype!r}, bias=) of op(A) {m} x {k} @ op(B) {k} x {n} into "
            f"{'16 bits' if out16 else 'float32'}" + (", B stored N x K" if tb else ""))
    launch_checked(what, partial(hgemm_module().hgemm, a, b, out, dtype, variant, transpose_b=tb, bias=bias))
    got_raw = checks.to_host(out)
    got = widen_host(got_raw, dtype) if out16 else got_raw.astype(np.float64)
    expected = a64 @ b64 + bias_host.astype(np.float64)
    # the product's bound (of a float32 accumulation), one float32 addition of the bias, and the rounding of
    # a 16-bit C (relative to |C|, which the bias changes)
    bound = hgemm_bound(a64, b64, dtype, False) + 2.0 ** -23 * np.abs(expected)
    if out16:
        bound = bound + (2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11) * (np.abs(expected) + bound) + 2.0 ** -24
    bad = ~(np.abs(got - expected) <= bound)
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        no_bias = float((a64 @ b64)[r, c])
        raise GradeError(f"{what}: {int(bad.sum())} of {expected.size} values differ from op(A)·op(B) + bias "
                         f"(float64) by more than the bound; first C[{r}][{c}] = {float(got[r, c])!r}, expected "
                         f"{float(expected[r, c])!r} (without the bias: {no_bias!r}; bias[{c}] = "
                         f"{float(bias_host[c])!r})")
    checks.assert_bitwise_equal(bias, bias_host, what=f"{what}: the bias after the call (must not change)")
    checks.assert_bitwise_equal(a, stored_a, what=f"{what}: A after the call (must not change)")


@pytest.mark.kernel("hgemm.cu", "hgemm_5_pipeline")
@pytest.mark.parametrize("m, k, n", [(70, 40, 9), (129, 33, 65), (300, 64, 136)], ids=str)
@pytest.mark.hint("with has_bias, add bias[c] to the float32 sum of column c before it is stored (or rounded to "
                  "16 bits), in every tile, at every edge; a column past N has no bias to read")
def test_bias_added_as_c_is_stored(m, k, n):
    for dtype in FORMATS:
        for out16 in (False, True):
            for tb in (False, True):
                run_bias("pipeline", m, k, n, dtype, tb, out16)
    run_bias("best", m, k, n, "bfloat16", False, False)


@pytest.mark.hint("hgemm.py checks a bias before launching: a float32 device vector of N values, on rungs 5 "
                  "and 6 (and 'best') only")
def test_bias_launcher_rejects_bad_arguments():
    hg = hgemm_module()
    a, b = backend.asarray(np.zeros((4, 8), np.uint16)), backend.asarray(np.zeros((8, 6), np.uint16))
    out = backend.empty((4, 6))
    good = backend.asarray(np.zeros(6, np.float32))
    checks.expect_error("a bias on rung 1", lambda: hg.hgemm(a, b, out, "bfloat16", "wmma", bias=good), ValueError,
                        "wmma")
    checks.expect_error("a bias of 5 values for N = 6", lambda: hg.hgemm(
        a, b, out, "bfloat16", "pipeline", bias=backend.asarray(np.zeros(5, np.float32))), ValueError, "(6,)")
    checks.expect_error("a float64 bias", lambda: hg.hgemm(
        a, b, out, "bfloat16", "pipeline", bias=backend.asarray(np.zeros(6))), ValueError, "float32")
    checks.expect_error("a NumPy bias", lambda: hg.hgemm(a, b, out, "bfloat16", "pipeline",
                                                         bias=np.zeros(6, np.float32)), TypeError, "numpy")


@pytest.mark.kernel("hgemm.cu", "hgemm_5_pipeline")
@pytest.mark.parametrize("m, k, n", [(40, 70, 24), (129, 33, 65)], ids=str)
@pytest.mark.hint("variant='best' runs your fastest rung, right at every size")
def test_best_values(m, k, n):
    for dtype in FORMATS:
        for ta, tb in LAYOUTS:
            run_hgemm("best", m, k, n, dtype, ta, tb, out16=dtype == "bfloat16")


@pytest.mark.parametrize("variant", [rung(v) for v in RUNGS])
@pytest.mark.hint("with K = 0, C is a sum of no products: every element must be written as 0; an empty C "
                  "needs no launch (a grid dimension of 0 is an invalid launch)")
def test_empty_products(variant):
    hg = hgemm_module()
    for dtype in FORMATS:
        out = checks.poison((5, 7))
        launch_checked(f"hgemm(variant={variant!r}) of (5 x 0) @ (0 x 7)", partial(
            hg.hgemm, backend.empty((5, 0), STORAGE[dtype]), backend.empty((0, 7), STORAGE[dtype]), out, dtype,
            variant))
        checks.assert_close(out, np.zeros((5, 7)), rtol=0, what=f"hgemm(variant={variant!r}) with K = 0")
        for m, n in ((0, 3), (3, 0)):
            hg.hgemm(backend.empty((m, 4), STORAGE[dtype]), backend.empty((4, n), STORAGE[dtype]),
                     backend.empty((m, n)), dtype, variant)


@pytest.mark.parametrize("variant", [rung(v) for v in RUNGS if v != "wmma"])
@pytest.mark.hint("a barrier between the copies into shared memory and their reads, and another before they are "
                  "overwritten; with cp.async, cp.async.wait_group before that barrier (check mode names the "
                  "race and its lines)", on="fault")
def test_rung_has_no_shared_memory_race(variant):
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase8a --device emu)")
    from minitorch import emu

    with emu.check_mode():
        # 16-byte copies, 9 steps of K (rung 5's ring of 4 stages turns twice)
        run_hgemm(variant, 40, 264, 136, "float16", False, False, False, salt="race")
        run_hgemm(variant, 33, 40, 17, "bfloat16", True, True, True, salt="race")  # element by element


# (batch, M, K, N) of the batched products: odd sizes, a K of 1, a batch of one; attention's shapes on a GPU
BATCHED = [(3, 17, 24, 33), (2, 40, 1, 9), (1, 9, 40, 16)]
if ON_GPU:
    BATCHED += [(24, 128, 64, 128), (5, 257, 72, 130)]


def run_batched(variant: str, batch: int, m: int, k: int, n: int, dtype: str, ta: bool, tb: bool,
                out16: bool) -> None:
    """hgemm() of stacks of `batch` fresh 16-bit operands (batch, ...) into a poisoned (batch, M, N) output: one
    launch of the rung for the whole batch, and every matrix within the bound of its own float64 product."""
    pairs = [operands(m, k, n, dtype, ta, tb, variant, "batch", batch, i) for i in range(batch)]
    stored_a, stored_b = np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    a, b = backend.asarray(stored_a), backend.asarray(stored_b)
    out_dtype = STORAGE[dtype] if out16 else np.dtype(np.float32)
    out = checks.poison((batch, m, n), out_dtype)
    what = (f"hgemm(variant={variant!r}, dtype={dtype!r}) of a batch of {batch}: op(A) {m} x {k} @ op(B) {k} x {n} "
            f"into {out_dtype}" + (", A stored K x M" if ta else "") + (", B stored N x K" if tb else ""))
    checks.reset_launches()
    checks.run_without_host_transfers(what, lambda: hgemm_module().hgemm(a, b, out, dtype, variant,
                                                                          transpose_a=ta, transpose_b=tb))
    kernel = RUNGS.get(variant, RUNGS["pipeline"])
    launched = launches_of("hgemm.cu", kernel)
    if launched != 1:
        raise GradeError(f"{what}: {launched} launches of `{kernel}`, expected 1: a batch is one launch, its "
                         f"matrices along the grid's z dimension")
    got = checks.to_host(out)
    wrong = []
    for i, (_, _, a64, b64) in enumerate(pairs):
        try:
            assert_hgemm_close(got[i], a64, b64, dtype, out16, f"{what}, matrix {i} of the batch")
        except GradeError as error:
            wrong.append((i, error))
    if not wrong:
        return
    i, error = wrong[0]
    lines = [str(error)]
    if len(wrong) < batch:
        lines.append(f"  matrices {[j for j, _ in wrong]} of the batch are wrong, the others right")
    first = pairs[0][2] @ pairs[0][3]
    widened = widen_host(got[i], dtype) if out16 else got[i].astype(np.float64)
    if i > 0 and np.allclose(widened, first, rtol=1e-2, atol=1e-2):
        lines.append(f"  matrix {i} of C holds the product of matrix 0 of A and B: does every kernel move A, B and "
                     f"C to matrix blockIdx.z of their stacks (select_matrix)?")
    elif i > 0:
        lines.append("  matrix 0 is right and a later one is not: matrix z of a stack starts z·M·K elements into A, "
                     "z·K·N into B and z·M·N into C (select_matrix)")
    raise GradeError("\n".join(lines))


@pytest.mark.parametrize("variant", [rung(v) for v in RUNGS])
@pytest.mark.hint("a batch (a, b and out stacks of matrices, (batch, rows, cols)) is one launch: the grid's z "
                  "dimension is the batch, and every kernel first moves A, B and C to matrix blockIdx.z "
                  "(select_matrix): M·K, K·N and M·N elements apart")
def test_batched_values(variant):
    for j, (batch, m, k, n) in enumerate(BATCHED):
        for dtype in FORMATS:
            ta, tb = LAYOUTS[(j + FORMATS.index(dtype)) % 4]
            run_batched(variant, batch, m, k, n, dtype, ta, tb, out16=(j + ta) % 2 == 1)


# ---------------------------------------------------------------- the launcher


@pytest.mark.hint("hgemm.py checks its arguments, and names what it expected and what it got, before launching")
def test_hgemm_launcher_rejects_bad_arguments():
    hg = hgemm_module()
    f16 = np.dtype(np.float16)
    a, b = backend.asarray(np.ones((3, 4), f16)), backend.asarray(np.ones((4, 2), f16))
    out = backend.empty((3, 2))
    checks.expect_error("hgemm (3, 4) @ (5, 2)", lambda: hg.hgemm(a, backend.empty((5, 2), f16), out, "float16"),
                        ValueError, "(3, 4)", "(5, 2)")
    checks.expect_error("hgemm (3, 4) @ (4, 2) into (2, 3)",
                        lambda: hg.hgemm(a, b, backend.empty((2, 3)), "float16"), ValueError, "(2, 3)", "(3, 2)")
    checks.expect_error("hgemm with transpose_a: a (3, 4) is K x M, so b needs 3 rows",
                        lambda: hg.hgemm(a, b, backend.empty((4, 2)), "float16", transpose_a=True), ValueError,
                        "(4, 2)")
    checks.expect_error("hgemm of float16 arrays said to be bfloat16", lambda: hg.hgemm(a, b, out, "bfloat16"),
                        TypeError, "uint16", "float16")
    checks.expect_error("hgemm of float32 arrays",
                        lambda: hg.hgemm(backend.asarray(np.ones((3, 4), np.float32)), b, out, "float16"),
                        TypeError, "float32")
    checks.expect_error("hgemm into a float64 output",
                        lambda: hg.hgemm(a, b, backend.asarray(np.ones((3, 2))), "float16"), TypeError, "float64")
    checks.expect_error("hgemm with an unknown format", lambda: hg.hgemm(a, b, out, "float8"), ValueError, "float8")
    checks.expect_error("hgemm with an unknown variant", lambda: hg.hgemm(a, b, out, "float16", "fastest"),
                        ValueError, "fastest")
    checks.expect_error("hgemm with a NumPy b", lambda: hg.hgemm(a, np.ones((4, 2), f16), out, "float16"),
                        TypeError, "numpy")
    checks.expect_error("hgemm with a 1-D b", lambda: hg.hgemm(a, backend.empty(4, f16), out, "float16"),
                        ValueError, "(4,)")
    stack_a, stack_b = backend.asarray(np.ones((2, 3, 4), f16)), backend.asarray(np.ones((3, 4, 2), f16))
    checks.expect_error("hgemm of a batch of 2 with a batch of 3", lambda: hg.hgemm(
        stack_a, stack_b, backend.empty((2, 3, 2)), "float16"), ValueError, "(2, 3, 4)", "(3, 4, 2)")
    checks.expect_error("hgemm of a batch into one matrix", lambda: hg.hgemm(
        stack_a, backend.asarray(np.ones((2, 4, 2), f16)), out, "float16"), ValueError, "(3, 2)")
    checks.expect_error("hgemm of a batch into (2, 2, 3)", lambda: hg.hgemm(
        stack_a, backend.asarray(np.ones((2, 4, 2), f16)), backend.empty((2, 2, 3)), "float16"), ValueError,
        "(2, 2, 3)", "(2, 3, 2)")


def _has_sm90() -> bool:
    if not ON_GPU:
        return False
    import cupy

    return cupy.cuda.Device().compute_capability == "90"


@pytest.mark.hint("rung 6 (wgmma) runs only on an sm_90 GPU; elsewhere hgemm(..., variant='wgmma') raises "
                  "NotImplementedError saying so")
def test_wgmma_needs_an_sm90_gpu():
    if _has_sm90():
        pytest.skip("this GPU runs rung 6 (wgmma + TMA): test_phase8a_wgmma.py grades it")
    hg = hgemm_module()
    a = backend.asarray(np.ones((16, 16), np.float16))
    checks.expect_error("hgemm(variant='wgmma') without an sm_90 GPU",
                        lambda: hg.hgemm(a, a, backend.empty((16, 16)), "float16", "wgmma"), NotImplementedError,
                        "sm_90")


@pytest.mark.kernel("hgemm.cu", "hgemm_5_pipeline")
@pytest.mark.hint("the launcher launches your kernels and lets them write C: nothing computed on the host (no "
                  "cupy.matmul, no NumPy)")
def test_results_come_from_your_kernels():
    hg = hgemm_module()
    for dtype, (ta, tb) in zip(FORMATS * 2, LAYOUTS, strict=True):
        stored_a, stored_b, _, _ = operands(67, 33, 70, dtype, ta, tb, "replay")
        a, b, out = backend.asarray(stored_a), backend.asarray(stored_b), checks.poison((67, 70))
        call = partial(hg.hgemm, a, b, out, dtype, "best", transpose_a=ta, transpose_b=tb)
        checks.assert_computed_on_device(f"hgemm(variant='best', dtype={dtype!r}, transpose_a={ta}, "
                                         f"transpose_b={tb})", call, inputs=(a, b), outputs=(out,))


# ---------------------------------------------------------------- performance (GPU only)


def _gpu():
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    import cupy

    return cupy


def _cublas(cupy, size: int, dtype: str) -> tuple[Any, str]:
    """cuBLAS on the same dtypes, as a zero-argument call: torch.matmul when PyTorch imports, else cupy.matmul
    for fp16; skips bf16 without PyTorch (CuPy has no bf16)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        tdt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        x = torch.empty((size, size), dtype=tdt, device="cuda").uniform_(-1, 1)
        y = torch.empty((size, size), dtype=tdt, device="cuda").uniform_(-1, 1)
        z = torch.empty((size, size), dtype=tdt, device="cuda")
        return (lambda: torch.matmul(x, y, out=z)), f"torch.matmul ({dtype}, cuBLAS)"
    if dtype == "float16":
        x = cupy.random.RandomState(5).uniform(-1, 1, (size, size), dtype=np.float32).astype(np.float16)
        z = cupy.empty((size, size), np.float16)
        return (lambda: cupy.matmul(x, x, out=z)), "cupy.matmul (float16, cuBLAS)"
    pytest.skip("bf16 not measured: PyTorch is not installed and CuPy has no bfloat16 matmul")


def _device_operands(cupy, size: int, dtype: str) -> tuple[Any, Any]:
    x = cupy.random.RandomState(3).uniform(-1, 1, (size, size), dtype=np.float32)
    if dtype == "float16":
        return x.astype(np.float16), cupy.empty((size, size), np.float16)
    bits = x.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return rounded, cupy.empty((size, size), np.uint16)


@pytest.mark.perf
@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize("variant", [rung(v) for v in RUNGS] + [pytest.param("best", id="best")])
@pytest.mark.hint("see the chapter's ladder: what does this rung change in how the data reaches the tensor cores?")
def test_perf_rung_against_cublas(variant, dtype, record_property):
    cupy = _gpu()
    size = 4096
    reference, name = _cublas(cupy, size, dtype)
    a, out = _device_operands(cupy, size, dtype)
    hg = hgemm_module()
    run_hgemm(variant, 129, 72, 136, dtype, False, False, True, salt="perf")  # right before it is fast
    key = f"phase8a.{variant}_4096"
    try:
        checks.threshold(key)
    except KeyError:
        key = "phase8a.reported_only"
    checks.perf_ratio(f"{variant} ({dtype}) at {size}^3", lambda: hg.hgemm(a, a, out, dtype, variant), reference,
                      2 * size ** 3, key, record_property, unit="GFLOP/s", reference_name=name)


# The GPT's training products at B·T = 4096 rows and d_model 768 (benchmarks/phase8a_hgemm.py's gpt_d768 shapes):
# (name, M, K, N, transpose_a, transpose_b). The weight gradient reads X stored (rows, d) as Xᵀ; dX reads W as Wᵀ.
GPT_SHAPES = [("fc_fwd", 4096, 768, 3072, False, False), ("fc_dx", 4096, 3072, 768, False, True),
              ("fc_dw", 768, 4096, 3072, True, False)]


@pytest.mark.perf
@pytest.mark.parametrize("name, m, k, n, ta, tb", GPT_SHAPES, ids=[s[0] for s in GPT_SHAPES])
def test_perf_best_at_the_gpt_training_shapes(name, m, k, n, ta, tb, record_property):
    """variant='best' (bf16, 16-bit output) on the products of a GPT's training step, against torch.matmul on
    the same layouts: reported, never required."""
    cupy = _gpu()
    try:
        import torch
    except ImportError:
        pytest.skip("not measured: PyTorch is not installed (cuBLAS bf16 through torch.matmul)")
    x = torch.empty((k, m) if ta else (m, k), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    y = torch.empty((n, k) if tb else (k, n), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    z = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    op_x, op_y = (x.t() if ta else x), (y.t() if tb else y)
    rs = cupy.random.RandomState(4)  # bf16 operands (truncated: their values do not matter here)
    a = (rs.uniform(-1, 1, x.shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b = (rs.uniform(-1, 1, y.shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    out = cupy.empty((m, n), np.uint16)
    hg = hgemm_module()
    checks.perf_ratio(f"best (bf16) at the GPT's {name} ({m} x {k} x {n})",
                      lambda: hg.hgemm(a, b, out, "bfloat16", "best", transpose_a=ta, transpose_b=tb),
                      lambda: torch.matmul(op_x, op_y, out=z), 2 * m * n * k, "phase8a.reported_only",
                      record_property, unit="GFLOP/s", reference_name="torch.matmul (bf16, cuBLAS)")
