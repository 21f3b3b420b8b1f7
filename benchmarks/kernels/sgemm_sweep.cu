// Candidates for rung 9 of the SGEMM ladder, timed by benchmarks/phase5_gemm_sweep.py.
// Appended to the reference gemm.cu (it uses load4, store4, rows_aligned, at,
// warp_tile_products and store_warp_tile from there). GPU only: not part of the lab.
//
// sweep9<BM, BN, BK, WM, WN, TA, TB, MINB, FDB, FAST> is rung 9 with three knobs:
//   MINB  the second argument of __launch_bounds__ (2: at most 128 registers a thread, so
//         that two blocks of 256 threads share an SM; 1: up to 255 registers);
//   FDB   register double buffering of the fragments: the values of As and Bs for step
//         k + 1 are read from shared memory while step k's products run, and the next
//         tile's first fragments right after the barrier, before the tile's last products;
//   FAST  a block whose tiles lie wholly inside A, B and C (and K a multiple of BK) loads
//         them with plain 16-byte loads, without the per-load bounds checks.

template <int BM, int BN, int BK, int WM, int WN, int TA, int TB, int MINB, int FDB, int FAST>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MINB)
sweep9(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
       int M, int N, int K) {
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int LDA = BM + 4, LDB = BN + 4;
    constexpr int LOADS_A = BM * BK / 4 / THREADS, LOADS_B = BN * BK / 4 / THREADS;
    constexpr int MI = WM / 16, NI = WN / 32;
    static_assert(WM % 16 == 0 && WN % 32 == 0 && BK % 4 == 0, "warp tile of 4 x 4 squares");
    static_assert(LOADS_A >= 1 && LOADS_B >= 1 && LOADS_A * THREADS * 4 == BM * BK &&
                  LOADS_B * THREADS * 4 == BN * BK, "whole float4 loads");
    __shared__ __align__(16) float As[2][BK * LDA];
    __shared__ __align__(16) float Bs[2][BK * LDB];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int a_off = (warp / (BN / WN)) * WM + (lane / 8) * 4;
    const int b_off = (warp % (BN / WN)) * WN + (lane % 8) * 4;
    const bool vec_a = TA ? rows_aligned(A, M) : rows_aligned(A, K);
    const bool vec_b = TB ? rows_aligned(B, K) : rows_aligned(B, N);
    const bool full = FAST && vec_a && vec_b && bm + BM <= M && bn + BN <= N && K % BK == 0;
    float4 ra[LOADS_A], rb[LOADS_B];
    float acc[WM / 4][WN / 8] = {{0.0f}};

    auto load_tiles = [&](int k0) {
#pragma unroll
        for (int p = 0; p < LOADS_A; ++p) {
            const int f = tid + p * THREADS;
            const int r = TA ? k0 + f / (BM / 4) : bm + f / (BK / 4);
            const int c = TA ? bm + (f % (BM / 4)) * 4 : k0 + (f % (BK / 4)) * 4;
            const int rows = TA ? K : M, cols = TA ? M : K;
            ra[p] = full ? *reinterpret_cast<const float4*>(A + (size_t)r * cols + c)
                         : load4(A, rows, cols, r, c, vec_a);
        }
#pragma unroll
        for (int p = 0; p < LOADS_B; ++p) {
            const int f = tid + p * THREADS;
            const int r = TB ? bn + f / (BK / 4) : k0 + f / (BN / 4);
            const int c = TB ? k0 + (f % (BK / 4)) * 4 : bn + (f % (BN / 4)) * 4;
            const int rows = TB ? N : K, cols = TB ? K : N;
            rb[p] = full ? *reinterpret_cast<const float4*>(B + (size_t)r * cols + c)
                         : load4(B, rows, cols, r, c, vec_b);
        }
    };
    auto store_tiles = [&](float* as, float* bs) {
#pragma unroll
        for (int p = 0; p < LOADS_A; ++p) {
            const int f = tid + p * THREADS;
            if (TA) {
                *reinterpret_cast<float4*>(&as[(f / (BM / 4)) * LDA + (f % (BM / 4)) * 4]) =
                    ra[p];
            } else {
                const int m = f / (BK / 4), k = (f % (BK / 4)) * 4;
                as[(k + 0) * LDA + m] = ra[p].x;
                as[(k + 1) * LDA + m] = ra[p].y;
                as[(k + 2) * LDA + m] = ra[p].z;
                as[(k + 3) * LDA + m] = ra[p].w;
            }
        }
#pragma unroll
        for (int p = 0; p < LOADS_B; ++p) {
            const int f = tid + p * THREADS;
            if (TB) {
                const int n = f / (BK / 4), k = (f % (BK / 4)) * 4;
                bs[(k + 0) * LDB + n] = rb[p].x;
                bs[(k + 1) * LDB + n] = rb[p].y;
                bs[(k + 2) * LDB + n] = rb[p].z;
                bs[(k + 3) * LDB + n] = rb[p].w;
            } else {
                *reinterpret_cast<float4*>(&bs[(f / (BN / 4)) * LDB + (f % (BN / 4)) * 4]) =
                    rb[p];
            }
        }
    };

    load_tiles(0);
    store_tiles(As[0], Bs[0]);
    __syncthreads();
    const int steps = CEIL_DIV(K, BK);
    if (!FDB) {
        for (int s = 0; s < steps; ++s) {
            const int cur = s & 1;
            const bool more = s + 1 < steps;
            if (more) load_tiles((s + 1) * BK);
            warp_tile_products<BK, WM, WN, LDA, LDB>(As[cur], Bs[cur], acc, a_off, b_off);
            if (more) store_tiles(As[cur ^ 1], Bs[cur ^ 1]);
            __syncthreads();
        }
    } else {
        float4 fa[2][MI], fb[2][NI];
        auto load_frags = [&](const float* as, const float* bs, int k, int slot) {
#pragma unroll
            for (int i = 0; i < MI; ++i)
                fa[slot][i] = *reinterpret_cast<const float4*>(&as[k * LDA + a_off + 16 * i]);
#pragma unroll
            for (int j = 0; j < NI; ++j)
                fb[slot][j] = *reinterpret_cast<const float4*>(&bs[k * LDB + b_off + 32 * j]);
        };
        load_frags(As[0], Bs[0], 0, 0);
        for (int s = 0; s < steps; ++s) {
            const int cur = s & 1;
            const bool more = s + 1 < steps;
            if (more) load_tiles((s + 1) * BK);
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                if (k < BK - 1) {
                    load_frags(As[cur], Bs[cur], k + 1, (k + 1) & 1);
                } else if (more) {
                    store_tiles(As[cur ^ 1], Bs[cur ^ 1]);
                    __syncthreads();
                    load_frags(As[cur ^ 1], Bs[cur ^ 1], 0, 0);
                }
#pragma unroll
                for (int i = 0; i < 4 * MI; ++i) {
#pragma unroll
                    for (int j = 0; j < 4 * NI; ++j) {
                        acc[i][j] += at(fa[k & 1][i / 4], i % 4) * at(fb[k & 1][j / 4], j % 4);
                    }
                }
            }
        }
    }
    store_warp_tile<WM, WN>(C, M, N, acc, bm + a_off, bn + b_off, rows_aligned(C, N));
}

// Rung 5 as it was (loops the compiler kept rolled: 64 FFMA in the loop body, 120 registers)
// and the unrolled rung 5 held to 128 registers (two blocks an SM), against the unrolled one
// of the lab (156 registers, one block an SM).
extern "C" __global__ void sweep5_rolled(const float* A, const float* B, float* C,
                                                 int M, int N, int K) {
    __shared__ float As[R5_BM * R5_BK];
    __shared__ float Bs[R5_BK * R5_BN];
    const int tid = threadIdx.x;
    const int bm = blockIdx.y * R5_BM, bn = blockIdx.x * R5_BN;
    const int thread_row = tid / (R5_BN / R5_TN), thread_col = tid % (R5_BN / R5_TN);
    const int a_row = tid / R5_BK, a_col = tid % R5_BK;  // rows a_row + 32 * pass
    const int b_row = tid / R5_BN, b_col = tid % R5_BN;  // rows b_row + 2 * pass
    constexpr int a_stride = R5_THREADS / R5_BK, b_stride = R5_THREADS / R5_BN;
    float acc[R5_TM][R5_TN] = {{0.0f}};
    float reg_m[R5_TM], reg_n[R5_TN];
    for (int k0 = 0; k0 < K; k0 += R5_BK) {
        for (int r = a_row; r < R5_BM; r += a_stride) {
            const int gr = bm + r, gk = k0 + a_col;
            As[r * R5_BK + a_col] = (gr < M && gk < K) ? A[(size_t)gr * K + gk] : 0.0f;
        }
        for (int r = b_row; r < R5_BK; r += b_stride) {
            const int gk = k0 + r, gc = bn + b_col;
            Bs[r * R5_BN + b_col] = (gk < K && gc < N) ? B[(size_t)gk * N + gc] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < R5_BK; ++k) {
            for (int i = 0; i < R5_TM; ++i) {
                reg_m[i] = As[(thread_row * R5_TM + i) * R5_BK + k];
            }
            for (int j = 0; j < R5_TN; ++j) {
                reg_n[j] = Bs[k * R5_BN + thread_col * R5_TN + j];
            }
            for (int i = 0; i < R5_TM; ++i) {
                for (int j = 0; j < R5_TN; ++j) {
                    acc[i][j] += reg_m[i] * reg_n[j];
                }
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < R5_TM; ++i) {
        for (int j = 0; j < R5_TN; ++j) {
            const int row = bm + thread_row * R5_TM + i, col = bn + thread_col * R5_TN + j;
            if (row < M && col < N) {
                C[(size_t)row * N + col] = acc[i][j];
            }
        }
    }
}


extern "C" __global__ void __launch_bounds__(R5_THREADS, 2)
sweep5_bounded(const float* A, const float* B, float* C,
                                                 int M, int N, int K) {
    __shared__ float As[R5_BM * R5_BK];
    __shared__ float Bs[R5_BK * R5_BN];
    const int tid = threadIdx.x;
    const int bm = blockIdx.y * R5_BM, bn = blockIdx.x * R5_BN;
    const int thread_row = tid / (R5_BN / R5_TN), thread_col = tid % (R5_BN / R5_TN);
    const int a_row = tid / R5_BK, a_col = tid % R5_BK;  // rows a_row + 32 * pass
    const int b_row = tid / R5_BN, b_col = tid % R5_BN;  // rows b_row + 2 * pass
    constexpr int a_stride = R5_THREADS / R5_BK, b_stride = R5_THREADS / R5_BN;
    float acc[R5_TM][R5_TN] = {{0.0f}};
    float reg_m[R5_TM], reg_n[R5_TN];
    for (int k0 = 0; k0 < K; k0 += R5_BK) {
#pragma unroll  // loops with a count known to the compiler: unrolled, no loop overhead
        for (int p = 0; p < R5_BM / a_stride; ++p) {
            const int r = a_row + p * a_stride, gr = bm + r, gk = k0 + a_col;
            As[r * R5_BK + a_col] = (gr < M && gk < K) ? A[(size_t)gr * K + gk] : 0.0f;
        }
#pragma unroll
        for (int p = 0; p < R5_BK / b_stride; ++p) {
            const int r = b_row + p * b_stride, gk = k0 + r, gc = bn + b_col;
            Bs[r * R5_BN + b_col] = (gk < K && gc < N) ? B[(size_t)gk * N + gc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < R5_BK; ++k) {
            for (int i = 0; i < R5_TM; ++i) {
                reg_m[i] = As[(thread_row * R5_TM + i) * R5_BK + k];
            }
            for (int j = 0; j < R5_TN; ++j) {
                reg_n[j] = Bs[k * R5_BN + thread_col * R5_TN + j];
            }
            for (int i = 0; i < R5_TM; ++i) {
                for (int j = 0; j < R5_TN; ++j) {
                    acc[i][j] += reg_m[i] * reg_n[j];
                }
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < R5_TM; ++i) {
        for (int j = 0; j < R5_TN; ++j) {
            const int row = bm + thread_row * R5_TM + i, col = bn + thread_col * R5_TN + j;
            if (row < M && col < N) {
                C[(size_t)row * N + col] = acc[i][j];
            }
        }
    }
}

