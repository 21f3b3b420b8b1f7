// Row softmax, one block of 256 threads per row: block max, then block sum of
// exp(x - max), both by shared-memory tree reductions, then the normalised write.
#define BLOCK 256

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    __shared__ float s[BLOCK];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    if (row >= rows) return;  // uniform per block, so no barrier divergence
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;

    float m = __int_as_float(0xff800000);  // -infinity (NVRTC has no INFINITY)
    for (int j = tid; j < cols; j += BLOCK) m = fmaxf(m, xr[j]);
    s[tid] = m;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] = fmaxf(s[tid], s[tid + stride]);
        __syncthreads();
    }
    m = s[0];
    __syncthreads();  // everyone has read the max before s is reused

    float sum = 0.0f;
    for (int j = tid; j < cols; j += BLOCK) sum += expf(xr[j] - m);
    s[tid] = sum;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    float inv = 1.0f / s[0];
    for (int j = tid; j < cols; j += BLOCK) yr[j] = expf(xr[j] - m) * inv;
}
