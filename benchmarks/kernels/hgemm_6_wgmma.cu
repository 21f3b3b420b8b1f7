// The HGEMM ladder, rung 6 (Phase 8a): Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) fed by the
// tensor-memory accelerator (cp.async.bulk.tensor) through an mbarrier ring, with producer/consumer
// warpgroups. C = op(A) . op(B), 16-bit inputs, fp32 accumulation, fp32 or 16-bit output.
// Needs an sm_90a build (`--gpu-architecture=sm_90a`); benchmarks/phase8a_hgemm.py builds the tensor
// maps on the host (cuTensorMapEncodeTiled through ctypes) and passes them by value.
//
// Block tile 128 x 256, K in steps of 64, STAGES tiles in flight; 3 warpgroups a block:
//   warpgroup 0, the producer: one thread waits for a free stage, then asks the TMA for the A and B
//     tiles of the next k-step; the copies complete on that stage's `full` mbarrier (byte count);
//   warpgroups 1 and 2, the consumers: each owns 64 rows of the tile (m64n256 accumulators, 128 fp32
//     registers a thread), waits on `full`, issues 4 wgmma (k16 each) from shared memory, keeps one
//     group in flight, and frees the previous stage on its `empty` mbarrier.
// The grid is persistent (one block per SM, tiles strided by the grid), so the producer loads the
// next tile while the consumers write the last one out. setmaxnreg moves registers from the producer
// to the consumers.
//
// Shared-memory layouts are the TMA's 128-byte swizzle, which is one of wgmma's canonical layouts:
//   K-major operand (A as M x K, B stored as N x K): rows of 64 k (128 B), 8-row atoms of 1024 B;
//     descriptor SBO = 1024, the k16 steps advance the start address by 32 B inside the atom;
//   MN-major operand (A stored K x M with TA, B as K x N): rows of 64 m/n for one k, so a 64-wide slab
//     is one TMA box of 64 x 64; slabs 8 KB apart (LBO), 8-k atoms 1 KB apart (SBO), the k16 steps
//     advance by 2 KB; wgmma's transpose bit says MN-major.
// Edges: the TMA zero-fills outside the matrix (also past K), and the stores are bounds-checked.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef __nv_bfloat16 bf16;
typedef __half fp16;

struct __align__(64) TmaDesc { unsigned long long v[16]; };  // a CUtensorMap, opaque here

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024 /* alignment slack */ + 2 * STAGES * 8;

template <typename O> __device__ __forceinline__ O from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ fp16 from_f32<fp16>(float x) { return __float2half_rn(x); }

template <typename O>
__device__ __forceinline__ void store_pair(O* C, int M, int N, int ldc, int r, int c, float x, float y) {
    if (r >= M) return;
    O* p = C + (size_t)r * ldc + c;
    if (c + 1 < N && (ldc % 2) == 0) {
        if constexpr (sizeof(O) == 4) {
            *reinterpret_cast<float2*>(p) = make_float2(x, y);
        } else {
            O pair[2] = {from_f32<O>(x), from_f32<O>(y)};
            *reinterpret_cast<unsigned*>(p) = *reinterpret_cast<unsigned*>(pair);
        }
    } else {
        if (c < N) p[0] = from_f32<O>(x);
        if (c + 1 < N) p[1] = from_f32<O>(y);
    }
}

__device__ __forceinline__ unsigned pick4(int i, unsigned a, unsigned b, unsigned c, unsigned d) {
    return i == 0 ? a : i == 1 ? b : i == 2 ? c : d;
}

template <typename O> __device__ __forceinline__ unsigned pack2(float x, float y) {
    O pair[2] = {from_f32<O>(x), from_f32<O>(y)};
    return *reinterpret_cast<unsigned*>(pair);
}

// The 16-bit epilogue: a quad of lanes holds 2 columns of each n8 block of its rows; four 4x4 transposes
// among the quad (shuffles) give each lane 8 consecutive columns, one 16-byte store (a full 32-byte
// sector per lane pair) instead of four 4-byte ones. Rows r and r + 8, columns n0 .. n0 + 255.
template <typename O>
__device__ __forceinline__ void store_rows_16bit(O* C, int M, int N, int ldc, const float d[128], int r, int n0,
                                                 int lane) {
    const int q = lane % 4, quad = lane & ~3;
    const bool vec = ldc % 8 == 0 && (reinterpret_cast<unsigned long long>(C) & 15) == 0;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = r + 8 * half;
#pragma unroll
        for (int g = 0; g < 8; ++g) {
            unsigned p[4];  // p[jj]: this lane's 2 columns of block 4g + jj
#pragma unroll
            for (int jj = 0; jj < 4; ++jj)
                p[jj] = pack2<O>(d[4 * (4 * g + jj) + 2 * half], d[4 * (4 * g + jj) + 2 * half + 1]);
            // round s: lane q gets lane (q + s)'s columns of block 4g + q
            unsigned got[4];
            got[0] = pick4(q, p[0], p[1], p[2], p[3]);
#pragma unroll
            for (int s = 1; s < 4; ++s)
                got[s] = __shfl_sync(0xffffffffu, pick4((q - s) & 3, p[0], p[1], p[2], p[3]), quad | ((q + s) & 3));
            // lane p's columns come first for p = 0, so the vector is got[(p - q) & 3], p = 0..3
            uint4 v = make_uint4(pick4((0 - q) & 3, got[0], got[1], got[2], got[3]),
                                 pick4((1 - q) & 3, got[0], got[1], got[2], got[3]),
                                 pick4((2 - q) & 3, got[0], got[1], got[2], got[3]),
                                 pick4((3 - q) & 3, got[0], got[1], got[2], got[3]));
            const int col = n0 + 32 * g + 8 * q;
            if (row >= M || col >= N) continue;
            O* dst = C + (size_t)row * ldc + col;
            if (vec && col + 8 <= N) {
                *reinterpret_cast<uint4*>(dst) = v;
            } else {
                const unsigned w[4] = {v.x, v.y, v.z, v.w};
                unsigned short* out = reinterpret_cast<unsigned short*>(dst);
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    if (col + i < N) out[i] = static_cast<unsigned short>(w[i / 2] >> (16 * (i % 2)));
            }
        }
    }
}

// ---- mbarriers (shared::cta addresses) ----
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// ---- TMA: a 2-D box at (c0 innermost, c1) into shared memory, completing on `bar` ----
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, int c0, int c1, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// ---- wgmma ----
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);  // 1 << 62: 128-byte swizzle
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

template <typename T> struct WgmmaType;
template <> struct WgmmaType<bf16> { static constexpr bool is_bf16 = true; };
template <> struct WgmmaType<fp16> { static constexpr bool is_bf16 = false; };

// d (64 x 256, fp32, 128 registers a thread) += A (64 x 16) . B (16 x 256), both from shared memory.
// TRANS_A / TRANS_B: the operand is MN-major in shared memory.
#define WGMMA_OPERANDS \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}" \
        ", %128, %129, 1, 1, 1, %130, %131;\n"
template <typename T, int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16(float d[128], unsigned long long da, unsigned long long db) {
    if constexpr (WgmmaType<T>::is_bf16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WGMMA_OPERANDS
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "l"(da), "l"(db), "n"(TRANS_A), "n"(TRANS_B));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" WGMMA_OPERANDS
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                     : "l"(da), "l"(db), "n"(TRANS_A), "n"(TRANS_B));
}
#undef WGMMA_OPERANDS

// tma_a: A as stored (M x K, box 64 k x 128 m; or with TA K x M, box 64 m x 64 k, two a stage);
// tma_b: B as stored (K x N, box 64 n x 64 k, four a stage; or with TB N x K, box 64 k x 256 n).
// mn_lbo / mn_sbo: the descriptor offsets of an MN-major operand (8192 and 1024 for these boxes).
template <typename T, typename O, bool TA, bool TB>
__global__ void __launch_bounds__(384, 1)
    hgemm_6_wgmma(const __grid_constant__ TmaDesc tma_a, const __grid_constant__ TmaDesc tma_b, O* C, int M, int N,
                  int K, int ldc, int mn_lbo, int mn_sbo) {
    extern __shared__ unsigned char smem_raw[];
    // 128-byte swizzle atoms are 1024 B: align the ring to 1024
    const unsigned base = (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
    const unsigned full = base + STAGES * STAGE_BYTES, empty = full + STAGES * 8;
    const int wg = threadIdx.x / 128;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int KT = (K + BK - 1) / BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);   // the producer's expect_tx arrival (+ the bytes)
            mbar_init(empty + 8 * s, 8);  // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int m0 = (t % tiles_m) * BM, n0 = (t / tiles_m) * BN;
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int s = it % STAGES;
                    const unsigned round = it / STAGES;
                    mbar_wait(empty + 8 * s, (round & 1) ^ 1);  // a fresh barrier passes parity 1
                    const unsigned fb = full + 8 * s, sa = base + s * STAGE_BYTES, sb = sa + A_BYTES;
                    mbar_expect_tx(fb, STAGE_BYTES);
                    const int k0 = kt * BK;
                    if constexpr (TA) {
                        tma_load_2d(sa, &tma_a, m0, k0, fb);
                        tma_load_2d(sa + 8192, &tma_a, m0 + 64, k0, fb);
                    } else {
                        tma_load_2d(sa, &tma_a, k0, m0, fb);
                    }
                    if constexpr (TB) {
                        tma_load_2d(sb, &tma_b, k0, n0, fb);
                    } else {
#pragma unroll
                        for (int q = 0; q < 4; ++q) tma_load_2d(sb + q * 8192, &tma_b, n0 + 64 * q, k0, fb);
                    }
                }
            }
        }
    } else {  // consumers
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
        const int c = wg - 1, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const unsigned a_lbo = TA ? mn_lbo : 16, a_sbo = TA ? mn_sbo : 1024;
        const unsigned b_lbo = TB ? 16 : mn_lbo, b_sbo = TB ? 1024 : mn_sbo;
        const unsigned a_step = TA ? 2048 : 32, b_step = TB ? 32 : 2048;  // bytes a k16 step
        float d[128];
        int it = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const int m0 = (t % tiles_m) * BM, n0 = (t / tiles_m) * BN;
#pragma unroll
            for (int i = 0; i < 128; ++i) d[i] = 0.0f;
            int prev = -1;
            for (int kt = 0; kt < KT; ++kt, ++it) {
                const int s = it % STAGES;
                mbar_wait(full + 8 * s, (it / STAGES) & 1);
                const unsigned sa = base + s * STAGE_BYTES + c * 8192, sb = base + s * STAGE_BYTES + A_BYTES;
                wgmma_fence();
#pragma unroll
                for (int k = 0; k < BK / 16; ++k)
                    wgmma_m64n256k16<T, TA, !TB>(d, smem_desc(sa + k * a_step, a_lbo, a_sbo),
                                                 smem_desc(sb + k * b_step, b_lbo, b_sbo));
                wgmma_commit();
                wgmma_wait<1>();  // the previous k-step's group is done: its stage can be refilled
                if (prev >= 0) {
                    __syncwarp();
                    if (lane == 0) mbar_arrive(empty + 8 * prev);
                }
                prev = s;
            }
            wgmma_wait<0>();
            __syncwarp();
            if (lane == 0) mbar_arrive(empty + 8 * prev);
            // accumulator layout: n8 block j holds (r, 8j + 2q .. +1) and (r + 8, 8j + 2q .. +1)
            const int r = m0 + c * 64 + warp * 16 + lane / 4, q = lane % 4;
            if constexpr (sizeof(O) == 2) {
                store_rows_16bit(C, M, N, ldc, d, r, n0, lane);
            } else {
#pragma unroll
                for (int j = 0; j < 32; ++j) {
                    const int col = n0 + 8 * j + 2 * q;
                    store_pair(C, M, N, ldc, r, col, d[4 * j], d[4 * j + 1]);
                    store_pair(C, M, N, ldc, r + 8, col, d[4 * j + 2], d[4 * j + 3]);
                }
            }
        }
    }
}

// The ceiling of wgmma on this GPU: two warpgroups a block issue m64n256k16 from one 48 KB
// shared-memory tile (filled with ones), one group in flight, nothing else. FLOPs: 2 * 64 * 256 * 16
// = 524288 an instruction, 4 an iteration, `iters` iterations a warpgroup.
template <typename T>
__global__ void __launch_bounds__(256, 1) wgmma_peak(float* out, int iters) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
    unsigned char* gbase = smem_raw + (base - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)));
    const unsigned one = WgmmaType<T>::is_bf16 ? 0x3f803f80u : 0x3c003c00u;
    for (int i = threadIdx.x; i < STAGE_BYTES / 4; i += blockDim.x) reinterpret_cast<unsigned*>(gbase)[i] = one;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // ordinary stores, read by the async proxy
    __syncthreads();
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    const unsigned sa = base + (threadIdx.x / 128) * 8192, sb = base + A_BYTES;
    for (int it = 0; it < iters; ++it) {
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k)
            wgmma_m64n256k16<T, 0, 0>(d, smem_desc(sa + 32 * k, 16, 1024), smem_desc(sb + 32 * k, 16, 1024));
        wgmma_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; ++i) s += d[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
