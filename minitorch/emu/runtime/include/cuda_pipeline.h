// cuda_pipeline.h for the emulator: the __pipeline_* primitives are cp.async (emu_ptx.h).
#pragma once

static inline __attribute__((always_inline)) void __pipeline_memcpy_async(
    void* dst_shared, const void* src_global, size_t size_and_align, size_t zfill = 0,
    const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  unsigned n = (unsigned)size_and_align;
  __emu_cp_async(emu_rt_cvta_shared(__emu_w, dst_shared, f, l), src_global, n, n - (unsigned)zfill, f, l);
}
static inline __attribute__((always_inline)) void __pipeline_commit() { __emu_cp_async_commit(); }
static inline __attribute__((always_inline)) void __pipeline_wait_prior(size_t prior, const char* f = __builtin_FILE(),
                                                                         int l = __builtin_LINE()) {
  __emu_cp_async_wait((long long)prior, f, l);
}
