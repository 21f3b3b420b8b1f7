// The FlashAttention-2 ladder (Phase 8b): O = softmax(Q K^T / sqrt(D) [+ causal mask]) V, the
// logsumexp of every row saved, and the backward pass. Driven by benchmarks/phase8b_flash.py (validate
// each rung, then time it against PyTorch's SDPA) and tested on the emulator by
// tests/emu/test_flash_reference.py.
//
// Layout: Q, K, V, O (and dO, dQ, dK, dV) are (B*H, T, D) contiguous, 16-bit (fp16 or bf16, the kernels
// are templates on the type); LSE is (B*H, T) fp32, natural logarithm. Any T >= 1: rows past the end of
// a tile are zero-filled on load and never stored (keys past T are masked), the caller pads nothing.
// D = 64 or 128 (a template argument). `causal` is a run-time flag: key j is seen by query i iff j <= i.
//
// Softmax in the log2 domain: scale_log2 = log2(e) / sqrt(D) folded into the scores once, so every
// exponential is one exp2 (ex2.approx on the GPU) and the running max is kept in log2 units (rung 6 on:
// the max of the raw scores, the scale applied inside the exp2's FFMA).
//
// Forward rungs (each changes one thing):
//   1 flash_fwd_1_scalar  one thread a query row, fp32 FMAs, K/V tiles in shared memory (the baseline)
//   2 flash_fwd_mma<.., PLAIN, LDM=false, 1>   both products on mma.sync m16n8k16, a warp per 16 query
//                        rows, Q fragments in registers, S -> P kept in registers (the accumulator
//                        layout of S is the A-fragment layout of P.V), fragments read from shared memory
//                        32 bits at a time (plain rows: 8-way bank conflicts)
//   3 ... SWIZZLED, LDM=true, 1   XOR-swizzled rows + ldmatrix (no bank conflicts, 1 instruction a 4 regs)
//   4 ... PIPE=2         K/V tiles double-buffered by cp.async: tile j+1 loads while tile j is computed
//   5 ... tuned tiles    WARPS x MT x BC chosen on the card among candidates (phase8b_flash.py; on an
//                        H200: 4 warps x 2 m-tiles = 128 query rows, 32 keys a tile at D=128, 64 at
//                        D=64: each K/V fragment feeds two MMAs, Q fragments re-read from shared
//                        memory), and causal blocks longest-first
//   6 ... LEAN=true      fewer instructions a score in the softmax (the part that competes with the
//                        tensor cores for issue slots): the scale folded into the exp2's FFMA, and
//                        the output's rescaling skipped by a warp whose rows' maxima did not move
//   7 ... PIPE=3         K and V in separate cp.async groups and barriers (FlashAttention-2's schedule):
//                        S(j) waits only for K(j), P.V only for V(j); K(j+1) is issued as soon as
//                        K(j) is in, V(j+1) as soon as V(j) is
// Rungs 6 and 7 measured slower than rung 5 on an H200 (benchmarks/phase8b_flash_NOTES.md says why).
// Every rung skips the key tiles wholly above the diagonal (causal) and masks only the tiles that
// touch the diagonal or the end of the sequence.
//
// Backward (flash_bwd_*): D_i = rowsum(dO_i * O_i) by flash_bwd_dot_do_o; then a block per KV tile
// (a warp per 16 keys) walks the query tiles, recomputes P from the logsumexp, accumulates dV and dK
// in registers, and adds its share of dQ into an fp32 buffer with atomics; flash_bwd_dq_convert scales
// and rounds dQ. See flash_bwd_mma for why atomics rather than a second pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef INFINITY  // NVRTC has no <cmath>
#define INFINITY __int_as_float(0x7f800000)
#endif

typedef __nv_bfloat16 bf16;
typedef __half fp16;
typedef unsigned short u16;

template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<bf16>(bf16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f32<fp16>(fp16 x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ fp16 from_f32<fp16>(float x) { return __float2half_rn(x); }

template <typename T> struct IsBf16 { static constexpr bool value = false; };
template <> struct IsBf16<bf16> { static constexpr bool value = true; };

template <typename T> __device__ __forceinline__ float bits_to_f32(u16 b) {
    T v;
    *reinterpret_cast<u16*>(&v) = b;
    return to_f32<T>(v);
}
template <typename T> __device__ __forceinline__ u16 f32_to_bits(float x) {
    T v = from_f32<T>(x);
    return *reinterpret_cast<u16*>(&v);
}
// two floats -> one 32-bit register of two 16-bit values, `lo` in the low half (the lower column/k index)
// (one cvt.rn.{bf16x2,f16x2}.f32 on the GPU)
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    if constexpr (sizeof(T) == 2 && IsBf16<T>::value) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
}

// ----------------------------------------------------------------------------------------------
// Shared-memory tiles (as in hgemm.cu): R rows x CW 16-bit columns moved in 16-byte chunks; SWIZZLED
// rows XOR the chunk index with the row so that the 8 rows of one ldmatrix phase hit 8 bank groups.
enum { PLAIN = 0, SWIZZLED = 2 };

template <int CW, int LAYOUT> struct Tile {
    static __device__ __forceinline__ int offset(int row, int chunk) {
        if constexpr (LAYOUT == SWIZZLED) {
            if constexpr (CW / 8 >= 8) chunk ^= row & 7;
            else if constexpr (CW / 8 == 4) chunk ^= (row >> 1) & 3;
            else static_assert(CW / 8 >= 4, "swizzle needs at least 4 chunks a row");
        }
        return row * CW + chunk * 8;
    }
    // the element (row, col)
    static __device__ __forceinline__ int at(int row, int col) { return offset(row, col / 8) + col % 8; }
};

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Rows r0..r0+R-1 of a rows x CW row-major matrix (CW = D: whole rows, 16-byte aligned) into a tile;
// rows past `rows` are zero-filled with ordinary stores (the caller's barrier publishes both kinds).
template <int R, int CW, int LAYOUT, int THREADS>
__device__ __forceinline__ void load_rows(u16* s, const u16* g, int rows, int r0) {
    constexpr int CPR = CW / 8, CHUNKS = R * CPR;
    static_assert(CHUNKS % THREADS == 0, "tile chunks must divide among the threads");
#pragma unroll
    for (int it = 0; it < CHUNKS / THREADS; ++it) {
        const int i = it * THREADS + threadIdx.x;
        const int row = i / CPR, ch = i % CPR;
        u16* dst = s + Tile<CW, LAYOUT>::offset(row, ch);
        if (r0 + row < rows) cp_async16(dst, g + (size_t)(r0 + row) * CW + ch * 8);
        else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
}

// ----------------------------------------------------------------------------------------------
// mma.sync m16n8k16 (fp32 accumulators) and ldmatrix, as in hgemm.cu.

template <typename T>
__device__ __forceinline__ void mma16816(float d[4], const unsigned a[4], const unsigned b[2]) {
    if constexpr (IsBf16<T>::value)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <bool TRANS> __device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const u16* p) {
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

// Fragment loads from a tile. Names say how the operand is stored in the tile:
//   a_rowmajor: A (16 x 16 at m, k) stored m x k        a_kmajor: A stored k x m
//   b_nmajor:   B (16 k x 16 n: two n8 tiles) stored n x k        b_kmajor: B stored k x n
// With LDM, one ldmatrix.x4 each; without, 32-bit shared loads in the mma fragment layout
// (lane = 4 g + q holds rows g, g+8 and columns 2q, 2q+1, 2q+8, 2q+9).
template <int CW, int LAYOUT, bool LDM>
__device__ __forceinline__ void a_rowmajor(unsigned a[4], const u16* s, int m, int k) {
    const int lane = threadIdx.x % 32;
    using Tl = Tile<CW, LAYOUT>;
    if constexpr (LDM) {
        const int j8 = lane / 8, r8 = lane % 8;
        ldmatrix_x4<false>(a, s + Tl::offset(m + r8 + 8 * (j8 % 2), k / 8 + j8 / 2));
    } else {
        const int g = lane / 4, q = lane % 4;
        a[0] = *reinterpret_cast<const unsigned*>(s + Tl::at(m + g, k + 2 * q));
        a[1] = *reinterpret_cast<const unsigned*>(s + Tl::at(m + g + 8, k + 2 * q));
        a[2] = *reinterpret_cast<const unsigned*>(s + Tl::at(m + g, k + 2 * q + 8));
        a[3] = *reinterpret_cast<const unsigned*>(s + Tl::at(m + g + 8, k + 2 * q + 8));
    }
}
template <int CW, int LAYOUT>
__device__ __forceinline__ void a_kmajor(unsigned a[4], const u16* s, int m, int k) {
    const int lane = threadIdx.x % 32, j8 = lane / 8, r8 = lane % 8;
    ldmatrix_x4<true>(a, s + Tile<CW, LAYOUT>::offset(k + r8 + 8 * (j8 / 2), m / 8 + (j8 % 2)));
}
// b[0..1]: the n8 tile at n, b[2..3]: the one at n + 8
template <int CW, int LAYOUT, bool LDM>
__device__ __forceinline__ void b_nmajor(unsigned b[4], const u16* s, int n, int k) {
    const int lane = threadIdx.x % 32;
    using Tl = Tile<CW, LAYOUT>;
    if constexpr (LDM) {
        const int j8 = lane / 8, r8 = lane % 8;
        ldmatrix_x4<false>(b, s + Tl::offset(n + r8 + 8 * (j8 / 2), k / 8 + (j8 % 2)));
    } else {
        const int g = lane / 4, q = lane % 4;
        b[0] = *reinterpret_cast<const unsigned*>(s + Tl::at(n + g, k + 2 * q));
        b[1] = *reinterpret_cast<const unsigned*>(s + Tl::at(n + g, k + 2 * q + 8));
        b[2] = *reinterpret_cast<const unsigned*>(s + Tl::at(n + 8 + g, k + 2 * q));
        b[3] = *reinterpret_cast<const unsigned*>(s + Tl::at(n + 8 + g, k + 2 * q + 8));
    }
}
template <int CW, int LAYOUT, bool LDM>
__device__ __forceinline__ void b_kmajor(unsigned b[4], const u16* s, int n, int k) {
    const int lane = threadIdx.x % 32;
    using Tl = Tile<CW, LAYOUT>;
    if constexpr (LDM) {
        const int j8 = lane / 8, r8 = lane % 8;
        ldmatrix_x4<true>(b, s + Tl::offset(k + r8 + 8 * (j8 % 2), n / 8 + j8 / 2));
    } else {
        const int g = lane / 4, q = lane % 4;
        auto pair = [&](int kr, int c) {
            return (unsigned)s[Tl::at(kr, c)] | ((unsigned)s[Tl::at(kr + 1, c)] << 16);
        };
        b[0] = pair(k + 2 * q, n + g);
        b[1] = pair(k + 2 * q + 8, n + g);
        b[2] = pair(k + 2 * q, n + 8 + g);
        b[3] = pair(k + 2 * q + 8, n + 8 + g);
    }
}

// p[0] += a, p[1] += b (p 8-byte aligned): one red.global.add.v2.f32 on Hopper, two scalar ones before it
__device__ __forceinline__ void atomic_add2(float* p, float a, float b) {
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ----------------------------------------------------------------------------------------------
// Rung 1: one thread a query row (64 a block), the scores and the output in fp32 FMAs. K and V tiles
// of 64 keys in shared memory (every thread reads the same key: a broadcast), Q transposed in shared
// memory (thread t reads column t: no conflicts), the output row in registers. Keys in chunks of 16:
// scores of a chunk, then one online-softmax update (one rescale of the output a chunk).
template <typename T, int D>
__global__ void __launch_bounds__(64) flash_fwd_1_scalar(const T* Q, const T* K, const T* V, T* O, float* LSE,
                                                         int seq, float scale_log2, int causal) {
    constexpr int BR = 64, BC = 64, CH = 16;
    __shared__ __align__(16) u16 qs[D][BR];
    __shared__ __align__(16) u16 ks[BC * D];
    __shared__ __align__(16) u16 vs[BC * D];
    const int bh = blockIdx.y, q0 = blockIdx.x * BR, t = threadIdx.x, row = q0 + t;
    const size_t base = (size_t)bh * seq * D;
    const u16* q = reinterpret_cast<const u16*>(Q) + base;
    const u16* k = reinterpret_cast<const u16*>(K) + base;
    const u16* v = reinterpret_cast<const u16*>(V) + base;
    for (int i = t; i < BR * D; i += BR) {
        const int r = i / D, c = i % D;
        qs[c][r] = q0 + r < seq ? q[(size_t)(q0 + r) * D + c] : u16(0);
    }
    float o[D];
#pragma unroll
    for (int c = 0; c < D; ++c) o[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int kv_end = causal ? min(seq, q0 + BR) : seq;
    for (int k0 = 0; k0 < kv_end; k0 += BC) {
        __syncthreads();  // the previous tile is no longer read (and qs is written, the first time)
        for (int i = t; i < BC * D; i += BR) {
            const bool in = k0 + i / D < seq;
            ks[i] = in ? k[(size_t)k0 * D + i] : u16(0);
            vs[i] = in ? v[(size_t)k0 * D + i] : u16(0);
        }
        __syncthreads();
        for (int j0 = 0; j0 < BC && k0 + j0 < kv_end; j0 += CH) {
            float s[CH];
#pragma unroll
            for (int j = 0; j < CH; ++j) s[j] = 0.0f;
            for (int c = 0; c < D; ++c) {
                const float qc = bits_to_f32<T>(qs[c][t]);
#pragma unroll
                for (int j = 0; j < CH; ++j) s[j] += qc * bits_to_f32<T>(ks[(j0 + j) * D + c]);
            }
            float mx = m;
#pragma unroll
            for (int j = 0; j < CH; ++j) {
                const int key = k0 + j0 + j;
                s[j] = (key >= seq || (causal && key > row)) ? -INFINITY : s[j] * scale_log2;
                mx = fmaxf(mx, s[j]);
            }
            const float mu = mx == -INFINITY ? 0.0f : mx;  // a row with nothing seen yet
            const float alpha = exp2f(m - mu);
            m = mx;
            l *= alpha;
#pragma unroll
            for (int j = 0; j < CH; ++j) {
                s[j] = exp2f(s[j] - mu);
                l += s[j];
            }
#pragma unroll
            for (int c = 0; c < D; ++c) {
                float acc = o[c] * alpha;
#pragma unroll
                for (int j = 0; j < CH; ++j) acc += s[j] * bits_to_f32<T>(vs[(j0 + j) * D + c]);
                o[c] = acc;
            }
        }
    }
    if (row < seq) {
        const float inv = 1.0f / l;
        u16* out = reinterpret_cast<u16*>(O) + base + (size_t)row * D;
#pragma unroll
        for (int c = 0; c < D; ++c) out[c] = f32_to_bits<T>(o[c] * inv);
        LSE[(size_t)bh * seq + row] = (m + log2f(l)) * 0.69314718055994531f;
    }
}

// ----------------------------------------------------------------------------------------------
// Rungs 2-7: mma.sync. WARPS warps, each MT m-tiles of 16 query rows (BR = 16 WARPS MT rows a block);
// key tiles of BC. S (16 x BC a m-tile) and O (16 x D) are fp32 accumulators in registers; P is
// rounded to T and fed back as the A operand of P.V without leaving registers.
// LAYOUT/LDM: how tiles are stored and fragments read; PIPE: 1 = load, wait, compute; 2 = K/V
// double-buffered by cp.async, one group a tile; 3 = double-buffered, K and V in groups of their own;
// LONGEST_FIRST: causal blocks with the most key tiles start first; LEAN: see rung 6.
template <typename T, int D, int WARPS, int MT, int BC, int LAYOUT, bool LDM, int PIPE, bool LONGEST_FIRST,
          bool LEAN>
__global__ void __launch_bounds__(WARPS * 32) flash_fwd_mma(const T* Q, const T* K, const T* V, T* O, float* LSE,
                                                            int seq, float scale_log2, int causal) {
    constexpr int THREADS = WARPS * 32, BR = 16 * WARPS * MT, NT = BC / 8, DT = D / 8, KD = D / 16;
    constexpr bool QREG = MT == 1;  // Q fragments kept in registers (MT = 2 at D = 128 would not fit)
    using TQ = Tile<D, LAYOUT>;
    extern __shared__ __align__(128) u16 smem[];
    u16* sq = smem;                    // BR x D
    u16* skv = smem + BR * D;          // 1 or 2 stages x (K: BC x D, V: BC x D)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
    const int bh = blockIdx.y;
    const int qt = (LONGEST_FIRST && causal) ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = qt * BR;
    const size_t base = (size_t)bh * seq * D;
    const u16* q = reinterpret_cast<const u16*>(Q) + base;
    const u16* k = reinterpret_cast<const u16*>(K) + base;
    const u16* v = reinterpret_cast<const u16*>(V) + base;
    const int kv_end = causal ? min(seq, q0 + BR) : seq;
    const int ntiles = (kv_end + BC - 1) / BC;

    auto load_kv = [&](int stage, int jt) {  // PIPE 1, 2
        u16* sk = skv + stage * 2 * BC * D;
        load_rows<BC, D, LAYOUT, THREADS>(sk, k, seq, jt * BC);
        load_rows<BC, D, LAYOUT, THREADS>(sk + BC * D, v, seq, jt * BC);
    };
    auto load_k = [&](int stage, int jt) {  // PIPE 3
        load_rows<BC, D, LAYOUT, THREADS>(skv + stage * 2 * BC * D, k, seq, jt * BC);
    };
    auto load_v = [&](int stage, int jt) {
        load_rows<BC, D, LAYOUT, THREADS>(skv + stage * 2 * BC * D + BC * D, v, seq, jt * BC);
    };

    load_rows<BR, D, LAYOUT, THREADS>(sq, q, seq, q0);
    if constexpr (PIPE == 2) load_kv(0, 0);
    if constexpr (PIPE == 3) load_k(0, 0);
    cp_async_commit();
    if constexpr (PIPE == 3) {  // groups: {Q, K0}, {V0}, then {K(j+1)} and {V(j+1)} in turn
        load_v(0, 0);
        cp_async_commit();
    }

    float o[MT][DT][4];
    float m[MT][2], l[MT][2];  // running max (log2 units) and this thread's part of the row sum
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int j = 0; j < DT; ++j) o[i][j][0] = o[i][j][1] = o[i][j][2] = o[i][j][3] = 0.0f;
        m[i][0] = m[i][1] = -INFINITY;
        l[i][0] = l[i][1] = 0.0f;
    }
    unsigned qf[QREG ? KD : 1][4];

    for (int jt = 0; jt < ntiles; ++jt) {
        int stage = 0;
        if constexpr (PIPE == 1) {
            if (jt > 0) __syncthreads();  // everybody is done with the previous tile
            load_kv(0, jt);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
        } else if constexpr (PIPE == 2) {
            cp_async_wait<0>();  // tile jt (and Q) landed, this thread's part
            __syncthreads();     // ... everybody's; and tile jt-1's buffer is free
            if (jt + 1 < ntiles) load_kv((jt + 1) % 2, jt + 1);
            cp_async_commit();
            stage = jt % 2;
        } else {
            cp_async_wait<1>();  // K(jt) landed (V(jt) may be in flight), this thread's part
            __syncthreads();     // ... everybody's; and nobody still reads K(jt-1)'s buffer
            if (jt + 1 < ntiles) load_k((jt + 1) % 2, jt + 1);
            cp_async_commit();   // (empty groups keep the count uniform)
            stage = jt % 2;
        }
        if constexpr (QREG) {
            if (jt == 0) {
#pragma unroll
                for (int kk = 0; kk < KD; ++kk) a_rowmajor<D, LAYOUT, LDM>(qf[kk], sq, warp * 16, kk * 16);
            }
        }
        const u16* sk = skv + stage * 2 * BC * D;
        const u16* sv = sk + BC * D;
        const int k0 = jt * BC;

        float s[MT][NT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
        // S = Q K^T: K is stored keys x d, i.e. n x k
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            unsigned a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                if constexpr (QREG) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[i][e] = qf[kk][e];
                } else {
                    a_rowmajor<D, LAYOUT, LDM>(a[i], sq, (warp * MT + i) * 16, kk * 16);
                }
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                unsigned b[4];
                b_nmajor<D, LAYOUT, LDM>(b, sk, j * 8, kk * 16);
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma16816<T>(s[i][j], a[i], b);
                    mma16816<T>(s[i][j + 1], a[i], b + 2);
                }
            }
        }
        // online softmax, rows g and g+8 of each m-tile (e / 2 picks the row)
        const bool edge = k0 + BC > seq || (causal && k0 + BC - 1 > q0);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            const int r0 = q0 + (warp * MT + i) * 16 + g;
            float mx[2] = {m[i][0], m[i][1]};
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = LEAN ? s[i][j][e] : s[i][j][e] * scale_log2;  // LEAN: the max of raw scores
                    if (edge) {
                        const int key = k0 + j * 8 + 2 * qd + (e & 1), row = r0 + 8 * (e >> 1);
                        if (key >= seq || (causal && key > row)) x = -INFINITY;
                    }
                    s[i][j][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float mu[2], alpha[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = quad_max(mx[r]);
                mu[r] = mx[r] == -INFINITY ? 0.0f : (LEAN ? mx[r] * scale_log2 : mx[r]);  // nothing seen yet
                alpha[r] = exp2f((LEAN ? m[i][r] * scale_log2 : m[i][r]) - mu[r]);
                m[i][r] = mx[r];
                l[i][r] *= alpha[r];
            }
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    // LEAN: the scale folded into one FFMA feeding the exp2
                    const float p = LEAN ? exp2f(fmaf(s[i][j][e], scale_log2, -mu[e >> 1]))
                                         : exp2f(s[i][j][e] - mu[e >> 1]);
                    s[i][j][e] = p;
                    l[i][e >> 1] += p;
                }
            // LEAN: once the running max settles, most tiles leave it unchanged (alpha == 1 exactly): the
            // warp skips the D/8 x 4 multiplications of its output when none of its rows moved
            if (!LEAN || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
                for (int j = 0; j < DT; ++j) {
                    o[i][j][0] *= alpha[0], o[i][j][1] *= alpha[0];
                    o[i][j][2] *= alpha[1], o[i][j][3] *= alpha[1];
                }
            }
        }
        if constexpr (PIPE == 3) {
            cp_async_wait<1>();  // V(jt) landed (K(jt+1) may be in flight)
            __syncthreads();     // ... everybody's; and nobody still reads V(jt-1)'s buffer
            if (jt + 1 < ntiles) load_v((jt + 1) % 2, jt + 1);
            cp_async_commit();
        }
        // O += P V: P's accumulator layout (n-tiles 2kk, 2kk+1) is the A fragment of k-step kk;
        // V is stored keys x d, i.e. k x n
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            unsigned a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                a[i][0] = pack2<T>(s[i][2 * kk][0], s[i][2 * kk][1]);
                a[i][1] = pack2<T>(s[i][2 * kk][2], s[i][2 * kk][3]);
                a[i][2] = pack2<T>(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
                a[i][3] = pack2<T>(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
            }
#pragma unroll
            for (int j = 0; j < DT; j += 2) {
                unsigned b[4];
                b_kmajor<D, LAYOUT, LDM>(b, sv, j * 8, kk * 16);
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma16816<T>(o[i][j], a[i], b);
                    mma16816<T>(o[i][j + 1], a[i], b + 2);
                }
            }
        }
    }
    cp_async_wait<0>();
    // epilogue: the quad's partial row sums, O / l, the logsumexp (natural log)
    u16* out = reinterpret_cast<u16*>(O) + base;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float lr = quad_sum(l[i][r]);
            const float inv = 1.0f / lr;
            const int row = q0 + (warp * MT + i) * 16 + g + 8 * r;
            if (row < seq) {
#pragma unroll
                for (int j = 0; j < DT; ++j)
                    *reinterpret_cast<unsigned*>(out + (size_t)row * D + j * 8 + 2 * qd) =
                        pack2<T>(o[i][j][2 * r] * inv, o[i][j][2 * r + 1] * inv);
                if (qd == 0)
                    LSE[(size_t)bh * seq + row] =
                        ((LEAN ? m[i][r] * scale_log2 : m[i][r]) + log2f(lr)) * 0.69314718055994531f;
            }
        }
}

// ----------------------------------------------------------------------------------------------
// Backward, step 1: Delta_i = sum_c dO[i, c] O[i, c] (fp32), one warp a row; also zeroes dQ's fp32
// accumulator (the main kernel adds into it).
template <typename T, int D>
__global__ void __launch_bounds__(256) flash_bwd_dot_do_o(const T* O, const T* dO, float* Delta, float* dQacc,
                                                          int rows) {
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    float acc = 0.0f;
#pragma unroll
    for (int c = lane; c < D; c += 32) {
        acc += to_f32<T>(O[(size_t)row * D + c]) * to_f32<T>(dO[(size_t)row * D + c]);
        dQacc[(size_t)row * D + c] = 0.0f;
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) Delta[row] = acc;
}

// Backward, step 2: a block per KV tile of BC = 16 WARPS keys, a warp per 16 keys; the block walks the
// query tiles of BR rows (causal: from the diagonal on). Per query tile, warp w (keys 16w..16w+15):
//   S^T = K Q^T (16 x BR)  P^T = exp2(S^T scale_log2 - lse_log2)   dV += P^T dO
//   dP^T = V dO^T          dS^T = P^T (dP^T - Delta)               dK += dS^T Q
// all on mma.sync, P^T and dS^T going from accumulators to A operands in registers. dQ = dS K needs
// every warp's keys: dS^T goes through shared memory and the block adds its BR x D share of dQ into
// an fp32 buffer with atomicAdd (red.global.add.f32, resolved in L2).
// Why atomics and not a second pass (a block per query tile walking the key tiles, as the forward
// does): that pass would recompute S, P and dP, 3 more products on top of the 5 here (60% more tensor
// work), where the atomics cost T x D fp32 reductions a KV tile, which L2 absorbs; the price is a
// dQ whose last bits depend on the order of the additions (not bitwise reproducible run to run).
// The scale 1/sqrt(D) is applied once at the end: dK in this kernel's epilogue, dQ in the conversion.
template <typename T, int D, int WARPS, int BR, int LAYOUT>
__global__ void __launch_bounds__(WARPS * 32) flash_bwd_mma(const T* Q, const T* K, const T* V, const T* dO,
                                                            const float* LSE, const float* Delta, float* dQacc,
                                                            T* dK, T* dV, int seq, float scale_log2, float scale,
                                                            int causal) {
    constexpr int THREADS = WARPS * 32, BC = 16 * WARPS, NQ = BR / 8, DT = D / 8, KD = D / 16;
    // dQ's work: BR/16 m-tiles x D, over the warps: several warps an m-tile (each a slice of D columns),
    // or several m-tiles a warp
    constexpr int MTILES = BR / 16;
    static_assert(MTILES % WARPS == 0 || WARPS % MTILES == 0, "dQ: m-tiles and warps must divide");
    constexpr int WPM = MTILES >= WARPS ? 1 : WARPS / MTILES;  // warps an m-tile
    constexpr int MPW = MTILES >= WARPS ? MTILES / WARPS : 1;  // m-tiles a warp
    constexpr int DQW = D / WPM;                               // d columns a warp
    static_assert(DQW % 16 == 0, "dQ: pairs of n8 tiles a warp");
    using TS = Tile<BR, LAYOUT>;
    extern __shared__ __align__(128) u16 smem[];
    u16* sk = smem;               // BC x D
    u16* sv = sk + BC * D;        // BC x D
    u16* sq0 = sv + BC * D;       // 2 stages x BR x D
    u16* sdo0 = sq0 + 2 * BR * D; // 2 stages x BR x D
    u16* sds = sdo0 + 2 * BR * D; // BC x BR: dS^T, keys x queries
    float* slse0 = reinterpret_cast<float*>(sds + BC * BR);  // 2 x BR: lse in log2 units (+inf past the end)
    float* sdelta0 = slse0 + 2 * BR;                          // 2 x BR
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
    const int bh = blockIdx.y, k0 = blockIdx.x * BC;
    const size_t base = (size_t)bh * seq * D;
    const u16* q = reinterpret_cast<const u16*>(Q) + base;
    const u16* k = reinterpret_cast<const u16*>(K) + base;
    const u16* v = reinterpret_cast<const u16*>(V) + base;
    const u16* dout = reinterpret_cast<const u16*>(dO) + base;
    const float* lse = LSE + (size_t)bh * seq;
    const float* delta = Delta + (size_t)bh * seq;
    float* dq = dQacc + base;

    // the query tile qt (Q, dO, lse, Delta) into stage `stage`: Q and dO by cp.async, lse and Delta by
    // ordinary stores (both published by the barrier at the top of the iteration that reads them)
    auto load_q = [&](int stage, int qt) {
        const int q0 = qt * BR;
        load_rows<BR, D, LAYOUT, THREADS>(sq0 + stage * BR * D, q, seq, q0);
        load_rows<BR, D, LAYOUT, THREADS>(sdo0 + stage * BR * D, dout, seq, q0);
        for (int i = threadIdx.x; i < BR; i += THREADS) {
            const bool in = q0 + i < seq;
            slse0[stage * BR + i] = in ? lse[q0 + i] * 1.4426950408889634f : INFINITY;  // P = 0 past T
            sdelta0[stage * BR + i] = in ? delta[q0 + i] : 0.0f;
        }
    };

    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int j = 0; j < DT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.0f;

    const int key0 = k0 + warp * 16;  // this warp's first key
    const int qt0 = causal ? k0 / BR : 0, nqt = (seq + BR - 1) / BR;
    load_rows<BC, D, LAYOUT, THREADS>(sk, k, seq, k0);
    load_rows<BC, D, LAYOUT, THREADS>(sv, v, seq, k0);
    load_q(0, qt0);
    cp_async_commit();
    // query tiles double-buffered: tile qt+1 loads while tile qt is computed
    for (int qt = qt0; qt < nqt; ++qt) {
        const int q0 = qt * BR, stage = (qt - qt0) & 1;
        cp_async_wait<0>();  // tile qt landed (this thread's copies)
        __syncthreads();     // ... everybody's; and iteration qt-1 (its stage, dS^T) is no longer read
        if (qt + 1 < nqt) load_q(stage ^ 1, qt + 1);
        cp_async_commit();
        const u16* sq = sq0 + stage * BR * D;
        const u16* sdo = sdo0 + stage * BR * D;
        const float* slse = slse0 + stage * BR;
        const float* sdelta = sdelta0 + stage * BR;

        // S^T = K Q^T: A = K rows (keys x d, m x k); B = Q^T, Q stored queries x d (n x k)
        float st[NQ][4], dpt[NQ][4];
#pragma unroll
        for (int j = 0; j < NQ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            unsigned a[4], av[4];
            a_rowmajor<D, LAYOUT, true>(a, sk, warp * 16, kk * 16);
            a_rowmajor<D, LAYOUT, true>(av, sv, warp * 16, kk * 16);
#pragma unroll
            for (int j = 0; j < NQ; j += 2) {
                unsigned b[4], bo[4];
                b_nmajor<D, LAYOUT, true>(b, sq, j * 8, kk * 16);
                b_nmajor<D, LAYOUT, true>(bo, sdo, j * 8, kk * 16);
                mma16816<T>(st[j], a, b);
                mma16816<T>(st[j + 1], a, b + 2);
                mma16816<T>(dpt[j], av, bo);  // dP^T = V dO^T
                mma16816<T>(dpt[j + 1], av, bo + 2);
            }
        }
        // P^T (keys past T need no mask: their K rows are zero-filled, so they add nothing to dQ, and
        // their dK, dV rows are never stored); dS^T = P^T (dP^T - Delta)
        const bool diag = causal && q0 < key0 + 16;
#pragma unroll
        for (int j = 0; j < NQ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = j * 8 + 2 * qd + (e & 1), key = key0 + g + 8 * (e >> 1);
                float p = exp2f(st[j][e] * scale_log2 - slse[col]);
                if (diag && key > q0 + col) p = 0.0f;
                st[j][e] = p;
                dpt[j][e] = p * (dpt[j][e] - sdelta[col]);
            }
        // dV += P^T dO and dK += dS^T Q: A from the accumulators, B = dO / Q stored queries x d (k x n)
#pragma unroll
        for (int kk = 0; kk < BR / 16; ++kk) {
            unsigned ap[4], as[4];
            ap[0] = pack2<T>(st[2 * kk][0], st[2 * kk][1]);
            ap[1] = pack2<T>(st[2 * kk][2], st[2 * kk][3]);
            ap[2] = pack2<T>(st[2 * kk + 1][0], st[2 * kk + 1][1]);
            ap[3] = pack2<T>(st[2 * kk + 1][2], st[2 * kk + 1][3]);
            as[0] = pack2<T>(dpt[2 * kk][0], dpt[2 * kk][1]);
            as[1] = pack2<T>(dpt[2 * kk][2], dpt[2 * kk][3]);
            as[2] = pack2<T>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
            as[3] = pack2<T>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
            // dS^T to shared memory for dQ (rows g, g+8 of this warp's keys; query columns)
            const int r = warp * 16 + g, c = kk * 16 + 2 * qd;
            *reinterpret_cast<unsigned*>(sds + TS::at(r, c)) = as[0];
            *reinterpret_cast<unsigned*>(sds + TS::at(r + 8, c)) = as[1];
            *reinterpret_cast<unsigned*>(sds + TS::at(r, c + 8)) = as[2];
            *reinterpret_cast<unsigned*>(sds + TS::at(r + 8, c + 8)) = as[3];
#pragma unroll
            for (int j = 0; j < DT; j += 2) {
                unsigned b[4];
                b_kmajor<D, LAYOUT, true>(b, sdo, j * 8, kk * 16);
                mma16816<T>(dv[j], ap, b);
                mma16816<T>(dv[j + 1], ap, b + 2);
                b_kmajor<D, LAYOUT, true>(b, sq, j * 8, kk * 16);
                mma16816<T>(dk[j], as, b);
                mma16816<T>(dk[j + 1], as, b + 2);
            }
        }
        __syncthreads();  // dS^T complete
        // dQ[q0 + m-tile, d slice] += dS K: A = dS (queries x keys), stored as dS^T (k x m);
        // B = K stored keys x d (k x n)
#pragma unroll
        for (int mi = 0; mi < MPW; ++mi) {
            const int mt = (warp / WPM) * MPW + mi, d0 = (warp % WPM) * DQW;
            float acc[DQW / 8][4];
#pragma unroll
            for (int j = 0; j < DQW / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < BC / 16; ++kk) {
                unsigned a[4];
                a_kmajor<BR, LAYOUT>(a, sds, mt * 16, kk * 16);
#pragma unroll
                for (int j = 0; j < DQW / 8; j += 2) {
                    unsigned b[4];
                    b_kmajor<D, LAYOUT, true>(b, sk, d0 + j * 8, kk * 16);
                    mma16816<T>(acc[j], a, b);
                    mma16816<T>(acc[j + 1], a, b + 2);
                }
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = q0 + mt * 16 + g + 8 * r;
                if (row < seq) {
#pragma unroll
                    for (int j = 0; j < DQW / 8; ++j) {
                        atomic_add2(dq + (size_t)row * D + d0 + j * 8 + 2 * qd, acc[j][2 * r], acc[j][2 * r + 1]);
                    }
                }
            }
        }
    }
    // epilogue: dK (times the softmax scale) and dV, rows g and g+8 of this warp's keys
    u16* dkp = reinterpret_cast<u16*>(dK) + base;
    u16* dvp = reinterpret_cast<u16*>(dV) + base;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = key0 + g + 8 * r;
        if (key < seq) {
#pragma unroll
            for (int j = 0; j < DT; ++j) {
                const size_t at = (size_t)key * D + j * 8 + 2 * qd;
                *reinterpret_cast<unsigned*>(dkp + at) = pack2<T>(dk[j][2 * r] * scale, dk[j][2 * r + 1] * scale);
                *reinterpret_cast<unsigned*>(dvp + at) = pack2<T>(dv[j][2 * r], dv[j][2 * r + 1]);
            }
        }
    }
}

// Backward, step 3: dQ = scale * dQacc, rounded to T.
template <typename T>
__global__ void __launch_bounds__(256) flash_bwd_dq_convert(const float* dQacc, T* dQ, float scale, long long n) {
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i < n) dQ[i] = from_f32<T>(dQacc[i] * scale);
}
