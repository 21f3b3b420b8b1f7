// Sum reduction. Each block of 256 threads sums a contiguous chunk of 256*ELEMS
// elements: per-thread partial sums, a shared-memory tree down to 32 values, then a
// warp-shuffle stage, and one atomicAdd per block into out[0].
#define BLOCK 256
#define ELEMS 4

extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
    __shared__ float s[BLOCK];
    int tid = threadIdx.x;
    int base = blockIdx.x * BLOCK * ELEMS + tid;
    float v = 0.0f;
    for (int e = 0; e < ELEMS; ++e) {
        int i = base + e * BLOCK;  // coalesced: consecutive threads, consecutive addresses
        if (i < n) v += x[i];
    }
    s[tid] = v;
    __syncthreads();
    for (int stride = BLOCK / 2; stride >= 32; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid < 32) {
        v = s[tid];
        for (int offset = 16; offset > 0; offset /= 2)
            v += __shfl_down_sync(0xffffffffu, v, offset);
        if (tid == 0) atomicAdd(out, v);
    }
}
