// The HGEMM ladder, rungs 1-5 (Phase 8a): C = op(A) . op(B) on the tensor cores, 16-bit inputs
// (bf16 or fp16), fp32 accumulation, fp32 or 16-bit output. Rung 6 (wgmma + TMA, sm_90a) is
// hgemm_6_wgmma.cu. Driven by benchmarks/phase8a_hgemm.py, which validates every rung, then times it.
//
// Layouts: every matrix is row-major with a leading dimension. A is M x K (lda) unless TA, where the
// stored matrix is K x M and the kernel computes with its transpose; B is K x N (ldb) unless TB,
// where the stored matrix is N x K. C is M x N (ldc). `vec` says that 16-byte loads are legal (both
// leading dimensions multiples of 8 elements, both base pointers 16-byte aligned); without it the
// kernels load element by element. Sizes need not be multiples of any tile: edges are zero-filled.
//
// Rungs:
//   1 hgemm_1_wmma     nvcuda::wmma 16x16x16 fragments, one warp per 16x16 output tile, fragments
//                      straight from global memory (through a per-warp staging tile at the edges)
//   2 hgemm_2_wmma_smem  a 128x128 block tile in shared memory (padded rows), 8 warps of 32x64
//   3..5 hgemm_mma     mma.sync.aligned.m16n8k16 fed by ldmatrix (inline PTX), templated on tiles:
//                      3 = plain shared-memory rows (bank conflicts), 4 = XOR-swizzled rows,
//                      5 = swizzled + a STAGES-deep cp.async pipeline
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

typedef __nv_bfloat16 bf16;
typedef __half fp16;
typedef unsigned short u16;

template <bool C, typename X, typename Y> struct Pick { using type = X; };
template <typename X, typename Y> struct Pick<false, X, Y> { using type = Y; };

template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<bf16>(bf16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f32<fp16>(fp16 x) { return __half2float(x); }

template <typename O> __device__ __forceinline__ O from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ fp16 from_f32<fp16>(float x) { return __float2half_rn(x); }

// Two adjacent outputs of one row (c, c+1), bounds-checked; one 4- or 8-byte store where legal.
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

// ----------------------------------------------------------------------------------------------
// Shared-memory tiles. A tile is R rows x CW columns of 16-bit elements, moved in 16-byte chunks
// (8 elements). PLAIN rows are packed; PADDED rows carry 8 spare elements (WMMA wants 32-byte
// aligned fragments, so the pad is one chunk); SWIZZLED rows are packed with each chunk index XORed
// by a function of the row, so that the 8 row addresses of one ldmatrix phase fall in 8 different
// 16-byte bank groups.
enum { PLAIN = 0, PADDED = 1, SWIZZLED = 2 };

template <int CW, int LAYOUT> struct Tile {
    static constexpr int PITCH = LAYOUT == PADDED ? CW + 8 : CW;  // elements per row
    static __device__ __forceinline__ int offset(int row, int chunk) {
        if constexpr (LAYOUT == SWIZZLED) {
            if constexpr (CW / 8 >= 8) chunk ^= row & 7;               // 128 B or more a row
            else if constexpr (CW / 8 == 4) chunk ^= (row >> 1) & 3;   // 64 B a row: two rows a 128 B line
            else static_assert(CW / 8 >= 4, "swizzle needs at least 4 chunks a row");
        }
        return row * PITCH + chunk * 8;
    }
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

// Copies the R x CW tile at (r0, c0) of a row-major `rows` x `cols` matrix (leading dimension ld)
// into shared memory, zero-filling outside the matrix. Whole in-bounds chunks go by cp.async when
// `vec`; partial or unaligned chunks element by element (ordinary stores: the caller's barrier
// publishes both kinds).
template <int R, int CW, int LAYOUT, int THREADS>
__device__ __forceinline__ void load_tile(u16* s, const u16* g, int rows, int cols, int ld, int r0, int c0,
                                          bool vec) {
    constexpr int CPR = CW / 8, CHUNKS = R * CPR;
    static_assert(CHUNKS % THREADS == 0, "tile chunks must divide among the threads");
#pragma unroll
    for (int it = 0; it < CHUNKS / THREADS; ++it) {
        const int i = it * THREADS + threadIdx.x;
        int row = i / CPR, ch = i % CPR;
        int gr = r0 + row, gc = c0 + ch * 8;
        u16* dst = s + Tile<CW, LAYOUT>::offset(row, ch);
        if (vec && gr < rows && gc + 8 <= cols) {
            cp_async16(dst, g + (size_t)gr * ld + gc);
        } else {
            union { uint4 v; u16 h[8]; } u;
#pragma unroll
            for (int j = 0; j < 8; ++j) u.h[j] = (gr < rows && gc + j < cols) ? g[(size_t)gr * ld + gc + j] : u16(0);
            *reinterpret_cast<uint4*>(dst) = u.v;
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Rung 1: WMMA, one warp per 16x16 output tile, 4 warps a block (independent tiles). Interior
// tiles with aligned operands load fragments straight from global memory; edge tiles go through a
// 16x16 staging tile in shared memory, zero-filled outside the matrices.
template <typename T, typename O, bool TA, bool TB>
__global__ void __launch_bounds__(128) hgemm_1_wmma(const T* A, const T* B, O* C, int M, int N, int K, int lda,
                                                    int ldb, int ldc, bool vec) {
    using namespace nvcuda;
    using LA = typename Pick<TA, wmma::col_major, wmma::row_major>::type;
    using LB = typename Pick<TB, wmma::col_major, wmma::row_major>::type;
    __shared__ __align__(32) u16 sa[4][256];
    __shared__ __align__(32) u16 sb[4][256];
    __shared__ __align__(32) float sc[4][256];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles_n = (N + 15) / 16;
    const int tile = blockIdx.x * 4 + warp;
    const int m0 = (tile / tiles_n) * 16, n0 = (tile % tiles_n) * 16;
    if (m0 >= M) return;  // whole warps only: the block has no barrier
    const u16* a = reinterpret_cast<const u16*>(A);
    const u16* b = reinterpret_cast<const u16*>(B);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    const bool inside = vec && m0 + 16 <= M && n0 + 16 <= N;
    for (int k0 = 0; k0 < K; k0 += 16) {
        if (inside && k0 + 16 <= K) {
            wmma::load_matrix_sync(fa, TA ? A + (size_t)k0 * lda + m0 : A + (size_t)m0 * lda + k0, lda);
            wmma::load_matrix_sync(fb, TB ? B + (size_t)n0 * ldb + k0 : B + (size_t)k0 * ldb + n0, ldb);
        } else {
            // each lane stages 8 elements of each 16x16 operand tile, as stored (row r, columns c..c+7)
            const int r = lane / 2, c = (lane % 2) * 8;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                int ar = (TA ? k0 : m0) + r, ac = (TA ? m0 : k0) + c + j;  // stored coordinates of A
                int arows = TA ? K : M, acols = TA ? M : K;
                sa[warp][r * 16 + c + j] = (ar < arows && ac < acols) ? a[(size_t)ar * lda + ac] : u16(0);
                int br = (TB ? n0 : k0) + r, bc = (TB ? k0 : n0) + c + j;
                int brows = TB ? N : K, bcols = TB ? K : N;
                sb[warp][r * 16 + c + j] = (br < brows && bc < bcols) ? b[(size_t)br * ldb + bc] : u16(0);
            }
            __syncwarp();
            wmma::load_matrix_sync(fa, reinterpret_cast<const T*>(sa[warp]), 16);
            wmma::load_matrix_sync(fb, reinterpret_cast<const T*>(sb[warp]), 16);
            __syncwarp();
        }
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(sc[warp], acc, 16, wmma::mem_row_major);
    __syncwarp();
    const int r = lane / 2, c = (lane % 2) * 8;
#pragma unroll
    for (int j = 0; j < 8; j += 2)
        store_pair(C, M, N, ldc, m0 + r, n0 + c + j, sc[warp][r * 16 + c + j], sc[warp][r * 16 + c + j + 1]);
}

// ----------------------------------------------------------------------------------------------
// Rung 2: WMMA from shared memory. A 128x128 block tile, K in steps of 32, 8 warps as 4 (M) x 2 (N),
// each warp 32x64 = 2x4 fragments. Tiles are stored as the operands are stored (A as M x K or, with
// TA, K x M), rows padded by one 16-byte chunk; WMMA's row_major/col_major loads do the transposing.
template <typename T, typename O, bool TA, bool TB>
__global__ void __launch_bounds__(256) hgemm_2_wmma_smem(const T* A, const T* B, O* C, int M, int N, int K, int lda,
                                                         int ldb, int ldc, bool vec) {
    using namespace nvcuda;
    constexpr int BM = 128, BN = 128, BK = 32, THREADS = 256;
    using LA = typename Pick<TA, wmma::col_major, wmma::row_major>::type;
    using LB = typename Pick<TB, wmma::col_major, wmma::row_major>::type;
    using TileA = Tile<TA ? BM : BK, PADDED>;  // stored rows: BM (or BK with TA)
    using TileB = Tile<TB ? BK : BN, PADDED>;
    __shared__ __align__(128) u16 sa[(TA ? BK : BM) * TileA::PITCH];
    __shared__ __align__(128) u16 sb[(TB ? BN : BK) * TileB::PITCH];
    __shared__ __align__(32) float sc[8][256];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 2, wn = warp % 2;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const u16* a = reinterpret_cast<const u16*>(A);
    const u16* b = reinterpret_cast<const u16*>(B);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += BK) {
        if constexpr (TA) load_tile<BK, BM, PADDED, THREADS>(sa, a, K, M, lda, k0, m0, vec);
        else load_tile<BM, BK, PADDED, THREADS>(sa, a, M, K, lda, m0, k0, vec);
        if constexpr (TB) load_tile<BN, BK, PADDED, THREADS>(sb, b, N, K, ldb, n0, k0, vec);
        else load_tile<BK, BN, PADDED, THREADS>(sb, b, K, N, ldb, k0, n0, vec);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb[4];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                int m = wm * 32 + i * 16;
                const u16* p = TA ? sa + kk * TileA::PITCH + m : sa + m * TileA::PITCH + kk;
                wmma::load_matrix_sync(fa[i], reinterpret_cast<const T*>(p), TileA::PITCH);
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int n = wn * 64 + j * 16;
                const u16* p = TB ? sb + n * TileB::PITCH + kk : sb + kk * TileB::PITCH + n;
                wmma::load_matrix_sync(fb[j], reinterpret_cast<const T*>(p), TileB::PITCH);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
    const int r = lane / 2, c = (lane % 2) * 8;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            wmma::store_matrix_sync(sc[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int rr = m0 + wm * 32 + i * 16 + r, cc = n0 + wn * 64 + j * 16 + c;
#pragma unroll
            for (int e = 0; e < 8; e += 2)
                store_pair(C, M, N, ldc, rr, cc + e, sc[warp][r * 16 + c + e], sc[warp][r * 16 + c + e + 1]);
            __syncwarp();
        }
}

// ----------------------------------------------------------------------------------------------
// Rungs 3-5: mma.sync.aligned.m16n8k16 (fp32 accumulators) with ldmatrix fragment loads.
template <typename T> struct MmaName;
template <> struct MmaName<bf16> { static constexpr bool is_bf16 = true; };
template <> struct MmaName<fp16> { static constexpr bool is_bf16 = false; };

template <typename T>
__device__ __forceinline__ void mma16816(float d[4], const unsigned a[4], const unsigned b[2]) {
    if constexpr (MmaName<T>::is_bf16)
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

// Block tile BM x BN, K in steps of BK; WARPS_M x WARPS_N warps, each (BM/WARPS_M) x (BN/WARPS_N).
// STAGES == 1: load, wait, compute (rungs 3, 4). STAGES >= 2: a cp.async ring of STAGES tiles, the
// loads of tile k+STAGES-1 in flight while tile k is computed (rung 5).
template <typename T, typename O, bool TA, bool TB, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES,
          int LAYOUT>
__global__ void __launch_bounds__(WARPS_M* WARPS_N * 32, 1)
    hgemm_mma(const T* A, const T* B, O* C, int M, int N, int K, int lda, int ldb, int ldc, bool vec) {
    constexpr int THREADS = WARPS_M * WARPS_N * 32;
    constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N, MT = WTM / 16, NT = WTN / 8;
    static_assert(NT % 2 == 0 && BK % 16 == 0, "warp tile: pairs of n8 tiles, k in steps of 16");
    // tiles as stored: A is BM x BK (or BK x BM with TA), B is BK x BN (or BN x BK with TB)
    using TileA = Tile<TA ? BM : BK, LAYOUT>;
    using TileB = Tile<TB ? BK : BN, LAYOUT>;
    constexpr int A_ELEMS = BM * BK, B_ELEMS = BK * BN, STAGE_ELEMS = A_ELEMS + B_ELEMS;
    extern __shared__ __align__(128) u16 smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const u16* a = reinterpret_cast<const u16*>(A);
    const u16* b = reinterpret_cast<const u16*>(B);
    const int KT = (K + BK - 1) / BK;

    auto load_stage = [&](int stage, int kt) {
        u16* sa = smem + stage * STAGE_ELEMS;
        u16* sb = sa + A_ELEMS;
        const int k0 = kt * BK;
        if constexpr (TA) load_tile<BK, BM, LAYOUT, THREADS>(sa, a, K, M, lda, k0, m0, vec);
        else load_tile<BM, BK, LAYOUT, THREADS>(sa, a, M, K, lda, m0, k0, vec);
        if constexpr (TB) load_tile<BN, BK, LAYOUT, THREADS>(sb, b, N, K, ldb, n0, k0, vec);
        else load_tile<BK, BN, LAYOUT, THREADS>(sb, b, K, N, ldb, k0, n0, vec);
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    auto compute_stage = [&](int stage) {
        const u16* sa = smem + stage * STAGE_ELEMS;
        const u16* sb = sa + A_ELEMS;
        const int j8 = lane / 8, r8 = lane % 8;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned fa[MT][4], fb[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int m = wm * WTM + i * 16;
                if constexpr (TA)  // stored k x m: rows k, chunks along m; transposing load
                    ldmatrix_x4<true>(fa[i], sa + TileA::offset(kk + r8 + 8 * (j8 / 2), m / 8 + (j8 % 2)));
                else
                    ldmatrix_x4<false>(fa[i], sa + TileA::offset(m + r8 + 8 * (j8 % 2), kk / 8 + j8 / 2));
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                const int n = wn * WTN + j * 8;
                unsigned r[4];
                if constexpr (TB)  // stored n x k: the fragment layout of mma's "col" B, no transpose
                    ldmatrix_x4<false>(r, sb + TileB::offset(n + r8 + 8 * (j8 / 2), kk / 8 + (j8 % 2)));
                else
                    ldmatrix_x4<true>(r, sb + TileB::offset(kk + r8 + 8 * (j8 % 2), n / 8 + j8 / 2));
                fb[j][0] = r[0], fb[j][1] = r[1], fb[j + 1][0] = r[2], fb[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) mma16816<T>(acc[i][j], fa[i], fb[j]);
        }
    };

    if constexpr (STAGES == 1) {
        for (int kt = 0; kt < KT; ++kt) {
            load_stage(0, kt);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
            compute_stage(0);
            __syncthreads();
        }
    } else {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < KT) load_stage(s, s);
            cp_async_commit();  // empty groups keep the count uniform
        }
        for (int kt = 0; kt < KT; ++kt) {
            cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's part)
            __syncthreads();              // ... everybody's; and tile kt-1 is no longer read
            const int next = kt + STAGES - 1;
            if (next < KT) load_stage(next % STAGES, next);
            cp_async_commit();
            compute_stage(kt % STAGES);
        }
        cp_async_wait<0>();
    }

    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int r = m0 + wm * WTM + i * 16 + g, c = n0 + wn * WTN + j * 8 + 2 * q;
            store_pair(C, M, N, ldc, r, c, acc[i][j][0], acc[i][j][1]);
            store_pair(C, M, N, ldc, r + 8, c, acc[i][j][2], acc[i][j][3]);
        }
}

// ----------------------------------------------------------------------------------------------
// The ceiling of mma.sync on this GPU: every warp issues independent m16n8k16 MMAs on register
// operands, nothing from memory (WMMA's 16x16x16 compiles to the same HMMA instructions). FLOPs:
// 2 * 16 * 8 * 16 = 4096 an instruction, 8 an iteration, `iters` iterations a warp.
template <typename T>
__global__ void __launch_bounds__(256) mma_sync_peak(float* out, int iters) {
    const unsigned one = MmaName<T>::is_bf16 ? 0x3f803f80u : 0x3c003c00u;  // (1.0, 1.0) in the 16-bit type
    unsigned a[4] = {one, one, one, one}, b[2] = {one, one};
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) mma16816<T>(acc[j], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
