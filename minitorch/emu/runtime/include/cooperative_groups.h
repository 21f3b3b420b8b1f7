// cooperative_groups.h for the emulator: block-level groups only. Grid-wide groups need a GPU.
#pragma once
namespace cooperative_groups {
struct thread_block {
  void sync() const { __syncthreads(); }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned thread_rank() const { return __emu_w->tid_linear; }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 group_dim() const { return blockDim; }
};
static inline thread_block this_thread_block() { return thread_block(); }
static inline void sync(const thread_block& b) { b.sync(); }
template <unsigned N>
struct thread_block_tile {
  static_assert(N <= 32 && (N & (N - 1)) == 0, "tiles are powers of two up to 32");
  unsigned mask() const {
    unsigned lane = __emu_w->tid_linear % 32;
    unsigned base = lane & ~(N - 1);
    return (N == 32 ? 0xffffffffu : ((1u << N) - 1)) << base;
  }
  void sync() const { __syncwarp(mask()); }
  unsigned size() const { return N; }
  unsigned num_threads() const { return N; }
  unsigned thread_rank() const { return __emu_w->tid_linear % N; }
  template <class T> T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, N); }
  template <class T> T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask(), v, d, N); }
  template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, N); }
  template <class T> T shfl_xor(T v, int m) const { return __shfl_xor_sync(mask(), v, m, N); }
  unsigned ballot(int p) const { return __ballot_sync(mask(), p) >> ((__emu_w->tid_linear % 32) & ~(N - 1)); }
  bool any(int p) const { return __any_sync(mask(), p); }
  bool all(int p) const { return __all_sync(mask(), p); }
};
template <unsigned N, class P>
thread_block_tile<N> tiled_partition(const P&) { return thread_block_tile<N>(); }
struct grid_group;
template <class T = void>
grid_group this_grid() {
  static_assert(sizeof(T*) == 0, "grid-wide cooperative groups (this_grid) are not supported by the emulator: this kernel needs an NVIDIA GPU (or Google Colab)");
}
}  // namespace cooperative_groups
