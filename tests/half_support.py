"""Shared set-up of the 16-bit and mixed-precision tests: an independent float64 reference of the
conversions, and stand-ins for the learner's Phase 8a files (``convert.cu/.py``, ``hgemm.cu/.py`` by the
contract of PHASE 8a) so that the framework's plumbing is tested without the lab's solution: each
stand-in is the plainest kernel that keeps the contract (the GPU's own conversion intrinsics, one thread
per output of the product)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import minitorch

# ---------------------------------------------------------------- reference (float64, a table of values)

_FORMATS = {
    # every finite non-negative pattern, the value just past the largest finite one (where rounding
    # with an unbounded exponent would go: overflow), and infinity's bits
    "bfloat16": (np.arange(0, 0x7F80, dtype=np.uint32), 2.0 ** 128, 0x7F80),
    "float16": (np.arange(0, 0x7C00, dtype=np.uint32), 2.0 ** 16, 0x7C00),
}


def _values(fmt: str, patterns: np.ndarray) -> np.ndarray:
    if fmt == "bfloat16":
        return (patterns.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return patterns.astype(np.uint16).view(np.float16).astype(np.float64)


def reference_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    """float32 -> 16-bit patterns by the definition: the nearest of the format's values (found in a
    sorted table of all of them, in float64), ties to the even pattern; past the largest finite value
    by half an ulp or more: infinity. NaN inputs get 0x7FFF here (callers compare NaNs by class)."""
    patterns, past_max, inf_bits = _FORMATS[fmt]
    table = np.append(_values(fmt, patterns), past_max)
    bits = np.append(patterns, inf_bits)
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):  # NaN inputs (signalling ones warn)
        a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a)
    a_f = np.where(finite, a, 0.0)
    i = np.clip(np.searchsorted(table, a_f, side="right") - 1, 0, len(table) - 2)
    lo, hi = table[i], table[i + 1]
    up = (hi - a_f < a_f - lo) | ((hi - a_f == a_f - lo) & (bits[i] % 2 == 1))
    out = np.where(up, bits[i + 1], bits[i])
    out = np.where(np.isinf(a), inf_bits, out)
    out = np.where(np.isnan(x), 0x7FFF, out)
    return (out | np.where(np.signbit(x), 0x8000, 0)).astype(np.uint16)


def float32_patterns(seed: int = 0) -> np.ndarray:
    """float32 values of every class: random bit patterns over all exponents, both formats' halfway
    cases, their subnormal ranges and overflow boundaries, float32 subnormals, ±0, ±inf, NaNs."""
    rng = np.random.default_rng(seed)
    random_bits = rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32)
    bf16 = rng.integers(0, 0x7F80, 600, dtype=np.uint32) << np.uint32(16)
    halfway_bf16 = np.concatenate([bf16 | np.uint32(0x8000), bf16 | np.uint32(0x7FFF), bf16 | np.uint32(0x8001)])
    fp16 = _values("float16", rng.integers(0, 0x7C00, 600, dtype=np.uint32))
    ulp16 = np.spacing(fp16.astype(np.float16)).astype(np.float64)
    halfway_fp16 = np.concatenate([fp16 + ulp16 / 2, fp16 + ulp16 / 4, fp16 + 3 * ulp16 / 4]).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.0, 65520.0, 65536.0, -65520.0,
                        2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -26, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25,
                        1e-45, 1.17e-38, 3.4028235e38, -3.4028235e38, 3.3961776e38, 3.3961775e38], np.float32)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FA00000], np.uint32)
    return np.concatenate([random_bits.view(np.float32), halfway_bf16.view(np.float32), halfway_fp16,
                           special, nans.view(np.float32), -halfway_bf16.view(np.float32)])


def assert_same_bits(got: np.ndarray, x: np.ndarray, fmt: str, nan_sign: bool = True) -> None:
    """Bit for bit against the reference; a NaN input must give a quiet NaN (of its sign, unless
    ``nan_sign`` is False)."""
    got = np.asarray(got).view(np.uint16).reshape(-1)
    x = np.asarray(x, np.float32).reshape(-1)
    nan = np.isnan(x)
    expected = reference_bits(x, fmt)
    wrong = np.flatnonzero((got != expected) & ~nan)
    assert wrong.size == 0, (f"{fmt}: {wrong.size} of {x.size} conversions differ, e.g. {x[wrong[0]]!r} "
                             f"(bits {x.view(np.uint32)[wrong[0]]:#010x}) -> {got[wrong[0]]:#06x}, expected "
                             f"{expected[wrong[0]]:#06x}")
    exp_mask, quiet = (0x7F80, 0x0040) if fmt == "bfloat16" else (0x7C00, 0x0200)
    g = got[nan]
    assert np.all((g & exp_mask) == exp_mask) and np.all(g & quiet), f"{fmt}: a NaN became {g}"
    if nan_sign:
        assert np.array_equal(g >> 15, np.signbit(x[nan]).astype(np.uint16)), f"{fmt}: a NaN lost its sign"


# ---------------------------------------------------------------- stand-ins for the Phase 8a files

CONVERT_CU = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define GRID_STRIDE(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; \
                               i += (long long)gridDim.x * blockDim.x)
__device__ bool is_nan(unsigned int b) { return (b & 0x7fffffffu) > 0x7f800000u; }
extern "C" __global__ void float_to_half(const float* x, unsigned short* y, long long n) {
    GRID_STRIDE(i, n) {
        unsigned int b = __float_as_uint(x[i]);
        y[i] = is_nan(b) ? (unsigned short)(((b >> 16) & 0x8000u) | 0x7e00u) : __half_as_ushort(__float2half_rn(x[i]));
    }
}
extern "C" __global__ void float_to_bfloat16(const float* x, unsigned short* y, long long n) {
    GRID_STRIDE(i, n) {
        unsigned int b = __float_as_uint(x[i]);
        y[i] = is_nan(b) ? (unsigned short)((b >> 16) | 0x40u) : __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
    }
}
extern "C" __global__ void half_to_float(const unsigned short* x, float* y, long long n) {
    GRID_STRIDE(i, n) y[i] = __half2float(__ushort_as_half(x[i]));
}
extern "C" __global__ void bfloat16_to_float(const unsigned short* x, float* y, long long n) {
    GRID_STRIDE(i, n) y[i] = __uint_as_float(((unsigned int)x[i]) << 16);
}
'''

CONVERT_PY = '''
import numpy as np
from minitorch.kernels import load_kernel

def _bits(a):
    return a.view(np.uint16) if a.dtype == np.float16 else a

def _launch(name, x, out):
    n = x.size
    load_kernel("convert.cu", name)((max(1, min((n + 255) // 256, 1024)),), (256,), (x, out, np.int64(n)))

def to_16bit(x, out, dtype):
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype must be 'float16' or 'bfloat16', got {dtype!r}")
    _launch("float_to_half" if dtype == "float16" else "float_to_bfloat16", x, _bits(out))

def from_16bit(x, out, dtype):
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype must be 'float16' or 'bfloat16', got {dtype!r}")
    _launch("half_to_float" if dtype == "float16" else "bfloat16_to_float", _bits(x), out)
'''

HGEMM_CU = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ float load16(const unsigned short* p, long long i, int bf16) {
    return bf16 ? __bfloat162float(__ushort_as_bfloat16(p[i])) : __half2float(__ushort_as_half(p[i]));
}
__device__ float dot(const unsigned short* A, const unsigned short* B, int row, int col, int M, int N, int K,
                     int ta, int tb, int bf16) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += load16(A, ta ? (long long)k * M + row : (long long)row * K + k, bf16)
             * load16(B, tb ? (long long)col * K + k : (long long)k * N + col, bf16);
    return acc;
}
extern "C" __global__ void hgemm_f32(const unsigned short* A, const unsigned short* B, float* C, int M, int N,
                                     int K, int ta, int tb, int bf16) {
    int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    const long long z = blockIdx.z;  // a batch: matrix z of each stack
    A += z * M * K, B += z * K * N, C += z * M * N;
    if (row < M && col < N) C[(long long)row * N + col] = dot(A, B, row, col, M, N, K, ta, tb, bf16);
}
extern "C" __global__ void hgemm_16(const unsigned short* A, const unsigned short* B, unsigned short* C, int M,
                                    int N, int K, int ta, int tb, int bf16) {
    int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    const long long z = blockIdx.z;
    A += z * M * K, B += z * K * N, C += z * M * N;
    if (row >= M || col >= N) return;
    float acc = dot(A, B, row, col, M, N, K, ta, tb, bf16);
    C[(long long)row * N + col] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(acc))
                                       : __half_as_ushort(__float2half_rn(acc));
}
'''

HGEMM_PY = '''
import numpy as np
from minitorch.kernels import load_kernel

VARIANTS = ("reference",)
VARIANTS_ASKED = []  # the variant of every call, in order (what ops asks for)

def _bits(a):
    return a.view(np.uint16) if a.dtype == np.float16 else a

def hgemm(a, b, out, dtype, variant="best", transpose_a=False, transpose_b=False):
    VARIANTS_ASKED.append(variant)
    m, n = out.shape[-2:]  # a matrix, or a stack of them (batch, ...): one launch, grid z = the batch
    k = a.shape[-2] if transpose_a else a.shape[-1]
    name = "hgemm_f32" if out.dtype == np.float32 else "hgemm_16"
    grid = ((n + 15) // 16, (m + 15) // 16, out.shape[0] if out.ndim == 3 else 1)
    load_kernel("hgemm.cu", name)(grid, (16, 16), (_bits(a), _bits(b), _bits(out), np.int32(m), np.int32(n),
                                                   np.int32(k), np.int32(transpose_a), np.int32(transpose_b),
                                                   np.int32(dtype == "bfloat16")))
'''


def write_stand_ins(workspace: Path) -> Path:
    for name, text in (("convert.cu", CONVERT_CU), ("convert.py", CONVERT_PY), ("hgemm.cu", HGEMM_CU),
                       ("hgemm.py", HGEMM_PY)):
        (workspace / name).write_text(text)
    return workspace


@pytest.fixture(name="device", params=["cpu", "emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def half_device(request, workspace, monkeypatch):
    """The device of a 16-bit or mixed-precision test (imported by test_half and test_amp): a workspace with
    the solutions of phases 1-4 and the Phase 8a stand-ins, the device made active for the test."""
    from tests.phase3_support import PHASE3_NOTEBOOKS, write_solutions

    write_solutions(workspace, PHASE3_NOTEBOOKS + ("phase4_reductions.ipynb",))
    write_stand_ins(workspace)
    monkeypatch.delenv("MINITORCH_PHASE", raising=False)
    previous = minitorch.get_device()
    minitorch.set_device(request.param)
    yield request.param
    minitorch.set_device(previous)
