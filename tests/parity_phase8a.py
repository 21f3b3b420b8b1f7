"""Parity cases of Phase 8a's kernels (convert.cu, hgemm.cu, scaler.cu), for tests/test_parity.py.

The conversions are integer operations on bits: float32 patterns of every class (and every 16-bit pattern on the
way back) give the same bits on a GPU and on the emulator, and equal NumPy's rounding (NaNs compared as "a NaN of
this sign"). The HGEMM rungs multiply small integers (|a|, |b| <= 8, K < 100): every product and every partial
sum is an integer below 2^24, exact in float32 in any order, so the tensor cores' grouping of the additions
changes nothing and the float32 result is the float64 product; a 16-bit output is that integer rounded once to
nearest even.
The loss scaler's kernels multiply by powers of two (exact unless the result overflows, which is what they look
for) and copy 32-bit words: the same bits everywhere, inf and NaN included.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minitorch import backend, kernels

NOTEBOOKS = ("phase8a_tensor_cores.ipynb",)
FORMATS = ("bfloat16", "float16")
STORAGE = {"float16": np.float16, "bfloat16": np.uint16}
HGEMM_RUNGS = {"hgemm_1_wmma": "wmma", "hgemm_2_wmma_shared": "wmma_shared", "hgemm_3_mma": "mma",
               "hgemm_4_swizzle": "swizzle", "hgemm_5_pipeline": "pipeline"}


def _patterns(n: int, rng: np.random.Generator) -> np.ndarray:
    """n float32 bit patterns: the specials and the rounding edges first, then random ones."""
    edges = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x477FF000, 0x477FEFFF,
                      0x33000000, 0x33000001, 0x387FE000, 0x00000001, 0x3F801000, 0x3F803000, 0x3F808000,
                      0x3F818000, 0x7F7FFFFF], np.uint32)
    rand = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([edges, rand])[:n]


def _canonical(bits: np.ndarray, exponent: int, fraction: int, sign: int) -> np.ndarray:
    """Bit patterns as float64 numbers, every NaN replaced by one NaN pattern of its sign."""
    bits = bits.astype(np.uint64)
    nan = ((bits & exponent) == exponent) & ((bits & fraction) != 0)
    return np.where(nan, (bits & sign) | exponent | (fraction + 1) // 2, bits).astype(np.float64)


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, to nearest even (finite x)."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def _to_16bit(dtype: str, four: bool = False) -> Callable:
    """to_16bit of n patterns: an n not a multiple of 4 (one more where it is) runs the kernels of one element a
    thread, n rounded up to a multiple of 4 (``four``) the _x4 kernels."""
    def case(n: int, rng: np.random.Generator):
        n = -(-n // 4) * 4 if four else n + (n % 4 == 0)
        bits = _patterns(n, rng)
        x = bits.view(np.float32)
        out = backend.asarray(np.full(n, 0xFFFF, np.uint16).view(STORAGE[dtype]))
        kernels.load_module("convert.py").to_16bit(backend.asarray(x), out, dtype)
        got = backend.asnumpy(out).view(np.uint16)
        with np.errstate(over="ignore", invalid="ignore"):
            # bf16: inf keeps its bits; a NaN stays a NaN (its payload may lie in the dropped bits)
            want = x.astype(np.float16).view(np.uint16) if dtype == "float16" else np.select(
                [np.isnan(x), np.isinf(x)], [(bits >> 16) | 0x40, bits >> 16],
                _bf16_round(np.where(np.isfinite(x), x, 0))).astype(np.uint16)
        layout = (0x7C00, 0x3FF) if dtype == "float16" else (0x7F80, 0x7F)
        return _canonical(got, *layout, 0x8000), _canonical(want, *layout, 0x8000)
    return case


def _from_16bit(dtype: str, four: bool = False) -> Callable:
    def case(n: int, rng: np.random.Generator):
        n = -(-n // 4) * 4 if four else n + (n % 4 == 0)
        every = (np.arange(n, dtype=np.uint64) * 40503 % 65536).astype(np.uint16)  # n of the 65536 patterns
        x = every.view(np.float16) if dtype == "float16" else every
        out = backend.asarray(np.full(n, np.nan, np.float32))
        kernels.load_module("convert.py").from_16bit(backend.asarray(x), out, dtype)
        want = every.view(np.float16).astype(np.float32) if dtype == "float16" else (
            every.astype(np.uint32) << 16).view(np.float32)
        got = backend.asnumpy(out)
        return (_canonical(got.view(np.uint32), 0x7F800000, 0x7FFFFF, 0x80000000),
                _canonical(want.view(np.uint32), 0x7F800000, 0x7FFFFF, 0x80000000))
    return case


def _column_sums(dtype: str) -> Callable:
    """to_16bit_column_sums of a matrix of small integers (|x| <= 8): each rounds exactly to 16 bits and every
    column's sum is an integer below 2^24, exact in float32 in any order of the blocks' atomics."""
    def case(n: int, rng: np.random.Generator):
        cols = n % 37 + 1 if n % 2 else 4 * (n % 19 + 1)  # odd widths (element by element) and multiples of 4
        rows = max(1, n // cols)
        x = rng.integers(-8, 9, (rows, cols)).astype(np.float32)
        out = backend.asarray(np.full((rows, cols), 0xFFFF, np.uint16).view(STORAGE[dtype]))
        sums = backend.asarray(np.full(cols, np.nan, np.float32))
        kernels.load_module("convert.py").to_16bit_column_sums(backend.asarray(x), out, sums, dtype)
        got16 = backend.asnumpy(out).view(np.uint16).ravel()
        want16 = (x.astype(np.float16).view(np.uint16) if dtype == "float16" else _bf16_round(x)).ravel()
        return (np.concatenate([got16.astype(np.float64), backend.asnumpy(sums).astype(np.float64)]),
                np.concatenate([want16.astype(np.float64), x.astype(np.float64).sum(axis=0)]))
    return case


def _widened(bits: np.ndarray, dtype: str) -> np.ndarray:
    bits = bits.view(np.uint16)
    return (bits.view(np.float16).astype(np.float64) if dtype == "float16"
            else (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64))


def _column_sums_16bit(dtype: str) -> Callable:
    """column_sums_16bit of small integers (exact in 16 bits; the sums exact in float32 in any order)."""
    def case(n: int, rng: np.random.Generator):
        cols = n % 37 + 1 if n % 2 else 4 * (n % 19 + 1)
        rows = max(1, n // cols)
        x = rng.integers(-8, 9, (rows, cols)).astype(np.float32)
        x16 = x.astype(np.float16) if dtype == "float16" else _bf16_round(x).view(np.uint16)
        sums = backend.asarray(np.full(cols, np.nan, np.float32))
        kernels.load_module("convert.py").column_sums_16bit(backend.asarray(x16), sums, dtype)
        return backend.asnumpy(sums).astype(np.float64), x.astype(np.float64).sum(axis=0)
    return case


def _gelu_16bit(dtype: str, backward: bool) -> Callable:
    """gelu_16bit / gelu_backward_16bit where the tanh formula is exact: x in {0, +-20, +-100} (GELU x or 0, its
    slope 1, 0 or 1/2), gradients small integers; n % 4 == 0 takes four elements a thread, others one."""
    def case(n: int, rng: np.random.Generator):
        x = rng.choice(np.array([0.0, 20.0, -20.0, 100.0, -100.0], np.float32), n)
        cv = kernels.load_module("convert.py")
        out = backend.asarray(np.full(n, 0xFFFF, np.uint16).view(STORAGE[dtype]))
        if not backward:
            cv.gelu_16bit(backend.asarray(x), out, dtype)
            return _widened(backend.asnumpy(out), dtype), np.where(x > 0, x, 0.0)
        g = rng.integers(-8, 9, n).astype(np.float32)
        g16 = g.astype(np.float16) if dtype == "float16" else _bf16_round(g).view(np.uint16)
        cv.gelu_backward_16bit(backend.asarray(x), backend.asarray(g16), out, dtype)
        return _widened(backend.asnumpy(out), dtype), np.where(x > 0, g, np.where(x < 0, 0.0, 0.5 * g))
    return case


def _sum_pieces(n: int, rng: np.random.Generator):
    """hgemm.py's sum_pieces of small integers (exact sums); n % 4 == 0 takes a float4 a thread."""
    pieces, rows, cols = n % 5 + 1, n % 7 + 1, n % 13 + 1
    partial = rng.integers(-8, 9, (pieces, rows, cols)).astype(np.float32)
    out = backend.asarray(np.full((rows, cols), np.nan, np.float32))
    kernels.load_module("hgemm.py").sum_pieces(backend.asarray(partial), out)
    return backend.asnumpy(out).astype(np.float64), partial.astype(np.float64).sum(axis=0)


def _hgemm(variant: str) -> Callable:
    """A rung through hgemm.py, all four layouts, then a batch of two in one launch; the format alternates with
    n, the output with the layout."""
    def case(n: int, rng: np.random.Generator):
        hg = kernels.load_module("hgemm.py")
        dtype = FORMATS[n % 2]
        m, k, cols = (n * 7) % 150 + 1, n % 97 + 1, (n * 13) % 140 + 1
        got, expected = [], []
        for ta, tb in ((False, False), (True, False), (False, True), (True, True)):
            a = rng.integers(-8, 9, (m, k)).astype(np.float32)
            b = rng.integers(-8, 9, (k, cols)).astype(np.float32)
            a16, b16 = ((a.astype(np.float16), b.astype(np.float16)) if dtype == "float16"
                        else (_bf16_round(a), _bf16_round(b)))
            out16 = ta != tb
            out = backend.asarray(np.full((m, cols), 0xFFFF, np.uint16).view(STORAGE[dtype]) if out16
                                  else np.full((m, cols), np.nan, np.float32))
            hg.hgemm(backend.asarray(np.ascontiguousarray(a16.T) if ta else a16),
                     backend.asarray(np.ascontiguousarray(b16.T) if tb else b16), out, dtype, variant,
                     transpose_a=ta, transpose_b=tb)
            exact = a.astype(np.float64) @ b.astype(np.float64)
            c = backend.asnumpy(out)
            if out16:
                c = c.astype(np.float64) if dtype == "float16" else (
                    c.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
                exact = (exact.astype(np.float16).astype(np.float64) if dtype == "float16" else
                         (_bf16_round(exact.astype(np.float32)).astype(np.uint32) << 16).view(np.float32))
            got.append(np.asarray(c, np.float64).ravel())
            expected.append(np.asarray(exact, np.float64).ravel())
        # a batch of 2 in one launch (grid z), B stored N x K, into float32 (N at most 40: cheap on emu)
        cols = min(cols, 40)
        a = rng.integers(-8, 9, (2, m, k)).astype(np.float32)
        b = rng.integers(-8, 9, (2, k, cols)).astype(np.float32)
        a16, b16 = ((a.astype(np.float16), b.astype(np.float16)) if dtype == "float16"
                    else (_bf16_round(a), _bf16_round(b)))
        out = backend.asarray(np.full((2, m, cols), np.nan, np.float32))
        hg.hgemm(backend.asarray(a16), backend.asarray(np.ascontiguousarray(np.swapaxes(b16, 1, 2))), out, dtype,
                 variant, transpose_b=True)
        got.append(np.asarray(backend.asnumpy(out), np.float64).ravel())
        expected.append((a.astype(np.float64) @ b.astype(np.float64)).ravel())
        return np.concatenate(got), np.concatenate(expected)
    return case


def _unscale_check(n: int, rng: np.random.Generator):
    """g times a power of two, one entry overflowing to +-inf when n > 2: g and the flag."""
    g = (rng.integers(-64, 64, n) * 2.0 ** rng.integers(-20, 120, n)).astype(np.float32)
    inv = np.float32(2.0 ** -7 if n % 2 else 2.0 ** 9)
    if n > 2:  # overflows to +-inf (a NaN input is not used: a GPU's product of a NaN is its canonical NaN,
        # 0x7fffffff, where the emulator's x86 keeps the input's payload and sign)
        g[n // 2] = np.float32(-3e38) if n % 3 else np.float32(3e38)
    out, found = backend.asarray(g), backend.asarray(np.zeros(1, np.float32))
    kernels.load_kernel("scaler.cu", "unscale_check")(((n + 127) // 128,), (128,), (
        out, backend.asarray(np.array([inv], np.float32)), found, np.int64(n)))
    with np.errstate(over="ignore", invalid="ignore"):
        want = g * inv
    flag = np.float32(0.0 if np.isfinite(want).all() else 1.0)
    got = np.concatenate([backend.asnumpy(out), backend.asnumpy(found)])
    return got, np.concatenate([want, [flag]]).astype(np.float64)


def _restore_if_found(n: int, rng: np.random.Generator):
    """Two launches: found = 0 leaves p alone, found = 1 copies saved (random 32-bit words, NaN patterns too)."""
    p0 = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    saved = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    results = []
    for flag in (0.0, 1.0):
        p = backend.asarray(p0)
        kernels.load_kernel("scaler.cu", "restore_if_found")((3,), (64,), (
            p, backend.asarray(saved), backend.asarray(np.array([flag], np.float32)), np.int64(n)))
        results.append(backend.asnumpy(p))
    return np.concatenate(results), np.concatenate([p0, saved]).astype(np.float64)


def _update_scale(n: int, rng: np.random.Generator):
    """One launch per step over min(n, 64) steps of a random found/not-found sequence (growth 2, backoff 1/2, interval 3,
    a start near float32's top so that a growth that would overflow is refused): scale, inverse and count."""
    scale, inv, good = 2.0 ** 120, 2.0 ** -120, 0.0
    dev = [backend.asarray(np.array([v], np.float32)) for v in (scale, inv, good)]
    trace, want = [], []
    for found in rng.integers(0, 4, min(n, 64)) == 0:  # a launch a step: 64 steps at most
        kernels.load_kernel("scaler.cu", "update_scale")((1,), (32,), (
            *dev, backend.asarray(np.array([1.0 if found else 0.0], np.float32)), np.float32(2.0),
            np.float32(0.5), np.int32(3)))
        trace.extend(float(backend.asnumpy(d)[0]) for d in dev)
        if found:
            scale, good = scale * 0.5, 0.0
        else:
            good += 1
            if good >= 3:
                if scale * 2.0 <= float(np.finfo(np.float32).max):
                    scale *= 2.0
                good = 0.0
        want.extend([scale, 1.0 / scale, good])
    return np.array(trace), np.array(want, np.float64)


PHASE8A_CASES: dict[tuple[str, str], Callable] = {
    ("convert.cu", "float_to_half"): _to_16bit("float16"),
    ("convert.cu", "float_to_bfloat16"): _to_16bit("bfloat16"),
    ("convert.cu", "half_to_float"): _from_16bit("float16"),
    ("convert.cu", "bfloat16_to_float"): _from_16bit("bfloat16"),
    ("convert.cu", "float_to_half_x4"): _to_16bit("float16", four=True),
    ("convert.cu", "float_to_bfloat16_x4"): _to_16bit("bfloat16", four=True),
    ("convert.cu", "half_to_float_x4"): _from_16bit("float16", four=True),
    ("convert.cu", "bfloat16_to_float_x4"): _from_16bit("bfloat16", four=True),
    ("convert.cu", "float_to_half_column_sums"): _column_sums("float16"),
    ("convert.cu", "float_to_bfloat16_column_sums"): _column_sums("bfloat16"),
    ("hgemm.cu", "hgemm_sum_pieces"): _sum_pieces,
    ("convert.cu", "half_column_sums"): _column_sums_16bit("float16"),
    ("convert.cu", "bfloat16_column_sums"): _column_sums_16bit("bfloat16"),
    ("convert.cu", "gelu_to_half"): _gelu_16bit("float16", backward=False),
    ("convert.cu", "gelu_to_bfloat16"): _gelu_16bit("bfloat16", backward=False),
    ("convert.cu", "gelu_backward_half"): _gelu_16bit("float16", backward=True),
    ("convert.cu", "gelu_backward_bfloat16"): _gelu_16bit("bfloat16", backward=True),
    **{("hgemm.cu", kernel): _hgemm(variant) for kernel, variant in HGEMM_RUNGS.items()},
    ("scaler.cu", "unscale_check"): _unscale_check,
    ("scaler.cu", "restore_if_found"): _restore_if_found,
    ("scaler.cu", "update_scale"): _update_scale,
}
