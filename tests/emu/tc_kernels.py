"""CUDA C kernels of the tensor-core tests (tests/emu/test_emu_tensor_cores.py), run on the emulator
and, under ``-m gpu``, on a GPU: small, one warp or one block each, written the way the HGEMM lab's
rungs use each feature."""

# ---- 16-bit conversions and arithmetic: one thread per element ------------------------------------
CONVERT = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// float32 -> half / bfloat16 (round to nearest even) and back, as raw bits
extern "C" __global__ void convert(const float* x, unsigned short* h, unsigned short* b, float* h_back,
                                   float* b_back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half hv = __float2half_rn(x[i]);
    __nv_bfloat16 bv = __float2bfloat16_rn(x[i]);
    h[i] = __half_as_ushort(hv);
    b[i] = __bfloat16_as_ushort(bv);
    h_back[i] = __half2float(hv);
    b_back[i] = __bfloat162float(bv);
}

// every 16-bit pattern back to float32
extern "C" __global__ void widen(const unsigned short* bits, float* from_half, float* from_bf16, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    from_half[i] = __half2float(__ushort_as_half(bits[i]));
    from_bf16[i] = __bfloat162float(__ushort_as_bfloat16(bits[i]));
}

// a + b, a * b, a * b + c in half and in bfloat16 (inputs given as 16-bit patterns)
extern "C" __global__ void arith(const unsigned short* a, const unsigned short* b, const unsigned short* c,
                                 unsigned short* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half ha = __ushort_as_half(a[i]), hb = __ushort_as_half(b[i]), hc = __ushort_as_half(c[i]);
    __nv_bfloat16 ba = __ushort_as_bfloat16(a[i]), bb = __ushort_as_bfloat16(b[i]), bc = __ushort_as_bfloat16(c[i]);
    out[6 * i + 0] = __half_as_ushort(__hadd(ha, hb));
    out[6 * i + 1] = __half_as_ushort(__hmul(ha, hb));
    out[6 * i + 2] = __half_as_ushort(__hfma(ha, hb, hc));
    out[6 * i + 3] = __bfloat16_as_ushort(__hadd(ba, bb));
    out[6 * i + 4] = __bfloat16_as_ushort(__hmul(ba, bb));
    out[6 * i + 5] = __bfloat16_as_ushort(__hfma(ba, bb, bc));
}
"""

# ---- mma.sync m16n8k16 with ldmatrix fragment loads: one warp, one 16x8 tile ---------------------
MMA = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// D (16x8, f32) = A (16x16, row-major) * B (16x8, row-major: K x N). A comes in with ldmatrix.x4;
// B is stored k-major, so ldmatrix.x2.trans gives each lane its pairs along k (b_trans = 0: the
// learner who drops .trans gets B's rows where the instruction wants columns).
// Dh: the same product with f16 accumulators (mma ... .f16.f16.f16.f16), C = 0.
extern "C" __global__ void mma_f16(const __half* A, const __half* B, float* D, __half* Dh, int b_trans) {
    __shared__ __align__(16) __half As[16][16];
    __shared__ __align__(16) __half Bs[16][8];
    int lane = threadIdx.x;
    for (int i = lane; i < 16 * 16; i += 32) As[i / 16][i % 16] = A[i];
    for (int i = lane; i < 16 * 8; i += 32) Bs[i / 8][i % 8] = B[i];
    __syncthreads();

    unsigned a[4], b[2];
    // lane l gives row l % 8 of 8x8 matrix l / 8; the matrices are A's quadrants (0,0) (8,0) (0,8) (8,8)
    unsigned a_row = smem_addr(&As[lane % 8 + 8 * ((lane / 8) % 2)][8 * (lane / 16)]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(a_row));
    unsigned b_row = smem_addr(&Bs[lane % 16][0]);  // lanes 0-15: rows k = 0..15 of B
    if (b_trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(b[0]), "=r"(b[1]) : "r"(b_row));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(b[0]), "=r"(b[1]) : "r"(b_row));
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    unsigned h[2] = {0u, 0u};
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
                 : "+r"(h[0]), "+r"(h[1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    // C/D fragment: lane holds rows g and g + 8, columns 2t and 2t + 1
    int g = lane / 4, t = lane % 4;
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
    *(unsigned*)&Dh[g * 8 + 2 * t] = h[0];
    *(unsigned*)&Dh[(g + 8) * 8 + 2 * t] = h[1];
}

// D = A * B + C in bfloat16 with the operands stored transposed: At = A^T (16x16), Bt = B^T (8x16).
// A comes in with ldmatrix.x4.trans, B with two ldmatrix.x1 (no .trans: Bt's rows are B's columns).
extern "C" __global__ void mma_bf16(const __nv_bfloat16* At, const __nv_bfloat16* Bt, const float* C, float* D) {
    __shared__ __align__(16) __nv_bfloat16 As[16][16];
    __shared__ __align__(16) __nv_bfloat16 Bs[8][16];
    int lane = threadIdx.x;
    for (int i = lane; i < 16 * 16; i += 32) As[i / 16][i % 16] = At[i];
    for (int i = lane; i < 8 * 16; i += 32) Bs[i / 16][i % 16] = Bt[i];
    __syncthreads();

    unsigned a[4], b[2];
    unsigned a_row = smem_addr(&As[8 * (lane / 16) + lane % 8][8 * ((lane / 8) % 2)]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(a_row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(b[0]) : "r"(smem_addr(&Bs[lane % 8][0])));
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(b[1]) : "r"(smem_addr(&Bs[lane % 8][8])));
    int g = lane / 4, t = lane % 4;
    float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    float d[4];
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// ---- ldmatrix alone, from dynamic shared memory: the register layout itself
// One 8x8 matrix of 16-bit values M (row-major) in extern __shared__ memory; lane l gives the
// address of row l % 8 (x1 reads rows from lanes 0-7 only). out[l] = lane l's register, out[32 + l]
// the same with .trans.
extern "C" __global__ void ldmatrix_x1(const unsigned short* M, unsigned* out) {
    extern __shared__ __align__(16) unsigned short tile[];
    for (int i = threadIdx.x; i < 64; i += 32) tile[i] = M[i];
    __syncthreads();
    unsigned addr = (unsigned)__cvta_generic_to_shared(&tile[8 * (threadIdx.x % 8)]);
    unsigned r, rt;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r) : "r"(addr));
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(rt) : "r"(addr));
    out[threadIdx.x] = r;
    out[32 + threadIdx.x] = rt;
}
"""

# ---- WMMA: one warp per 16x16 tile of C (rung 1) ---------------------------------------------------
WMMA = r"""
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

// C (M x N, f32, row-major) = A (M x K, half, row-major) * B (K x N, half, stored column-major
// with leading dimension K) + C; blockDim.x = 32 * warps, one warp per 16x16 tile, M, N, K
// multiples of 16.
extern "C" __global__ void wmma_gemm(const __half* A, const __half* B, float* C, int M, int N, int K) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int tiles_n = N / 16;
    int tm = warp / tiles_n, tn = warp % tiles_n;
    if (tm >= M / 16) return;  // whole warps leave together
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, C + tm * 16 * N + tn * 16, N, wmma::mem_row_major);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + tm * 16 * K + k, K);
        wmma::load_matrix_sync(b, B + tn * 16 * K + k, K);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + tm * 16 * N + tn * 16, acc, N, wmma::mem_row_major);
}

// Rung 2's pattern: tiles staged through shared memory, the product stored from a fragment to
// shared memory and read back by other lanes (barrier = 0 drops the __syncthreads() between).
extern "C" __global__ void wmma_smem(const __half* A, const __half* B, float* C, int barrier) {
    __shared__ __align__(32) __half As[16 * 16];
    __shared__ __align__(32) __half Bs[16 * 16];
    __shared__ __align__(32) float Cs[16 * 16];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) { As[i] = A[i]; Bs[i] = B[i]; }
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(a, As, 16);
    wmma::load_matrix_sync(b, Bs, 16);
    wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(Cs, acc, 16, wmma::mem_col_major);
    if (barrier) __syncthreads();
    // C row-major from Cs column-major, each thread reading elements that other lanes stored
    for (int i = threadIdx.x; i < 256; i += blockDim.x) C[255 - i] = Cs[((255 - i) % 16) * 16 + (255 - i) / 16];
}
"""

# ---- cp.async multi-stage pipeline (rung 5's skeleton) -------------------------------------------
PIPELINE = r"""
#define STAGES 3
#define TILE 256  // floats per tile: 64 threads x 16 bytes

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

// out = each 256-float tile of in, reversed. Tile t+STAGES-1 is in flight while tile t is read;
// wait = 0 forgets cp.async.wait_group (a race: the copy may not have landed); barrier = 0 forgets
// the __syncthreads() after it (a race: other threads' copies landed at their own waits).
extern "C" __global__ void reverse_tiles(const float* in, float* out, int ntiles, int wait, int barrier) {
    __shared__ __align__(16) float buf[STAGES][TILE];
    int tid = threadIdx.x;
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ntiles) cp_async16(&buf[s][4 * tid], in + s * TILE + 4 * tid);
        cp_async_commit();
    }
    for (int t = 0; t < ntiles; ++t) {
        int next = t + STAGES - 1;
        if (next < ntiles) cp_async16(&buf[next % STAGES][4 * tid], in + next * TILE + 4 * tid);
        cp_async_commit();
        if (wait) cp_async_wait<STAGES - 1>();  // all but the STAGES-1 newest groups: tile t has landed
        if (barrier) __syncthreads();
        for (int i = tid; i < TILE; i += blockDim.x) out[t * TILE + i] = buf[t % STAGES][TILE - 1 - i];
        __syncthreads();
    }
}

// The same copy with 4- and 8-byte cp.async.ca, wait_all, and the src-size operand (zero fill).
extern "C" __global__ void small_copies(const float* in, float* out) {
    __shared__ __align__(16) float s[64];
    int tid = threadIdx.x;  // 16 threads
    unsigned a = (unsigned)__cvta_generic_to_shared(&s[4 * tid]);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(a), "l"(in + 4 * tid));
    // src-size 0 on even threads: nothing is read, the 4 bytes are zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(a + 4), "l"(in + 4 * tid + 1), "r"(tid % 2 ? 4 : 0));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" :: "r"(a + 8), "l"(in + 4 * tid + 2));
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    for (int i = 0; i < 4; ++i) out[4 * tid + i] = s[4 * ((tid + 1) % 16) + i];
}

// ---- the forms inline PTX takes in real kernels
// a macro spanning lines; a { .reg ... } block (CUTLASS's shared-address idiom); an operand both
// read and written ("+r"). (NVRTC refuses symbolic operand names and a "0"-tied input here: seen on an H200)
#define CP_ASYNC_CG(dst, src) \
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" \
                 :: "r"(dst), "l"(src))

extern "C" __global__ void forms(const float* in, float* out) {
    __shared__ __align__(16) float s[128];
    unsigned base;
    asm volatile("{\n"
                 "  .reg .u64 p;\n"
                 "  cvta.to.shared.u64 p, %1;\n"
                 "  cvt.u32.u64 %0, p;\n"
                 "}\n"
                 : "=r"(base) : "l"(s));
    CP_ASYNC_CG(base + 16 * threadIdx.x, in + 4 * threadIdx.x);
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    float v = s[(4 * threadIdx.x + 7) % 128], w;
    asm("mov.b32 %0, %1;" : "=f"(w) : "f"(v));
    unsigned t = threadIdx.x;  // read and written: "+r" (nvcc refuses a "0"-tied input here)
    asm("mov.u32 %0, %0;" : "+r"(t));
    out[threadIdx.x] = w + t;
}
"""


# ---- the __pipeline_* primitives of <cuda_pipeline.h> (cp.async underneath) ----------------------
PIPELINE_PRIMITIVES = r"""
#include <cuda_pipeline.h>
// out = in with each thread's 16 bytes taken from thread (tid + 5) % 32, through dynamic shared memory
extern "C" __global__ void rotate(const float* in, float* out) {
    extern __shared__ __align__(16) float s[];
    int tid = threadIdx.x;
    __pipeline_memcpy_async(&s[4 * tid], &in[4 * tid], 16);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    for (int i = 0; i < 4; ++i) out[4 * tid + i] = s[4 * ((tid + 5) % 32) + i];
}
"""
