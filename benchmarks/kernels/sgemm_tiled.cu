// Tiled SGEMM: C[M,N] = A[M,K] @ B[K,N], row-major float32.
// One 16x16 block per 16x16 tile of C; A and B tiles are staged in shared memory.
#define TILE 16

extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C,
                                       int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + tx;
        int kb = t * TILE + ty;
        As[ty][tx] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        Bs[ty][tx] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();  // the next iteration overwrites the tiles
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
