// The ceiling of wgmma on this GPU, appended by benchmarks/phase8a_hgemm.py to the lab's rung 6
// (hgemm_wgmma.cu from solutions/phase8a_tensor_cores.ipynb, whose helpers it uses): two warpgroups a
// block issue m64n256k16 from one 48 KB shared-memory tile (filled with ones), one group in flight,
// nothing else. FLOPs: 2 * 64 * 256 * 16 = 524288 an instruction, 4 an iteration, `iters` iterations a
// warpgroup.
template <typename T>
__global__ void __launch_bounds__(256, 1) wgmma_peak(float* out, int iters) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
    unsigned char* gbase = smem_raw + (base - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)));
    const unsigned one = IsBf16<T>::value ? 0x3f803f80u : 0x3c003c00u;
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
