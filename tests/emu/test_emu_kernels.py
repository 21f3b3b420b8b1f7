"""minitorch.emu runs CUDA C kernels correctly: results against NumPy (float64 references)."""

from __future__ import annotations

import numpy as np
import pytest

from minitorch import emu

RNG = np.random.default_rng(1234)


def mod(src: str, **kw: object) -> emu.RawModule:
    return emu.RawModule(code=src, **kw)


# ------------------------------------------------------------------------------------ basics
VADD = r"""
extern "C" __global__ void vadd(const float* __restrict__ a, const float* __restrict__ b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


@pytest.mark.parametrize("n", [1, 7, 1000, 4097])
def test_vector_add_odd_sizes(n: int) -> None:
    a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    c = emu.empty(n)
    mod(VADD).get_function("vadd")(((n + 255) // 256,), (256,), (emu.asarray(a), emu.asarray(b), c, np.int32(n)))
    np.testing.assert_allclose(c.get(), a.astype(np.float64) + b, rtol=1e-6)


MEMORY = r"""
extern "C" __global__ void fill(float* out, float value, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
        out[i] = value;
}
extern "C" __global__ void copy(const float* src, float* dst, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
        dst[i] = src[i];
}
"""


@pytest.mark.parametrize("n", [1, 1023, 100_003])
def test_grid_stride_fill_and_copy(n: int) -> None:
    m = mod(MEMORY, filename="memory.cu")
    out = emu.empty(n)
    m.get_function("fill")((7,), (128,), (out, np.float32(2.5), np.int64(n)))
    np.testing.assert_array_equal(out.get(), np.full(n, 2.5, np.float32))
    src = RNG.standard_normal(n).astype(np.float32)
    dst = emu.empty(n)
    m.get_function("copy")((3,), (64,), (emu.asarray(src), dst, n))  # a Python int for long long is fine
    np.testing.assert_array_equal(dst.get(), src)


SGEMM = r"""
#define TILE 16
extern "C" __global__ void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        As[ty][tx] = (row < M && t * TILE + tx < K) ? A[row * K + t * TILE + tx] : 0.0f;  // @loadA
        Bs[ty][tx] = (col < N && t * TILE + ty < K) ? B[(t * TILE + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];  // @compute
        __syncthreads();  // @second
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""


def run_sgemm(src: str, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    c = emu.empty((m, n))
    mod(src, filename="sgemm.cu").get_function("sgemm")(
        ((n + 15) // 16, (m + 15) // 16), (16, 16), (emu.asarray(a), emu.asarray(b), c, np.int32(m), np.int32(n),
                                                     np.int32(k)))
    return c.get(), a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("shape", [(70, 45, 33), (128, 128, 128)])
def test_tiled_sgemm(shape: tuple[int, int, int]) -> None:
    got, ref = run_sgemm(SGEMM, *shape)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


REDUCE = r"""
extern "C" __global__ void reduce(const float* x, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) v += x[i];
    s[t] = v;
    __syncthreads();
    for (int k = blockDim.x / 2; k >= 32; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t < 32) {
        v = s[t];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (t == 0) atomicAdd(out, v);
    }
}
"""


@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_reduction_shared_tree_and_shuffles(n: int) -> None:
    x = RNG.uniform(-1, 1, n).astype(np.float32)
    out = emu.zeros(1)
    mod(REDUCE).get_function("reduce")((min(64, (n + 255) // 256),), (256,), (emu.asarray(x), out, np.int32(n)))
    np.testing.assert_allclose(out.get()[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-4)


SOFTMAX = r"""
extern "C" __global__ void softmax(const float* x, float* y, int cols) {
    __shared__ float red[256];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    int t = threadIdx.x;
    float m = __int_as_float(0xff800000);  // -infinity (NVRTC has no INFINITY)
    for (int j = t; j < cols; j += blockDim.x) m = fmaxf(m, row[j]);
    red[t] = m;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) red[t] = max(red[t], red[t + k]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float s = 0.0f;
    for (int j = t; j < cols; j += blockDim.x) s += __expf(row[j] - m);
    red[t] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        __syncthreads();
    }
    float inv = __fdividef(1.0f, red[0]);
    for (int j = t; j < cols; j += blockDim.x) out[j] = __expf(row[j] - m) * inv;
}
"""


def test_row_softmax() -> None:
    rows, cols = 33, 1000
    x = RNG.standard_normal((rows, cols)).astype(np.float32) * 4
    y = emu.empty((rows, cols))
    mod(SOFTMAX).get_function("softmax")((rows,), (256,), (emu.asarray(x), y, np.int32(cols)))
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(y.get(), ref, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------ language features
TEMPLATES = r"""
template <typename T, int BLOCK>
__global__ void scale(T* x, T a, int n) {
    __shared__ T cache[BLOCK];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    cache[threadIdx.x] = i < n ? x[i] : T(0);
    __syncthreads();
    if (i < n) x[i] = cache[threadIdx.x] * a;
}
"""


def test_templates_via_name_expressions() -> None:
    m = mod(TEMPLATES, name_expressions=["scale<float, 128>", "scale<double,64>"])
    xf = RNG.standard_normal(300).astype(np.float32)
    d = emu.asarray(xf)
    m.get_function("scale<float,128>")((3,), (128,), (d, np.float32(3.0), np.int32(300)))
    np.testing.assert_allclose(d.get(), xf.astype(np.float64) * 3, rtol=1e-6)
    xd = RNG.standard_normal(100)
    d = emu.asarray(xd)
    k = m.get_function("scale<double, 64>")
    assert [p.ctype for p in k.params] == ["double*", "double", "int"]
    k((2,), (64,), (d, 0.1, np.int32(100)))  # a Python float is right for a double parameter
    np.testing.assert_array_equal(d.get(), xd * 0.1)


BIG_TILE = r"""
template <typename T, int FLIP>
__global__ void flip(const T* x, T* y, int n) {
    __shared__ T tile[28 * 1024 / sizeof(T)];  // 28 KiB an instantiation
    int t = threadIdx.x;
    tile[t] = t < n ? x[t] : T(0);
    __syncthreads();
    if (t < n) y[t] = FLIP ? tile[n - 1 - t] : tile[t];
}
"""


def test_each_template_instantiation_counts_its_own_static_shared_memory() -> None:
    # Four instantiations of 28 KiB each in one module: a block of any one uses 28 KiB, not their sum
    # (which is past the 48 KiB a block may have); the HGEMM lab compiles 16 at a time.
    names = ["flip<float, 0>", "flip<float, 1>", "flip<int, 0>", "flip<int, 1>"]
    m = mod(BIG_TILE, name_expressions=names)
    x = RNG.standard_normal(64).astype(np.float32)
    y = emu.zeros(64)
    k = m.get_function("flip<float, 1>")
    assert k.static_shared == 28 * 1024
    k((1,), (64,), (emu.asarray(x), y, np.int32(64)))
    np.testing.assert_array_equal(y.get(), x[::-1])


DYNSMEM = r"""
extern "C" __global__ void rev(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    buf[t] = i < n ? x[i] : -1.0f;
    __syncthreads();
    int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - t);
    if (j < n) y[j] = buf[t];
}
"""


def test_dynamic_shared_memory() -> None:
    n, b = 1000, 128
    x = RNG.standard_normal(n).astype(np.float32)
    y = emu.zeros(n)
    mod(DYNSMEM).get_function("rev")(((n + b - 1) // b,), (b,), (emu.asarray(x), y, np.int32(n)), shared_mem=b * 4)
    # y[j] = x[i] for the mirrored index within each block (full blocks only are simple to check)
    ref = x.copy()
    for blk in range(n // b):
        ref[blk * b:(blk + 1) * b] = x[blk * b:(blk + 1) * b][::-1]
    np.testing.assert_array_equal(y.get()[: (n // b) * b], ref[: (n // b) * b])


def test_dynamic_shared_memory_namespace_scope_and_large_opt_in() -> None:
    src = r"""
extern __shared__ double big[];
extern "C" __global__ void k(double* out) {
    int t = threadIdx.x;
    for (int j = t; j < 8192; j += blockDim.x) big[j] = j * 0.5;
    __syncthreads();
    double s = 0;
    for (int j = 0; j < 8192; j += 1024) s += big[j + t];
    out[t] = s;
}
"""
    k = mod(src).get_function("k")
    out = emu.zeros(1024, np.float64)
    with pytest.raises(emu.LaunchError):
        k((1,), (1024,), (out,), shared_mem=8192 * 8)
    k.max_dynamic_shared_size_bytes = 8192 * 8
    k((1,), (1024,), (out,), shared_mem=8192 * 8)
    t = np.arange(1024)
    np.testing.assert_array_equal(out.get(), sum((j + t) * 0.5 for j in range(0, 8192, 1024)))


def test_dynamic_shared_memory_carved_into_several_arrays() -> None:
    src = r"""
extern "C" {
__global__ void carve(const float* x, float* y, int* z, int n) {
    extern __shared__ __align__(16) unsigned char smem[];
    float* a = reinterpret_cast<float*>(smem);
    int* b = (int*)&a[blockDim.x];
    int t = threadIdx.x;
    a[t] = x[t];
    b[t] = 3 * t;
    __syncthreads();
    y[t] = a[blockDim.x - 1 - t];
    z[t] = b[(t + 1) % blockDim.x];
}
}
"""
    x = RNG.standard_normal(96).astype(np.float32)
    y, z = emu.zeros(96), emu.zeros(96, np.int32)
    mod(src).get_function("carve")((1,), (96,), (emu.asarray(x), y, z, np.int32(96)), shared_mem=96 * 8)
    np.testing.assert_array_equal(y.get(), x[::-1])
    np.testing.assert_array_equal(z.get(), 3 * ((np.arange(96) + 1) % 96))


def test_3d_grid_and_blocks() -> None:
    src = r"""
extern "C" __global__ void ids(int* out) {
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int g = b * (blockDim.x * blockDim.y * blockDim.z) + t;
    out[g] = (blockIdx.z * 100 + blockIdx.y * 10 + blockIdx.x) * 1000 + threadIdx.z * 100 + threadIdx.y * 10 + threadIdx.x;
}
"""
    grid, block = (2, 3, 4), (5, 2, 3)
    out = emu.zeros(int(np.prod(grid) * np.prod(block)), np.int32)
    mod(src).get_function("ids")(grid, block, (out,))
    ref = []
    for bz in range(4):
        for by in range(3):
            for bx in range(2):
                for tz in range(3):
                    for ty in range(2):
                        for tx in range(5):
                            ref.append((bz * 100 + by * 10 + bx) * 1000 + tz * 100 + ty * 10 + tx)
    np.testing.assert_array_equal(out.get(), np.array(ref))


def test_1024_thread_blocks_with_barriers() -> None:
    src = r"""
extern "C" __global__ void scan(const int* x, int* y) {
    __shared__ int s[2][1024];
    int t = threadIdx.x, p = 0;
    s[0][t] = x[blockIdx.x * 1024 + t];
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) {
        s[1 - p][t] = s[p][t] + (t >= o ? s[p][t - o] : 0);
        p = 1 - p;
        __syncthreads();
    }
    y[blockIdx.x * 1024 + t] = s[p][t];
}
"""
    x = RNG.integers(-50, 50, 2048).astype(np.int32)
    y = emu.zeros(2048, np.int32)
    mod(src).get_function("scan")((2,), (1024,), (emu.asarray(x), y))
    np.testing.assert_array_equal(y.get(), np.cumsum(x.reshape(2, 1024), axis=1).ravel())


SHUFFLES = r"""
extern "C" __global__ void shf(const int* x, int* y, int w) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i], s = v;
    for (int o = w / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o, w);
    y[i] = s;
    y[i + 1 * 96] = __shfl_down_sync(0xffffffffu, v, 1, w);
    y[i + 2 * 96] = __shfl_up_sync(0xffffffffu, v, 2, w);
    y[i + 3 * 96] = __shfl_sync(0xffffffffu, v, 1, w);
    y[i + 4 * 96] = (int)__ballot_sync(0xffffffffu, v & 1);
    y[i + 5 * 96] = __any_sync(0xffffffffu, v == 7) + 2 * __all_sync(0xffffffffu, v >= 0);
    double d = __shfl_xor_sync(0xffffffffu, (double)v * 0.5, 1, w);
    y[i + 6 * 96] = (int)(d * 2);
}
"""


@pytest.mark.parametrize("w", [2, 4, 8, 16, 32])
def test_shuffles_with_width(w: int) -> None:
    n = 96  # three warps
    x = RNG.integers(0, 100, n).astype(np.int32)
    y = emu.zeros(7 * n, np.int32)
    mod(SHUFFLES).get_function("shf")((1,), (n,), (emu.asarray(x), y, np.int32(w)))
    y = y.get().reshape(7, n)
    seg = x.reshape(-1, w)
    np.testing.assert_array_equal(y[0], np.repeat(seg.sum(1), w))
    lane = np.arange(n) % w
    down = np.where(lane + 1 < w, np.roll(x, -1), x)
    np.testing.assert_array_equal(y[1], down)
    up = np.where(lane >= 2, np.roll(x, 2), x)
    np.testing.assert_array_equal(y[2], up)
    np.testing.assert_array_equal(y[3], np.repeat(seg[:, 1 % w], w))
    bal = [int(sum(int(b) << k for k, b in enumerate(x[j * 32:(j + 1) * 32] & 1))) for j in range(3)]
    np.testing.assert_array_equal(y[4].view(np.uint32), np.repeat(np.array(bal, np.uint32), 32))
    anyall = [int((x[j * 32:(j + 1) * 32] == 7).any()) + 2 for j in range(3)]
    np.testing.assert_array_equal(y[5], np.repeat(anyall, 32))
    np.testing.assert_array_equal(y[6], x.reshape(-1, 2)[:, ::-1].ravel() if w >= 2 else x)


ATOMICS = r"""
extern "C" __global__ void atoms(int* ci, unsigned* cu, float* cf, double* cd, int* mx, int* mn,
                                 unsigned* inc, int* cas, int* ticket, const int* vals) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    ticket[i] = atomicAdd(ci, 1);
    atomicAdd(cu, 2u);
    atomicAdd(cf, 0.5f);
    atomicAdd(cd, 0.25);
    atomicMax(mx, vals[i]);
    atomicMin(mn, vals[i]);
    atomicInc(inc, 9u);
    int old = *cas, assumed;
    do { assumed = old; old = atomicCAS(cas, assumed, assumed + 3); } while (old != assumed);
}
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_contended_atomics(workers: int) -> None:
    nb, bs = 64, 256
    n = nb * bs
    vals = RNG.integers(-10**6, 10**6, n).astype(np.int32)
    bufs = [emu.zeros(1, np.int32), emu.zeros(1, np.uint32), emu.zeros(1, np.float32), emu.zeros(1, np.float64),
            emu.asarray(np.array([-2**31], np.int32)), emu.asarray(np.array([2**31 - 1], np.int32)),
            emu.zeros(1, np.uint32), emu.zeros(1, np.int32), emu.zeros(n, np.int32)]
    with emu.workers(workers):
        mod(ATOMICS).get_function("atoms")((nb,), (bs,), (*bufs, emu.asarray(vals)))
    ci, cu, cf, cd, mx, mn, inc, cas, ticket = (b.get() for b in bufs)
    assert ci[0] == n and cu[0] == 2 * n and cf[0] == n * 0.5 and cd[0] == n * 0.25
    assert mx[0] == vals.max() and mn[0] == vals.min()
    assert inc[0] == n % 10
    assert cas[0] == 3 * n
    np.testing.assert_array_equal(np.sort(ticket), np.arange(n))


def test_fp16_and_bf16_conversions() -> None:
    src = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void conv(const float* x, __half* h, unsigned short* b, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half v = __float2half(x[i]);
    h[i] = v;
    b[i] = __bfloat16_as_ushort(__float2bfloat16(x[i]));
    back[i] = __half2float(__hadd(v, __float2half(1.0f)));
}
"""
    x = np.concatenate([RNG.standard_normal(500).astype(np.float32) * 100,
                        np.array([0, -0.0, 1e-8, 6e-5, 65504, 65520, 1e6, np.inf, -np.inf], np.float32)])
    n = x.size
    h, b, back = emu.zeros(n, np.float16), emu.zeros(n, np.uint16), emu.zeros(n)
    mod(src).get_function("conv")(((n + 127) // 128,), (128,), (emu.asarray(x), h, b, back, np.int32(n)))
    with np.errstate(over="ignore"):
        ref_h = x.astype(np.float16)
    np.testing.assert_array_equal(h.get().view(np.uint16), ref_h.view(np.uint16))
    np.testing.assert_array_equal(back.get(), (ref_h.astype(np.float32) + np.float32(1)).astype(np.float16)
                                  .astype(np.float32))
    u = x.view(np.uint32).astype(np.uint64)
    ref_b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(b.get(), ref_b)


def test_vector_loads_math_and_intrinsics() -> None:
    src = r"""
extern "C" __global__ void k(const float* x, float* y, unsigned* u, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        float4 r = make_float4(rsqrtf(v.x), __expf(v.y), __fdividef(v.z, 3.0f), max(v.w, 0.5f));
        reinterpret_cast<float4*>(y)[i] = r;
        u[i] = __popc((unsigned)i) + 100u * (unsigned)min(i, 7) + 10000u * (__brev(1u) >> 31);
    }
}
"""
    n4 = 250
    x = RNG.uniform(0.1, 2, 4 * n4).astype(np.float32)
    y, u = emu.zeros(4 * n4), emu.zeros(n4, np.uint32)
    mod(src).get_function("k")((2,), (128,), (emu.asarray(x), y, u, np.int32(n4)))
    x4 = x.reshape(-1, 4).astype(np.float64)
    ref = np.stack([1 / np.sqrt(x4[:, 0]), np.exp(x4[:, 1]), x4[:, 2] / 3, np.maximum(x4[:, 3], 0.5)], 1)
    np.testing.assert_allclose(y.get().reshape(-1, 4), ref, rtol=1e-6)
    i = np.arange(n4)
    ref_u = np.array([bin(v).count("1") for v in i]) + 100 * np.minimum(i, 7) + 10000
    np.testing.assert_array_equal(u.get(), ref_u)


def test_shared_declaration_forms() -> None:
    src = r"""
__shared__ float global_scope[32];
__device__ float helper(float v) {
    static __shared__ float partial[32];
    partial[threadIdx.x] = v;
    __syncthreads();
    return partial[31 - threadIdx.x];
}
extern "C" __global__ void k(const float* x, float* y) {
    volatile __shared__ int flag;
    __shared__ __align__(16) float4 quad[8];
    if (threadIdx.x == 0) flag = 7;
    global_scope[threadIdx.x] = 2.0f * x[threadIdx.x];
    if (threadIdx.x < 8) quad[threadIdx.x] = make_float4(1, 2, 3, 4);
    __syncthreads();
    y[threadIdx.x] = helper(global_scope[threadIdx.x]) + flag + quad[threadIdx.x % 8].w;
}
"""
    x = RNG.standard_normal(32).astype(np.float32)
    y = emu.zeros(32)
    m = mod(src)
    m.get_function("k")((2,), (32,), (emu.asarray(x), y))
    np.testing.assert_allclose(y.get(), 2 * x[::-1].astype(np.float64) + 11, rtol=1e-6)
    # both blocks store the same values into y: a race on device memory, but a harmless one
    with emu.check_mode(), pytest.warns(emu.RaceWarning, match=r"`y\[\d+\]`.*the same value"):
        m.get_function("k")((2,), (32,), (emu.asarray(x), y))


def test_syncthreads_count_and_or() -> None:
    src = r"""
extern "C" __global__ void k(const int* x, int* out) {
    int v = x[threadIdx.x];
    int c = __syncthreads_count(v > 0);
    int a = __syncthreads_and(v > -1000);
    int o = __syncthreads_or(v == 42);
    if (threadIdx.x == 0) { out[0] = c; out[1] = a; out[2] = o; }
}
"""
    x = RNG.integers(-5, 5, 200).astype(np.int32)
    out = emu.zeros(3, np.int32)
    mod(src).get_function("k")((1,), (200,), (emu.asarray(x), out))
    np.testing.assert_array_equal(out.get(), [(x > 0).sum(), 1, 0])


def test_printf_appears_on_python_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    src = r"""
extern "C" __global__ void hello(int n) {
    if (threadIdx.x < 2) printf("block %d thread %d of %d: %.2f\n", blockIdx.x, threadIdx.x, n, 1.25f);
}
"""
    mod(src).get_function("hello")((2,), (32,), (np.int32(7),))
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == sorted(f"block {b} thread {t} of 7: 1.25" for b in range(2) for t in range(2))


def test_device_functions_min_max_and_using_namespace_std() -> None:
    src = r"""
#include <algorithm>
using namespace std;
__device__ __forceinline__ float clampf(float v, float lo, float hi) { return min(max(v, lo), hi); }
__device__ __noinline__ int imix(int a, unsigned b) { return (int)min(a, b) + max(a, 3); }
extern "C" __global__ void __launch_bounds__(128) k(const float* x, float* y, int* z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = clampf(__ldg(&x[i]), -0.5f, 0.5f); z[i] = imix(i, 5u); }
}
"""
    n = 300
    x = RNG.standard_normal(n).astype(np.float32)
    y, z = emu.zeros(n), emu.zeros(n, np.int32)
    mod(src).get_function("k")((3,), (128,), (emu.asarray(x), y, z, np.int32(n)))
    np.testing.assert_array_equal(y.get(), np.clip(x, -0.5, 0.5))
    i = np.arange(n)
    np.testing.assert_array_equal(z.get(), np.minimum(i, 5) + np.maximum(i, 3))


def test_device_array_api() -> None:
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = emu.asarray(h)
    assert d.shape == (3, 4) and d.dtype == np.float32 and d.size == 12 and d.nbytes == 48 and d.ndim == 2
    r = d.reshape(4, -1)
    assert r.shape == (4, 3)
    np.testing.assert_array_equal(r.get(), h.reshape(4, 3))
    c = d.copy()
    d.set(np.zeros((3, 4), np.float32))
    np.testing.assert_array_equal(c.get(), h)
    np.testing.assert_array_equal(emu.asnumpy(r), np.zeros((4, 3)))  # a view of d
    z = emu.asarray(np.float32(3.5))  # 0-d arrays stay 0-d
    assert z.shape == () and z.size == 1 and z.get().shape == () and float(z) == 3.5
    t = emu.asarray(np.arange(6, dtype=np.int64).reshape(2, 3).T)  # non-contiguous input
    np.testing.assert_array_equal(t.get(), np.arange(6).reshape(2, 3).T)
    assert np.isnan(emu.empty(5).get()).all()  # fresh device memory is garbage, not zeros
    assert (emu.zeros((2, 2), np.int32).get() == 0).all()
    with pytest.raises(TypeError):
        np.asarray(d)
    with pytest.raises(TypeError):
        d.set(np.zeros((3, 4), np.float64))
    emu.synchronize()


def test_multiple_workers_match_one_worker() -> None:
    with emu.workers(2):
        got, ref = run_sgemm(SGEMM, 64, 48, 80)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_fuzz_schedules_passes_correct_and_catches_missing_barrier() -> None:
    good = r"""
extern "C" __global__ void shift(const float* x, float* y) {
    __shared__ float s[128];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = threadIdx.x ? s[threadIdx.x - 1] : 0.0f;
}
"""
    bad = good.replace("__syncthreads();", "")
    x = RNG.standard_normal(128).astype(np.float32)

    def run(src: str) -> emu.DeviceArray:
        y = emu.zeros(128)
        mod(src).get_function("shift")((1,), (128,), (emu.asarray(x), y))
        return y

    out = emu.fuzz_schedules(lambda: run(good))
    np.testing.assert_array_equal(out, np.concatenate([[0], x[:-1]]))
    np.testing.assert_array_equal(run(bad).get(), np.concatenate([[0], x[:-1]]))  # forward order hides the bug
    with pytest.raises(emu.ScheduleMismatch, match="__syncthreads"):
        emu.fuzz_schedules(lambda: run(bad))
