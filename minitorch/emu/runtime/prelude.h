// Force-included (g++ -include) before the learner's unmodified CUDA C source, so that compiler
// messages keep the learner's own line numbers. It maps CUDA's language extensions onto C++17
// and the emulator runtime (runtime.cpp). Standard headers come first: the macros below
// (__noinline__, __shared__, ...) must not leak into them.
#pragma once
#include <assert.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#if defined(__cpp_impl_coroutine)
#include <coroutine>
#endif

#include "emu_abi.h"

#define __CUDACC__ 1
#define __CUDA_ARCH__ 800
#define __MINITORCH_EMU__ 1
#define CUDART_VERSION 12000

// The current CUDA thread, block and launch shape of this worker thread (set by the runtime).
// Placed in .tdata, which precedes every zero-initialised __shared__ variable (.tbss) and the red
// zone in front of them (runtime/tls_pad.cpp): a learner's shared-array overrun cannot reach it.
static thread_local EmuCtx* __emu_w __attribute__((section(".tdata.emu_anchor"))) = nullptr;
extern "C" __attribute__((visibility("default"), used)) void* __emu_bind(EmuCtx* c) {
  __emu_w = c;
  return (void*)&__emu_w;
}

#define threadIdx (__emu_w->threadIdx)
#define blockIdx (__emu_w->blockIdx)
#define blockDim (__emu_w->blockDim)
#define gridDim (__emu_w->gridDim)
static constexpr int warpSize = 32;

// ---- qualifiers ---------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
// Block-scope thread_local is static storage; `static __shared__` also works. g++ guards a
// thread_local array of a class type (__half, float2, ...) with a hidden flag, read at the
// declaration, which check mode would see as an access outside every __shared__ variable:
// __constinit (shared variables take no initializer in CUDA either) makes it static, flag-free.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define __shared__ __constinit thread_local
#else
#define __shared__ thread_local
#endif
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __cudart_builtin__
#define __device_builtin__

// extern __shared__ T name[]; is rewritten by the emulator (same line) to one of these.
static inline char* __emu_dyn_smem() { return __emu_w->dyn_smem; }
template <class T>
struct __emu_dynarr {
  T* p() const { return (T*)__emu_w->dyn_smem; }
  operator T*() const { return p(); }
  template <class U>
  explicit operator U*() const { return (U*)p(); }
  T& operator[](long long i) const { return p()[i]; }
  T* operator+(long long i) const { return p() + i; }
};

// ---- barriers and warp primitives (call sites are recorded for diagnostics) ------------------
static inline void __syncthreads(const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  emu_rt_barrier(__emu_w, 0, 1, f, l);
}
static inline int __syncthreads_count(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return emu_rt_barrier(__emu_w, 1, p != 0, f, l);
}
static inline int __syncthreads_and(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return emu_rt_barrier(__emu_w, 2, p != 0, f, l);
}
static inline int __syncthreads_or(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return emu_rt_barrier(__emu_w, 3, p != 0, f, l);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  emu_rt_warp(__emu_w, EMU_W_SYNCWARP, mask, 0, 0, 32, f, l);
}
template <class T>
static inline unsigned long long __emu_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp shuffles take a scalar of at most 8 bytes");
  unsigned long long b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
static inline T __emu_from_bits(unsigned long long b) {
  T v;
  memcpy(&v, &b, sizeof(T));
  return v;
}
template <class T>
static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32, const char* f = __builtin_FILE(),
                            int l = __builtin_LINE()) {
  return __emu_from_bits<T>(emu_rt_warp(__emu_w, EMU_W_SHFL, mask, __emu_bits(var), srcLane, width, f, l));
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* f = __builtin_FILE(),
                               int l = __builtin_LINE()) {
  return __emu_from_bits<T>(emu_rt_warp(__emu_w, EMU_W_SHFL_UP, mask, __emu_bits(var), (int)delta, width, f, l));
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                                 const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return __emu_from_bits<T>(emu_rt_warp(__emu_w, EMU_W_SHFL_DOWN, mask, __emu_bits(var), (int)delta, width, f, l));
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32,
                                const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return __emu_from_bits<T>(emu_rt_warp(__emu_w, EMU_W_SHFL_XOR, mask, __emu_bits(var), laneMask, width, f, l));
}
static inline unsigned __ballot_sync(unsigned mask, int pred, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return (unsigned)emu_rt_warp(__emu_w, EMU_W_BALLOT, mask, pred != 0, 0, 32, f, l);
}
static inline int __any_sync(unsigned mask, int pred, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return (int)emu_rt_warp(__emu_w, EMU_W_ANY, mask, pred != 0, 0, 32, f, l);
}
static inline int __all_sync(unsigned mask, int pred, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return (int)emu_rt_warp(__emu_w, EMU_W_ALL, mask, pred != 0, 0, 32, f, l);
}
template <class T>
static inline unsigned __match_any_sync(unsigned mask, T v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return (unsigned)emu_rt_warp(__emu_w, EMU_W_MATCH_ANY, mask, __emu_bits(v), 0, 32, f, l);
}
static inline unsigned __activemask() { return emu_rt_activemask(__emu_w); }
static inline unsigned __lanemask_lt() { return (1u << (__emu_w->tid_linear % 32)) - 1; }
// Pre-Volta forms without a mask were removed from CUDA: point the learner at the _sync ones.
#define __shfl(...) static_assert(false, "__shfl() was removed in CUDA 9: use __shfl_sync(0xffffffff, ...)")
#define __shfl_down(...) static_assert(false, "__shfl_down() was removed in CUDA 9: use __shfl_down_sync(0xffffffff, ...)")
#define __shfl_up(...) static_assert(false, "__shfl_up() was removed in CUDA 9: use __shfl_up_sync(0xffffffff, ...)")
#define __shfl_xor(...) static_assert(false, "__shfl_xor() was removed in CUDA 9: use __shfl_xor_sync(0xffffffff, ...)")
#define __ballot(...) static_assert(false, "__ballot() was removed in CUDA 9: use __ballot_sync(0xffffffff, ...)")

// ---- kernels split at their barriers (compiler.py rewrites such a kernel on its own lines) --------
// Each CUDA thread is a coroutine whose frame comes from the block's arena (emu_rt_split_block frees
// them all at once); each __syncthreads() of the kernel's body is `co_await __emu_split::barrier{...}`.
#if defined(__cpp_impl_coroutine)
namespace __emu_split {
struct task {
  struct promise_type {
    task get_return_object() noexcept { return task{std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { __builtin_trap(); }
    static void* operator new(size_t n) {
      EmuCtx* c = __emu_w;
      n = (n + 15) & ~(size_t)15;
      char* p = c->co_next;
      if ((size_t)(c->co_end - p) < n) return emu_rt_split_alloc(c, n);
      c->co_next = p + n;
      return p;
    }
    static void operator delete(void*) noexcept {}
  };
  std::coroutine_handle<promise_type> h;
};
struct barrier {
  const char* file;
  int line;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<>) const noexcept {
    __emu_w->co_file = file;
    __emu_w->co_line = line;
  }
  void await_resume() const noexcept {}
};
// The kernel's integer parameters: as passed (id), or constants of a specialisation (specialize.py).
struct id {
  template <size_t I>
  static constexpr bool has() { return false; }
  template <size_t I, class T>
  static constexpr T val() { return T(); }
};
}  // namespace __emu_split
#endif

static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __nanosleep(unsigned) {}
static inline long long clock64() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// ---- kernel-side printf / assert / abort / trap -----------------------------------------------
// Defined here (and bound inside the module with -Bsymbolic) so that they report to the emulator
// instead of writing to the process's stdout (invisible in Jupyter) or killing the process.
extern "C" int printf(const char* __restrict fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = emu_rt_vprintf(__emu_w, fmt, ap);
  va_end(ap);
  return n;
}
extern "C" void __assert_fail(const char* expr, const char* file, unsigned int line, const char* func) noexcept {
  emu_rt_assert_fail(__emu_w, expr, file, line, func);
}
extern "C" void abort() noexcept { emu_rt_trap(__emu_w, "abort() called", "", 0); }
static inline void __trap(const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  emu_rt_trap(__emu_w, "__trap() called", f, l);
}
static inline void __brkpt(const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  emu_rt_trap(__emu_w, "__brkpt() called", f, l);
}

// ---- loads with cache hints -------------------------------------------------------------------
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }
static inline unsigned __isGlobal(const void*) { return 1; }
static inline unsigned __isShared(const void*) { return 0; }

#include "emu_vector_types.h"
#include "emu_math.h"
#include "emu_atomics.h"
#include "emu_ptx.h"

// ---- code the emulator generates after the learner's source --------------------------------
#pragma push_macro("threadIdx")
#pragma push_macro("blockIdx")
#pragma push_macro("blockDim")
#pragma push_macro("gridDim")
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
namespace __emu_gen {
template <class T>
static inline T arg(void* p) {
  T v;
  memcpy((void*)&v, p, sizeof(T));
  return v;
}
template <class T>
const char* tname() { return __PRETTY_FUNCTION__; }

template <class T>
char kind() {
  if (std::is_pointer<T>::value) return 'p';
  if (std::is_same<T, bool>::value) return 'b';
  if (std::is_floating_point<T>::value) return 'f';
  if (std::is_integral<T>::value) return std::is_signed<T>::value ? 'i' : 'u';
  if (std::is_void<T>::value) return 'v';
  return 's';
}
template <class T>
struct size_of { static constexpr size_t value = sizeof(T); };
template <>
struct size_of<void> { static constexpr size_t value = 0; };
template <>
struct size_of<const void> { static constexpr size_t value = 0; };
template <>
struct size_of<volatile void> { static constexpr size_t value = 0; };
template <>
struct size_of<const volatile void> { static constexpr size_t value = 0; };

template <class T>
void describe(std::string& s) {
  using P = typename std::remove_cv<typename std::remove_pointer<T>::type>::type;
  s += kind<T>();
  s += ';';
  s += std::to_string(sizeof(T));
  s += ';';
  if (std::is_pointer<T>::value) {
    s += kind<P>();
    s += ';';
    s += std::to_string(size_of<P>::value);
    s += ';';
    s += tname<P>();
  } else {
    s += "-;0;-";
  }
  s += '\x1f';
  s += tname<T>();
  s += '\n';
}

template <auto F, class Sig = decltype(F)>
struct K;
template <auto F, class... A>
struct K<F, void (*)(A...)> {
  template <size_t... I>
  static void run1_(void** a, std::index_sequence<I...>) { F(arg<A>(a[I])...); }
  static void run1(void** a) { run1_(a, std::index_sequence_for<A...>{}); }
  // Kernels that use no barrier or warp primitive: every thread of the block runs to completion
  // in turn, with no fibers.
  template <size_t... I>
  static void plain_(void** a, EmuCtx* c, const unsigned* order, std::index_sequence<I...>) {
    std::tuple<A...> t(arg<A>(a[I])...);
    (void)t;
    unsigned bx = c->blockDim.x, by = c->blockDim.y, bz = c->blockDim.z;
    if (!order) {
      unsigned i = 0;
      for (unsigned z = 0; z < bz; z++)
        for (unsigned y = 0; y < by; y++)
          for (unsigned x = 0; x < bx; x++, i++) {
            c->tid_linear = i;
            // one field at a time: a whole uint3 is assembled on the stack when the kernel is
            // compiled with -fsanitize=alignment, and reloading it stalls store forwarding
            c->threadIdx.x = x;
            c->threadIdx.y = y;
            c->threadIdx.z = z;
            F(std::get<I>(t)...);
          }
    } else {
      for (unsigned k = 0; k < c->nthreads; k++) {
        unsigned i = order[k];
        c->tid_linear = i;
        c->threadIdx.x = i % bx;
        c->threadIdx.y = (i / bx) % by;
        c->threadIdx.z = i / (bx * by);
        F(std::get<I>(t)...);
      }
    }
  }
  static void plain(void** a, EmuCtx* c, const unsigned* order) {
    plain_(a, c, order, std::index_sequence_for<A...>{});
  }
  // Specialised for one launch's integer arguments (specialize.py): V::get<I, T>(a[I]) is a constant
  // for those, the argument otherwise. `flatten` inlines the kernel (and what it calls) here, so the
  // compiler sees the sizes as constants: a division by one becomes a multiplication, loops of known
  // trip count unroll.
  template <class V, size_t... I>
  __attribute__((flatten)) static void run1v_(void** a, std::index_sequence<I...>) {
    F(V::template get<I, A>(a[I])...);
  }
  template <class V>
  static void run1v(void** a) { run1v_<V>(a, std::index_sequence_for<A...>{}); }
  template <class V, size_t... I>
  __attribute__((flatten)) static void plainv_(void** a, EmuCtx* c, const unsigned* order,
                                               std::index_sequence<I...>) {
    unsigned bx = c->blockDim.x, by = c->blockDim.y, bz = c->blockDim.z;
    if (!order) {
      unsigned i = 0;
      for (unsigned z = 0; z < bz; z++)
        for (unsigned y = 0; y < by; y++)
          for (unsigned x = 0; x < bx; x++, i++) {
            c->tid_linear = i;
            c->threadIdx.x = x;
            c->threadIdx.y = y;
            c->threadIdx.z = z;
            F(V::template get<I, A>(a[I])...);
          }
    } else {
      for (unsigned k = 0; k < c->nthreads; k++) {
        unsigned i = order[k];
        c->tid_linear = i;
        c->threadIdx.x = i % bx;
        c->threadIdx.y = (i / bx) % by;
        c->threadIdx.z = i / (bx * by);
        F(V::template get<I, A>(a[I])...);
      }
    }
  }
  template <class V>
  static void plainv(void** a, EmuCtx* c, const unsigned* order) {
    plainv_<V>(a, c, order, std::index_sequence_for<A...>{});
  }
  static const char* desc() {
    static std::string s;
    if (s.empty()) {
      s = "ok\n";
      (describe<A>(s), ...);
    }
    return s.c_str();
  }
};
#if defined(__cpp_impl_coroutine)
// A kernel split at its barriers: the runtime starts and resumes one coroutine per thread.
template <auto F, class... A>
struct K<F, __emu_split::task (*)(A...)> {
  static void run1(void** a) {
    (void)a;
    emu_rt_trap(__emu_w, "internal: a kernel split at its barriers was run on fibers", "", 0);
  }
  template <size_t... I>
  static void* start_(void* d, std::index_sequence<I...>) {
    std::tuple<A...>& t = *(std::tuple<A...>*)d;
    return F(std::get<I>(t)...).h.address();
  }
  static void* start(void* d) { return start_(d, std::index_sequence_for<A...>{}); }
  template <size_t... I>
  static void plain_(void** a, EmuCtx* c, std::index_sequence<I...>) {
    std::tuple<A...> t(arg<A>(a[I])...);
    emu_rt_split_block(c, &start, &t);
  }
  static void plain(void** a, EmuCtx* c, const unsigned* order) {
    (void)order;  // the runtime follows the schedule itself
    plain_(a, c, std::index_sequence_for<A...>{});
  }
  static const char* desc() { return K<F, void (*)(A...)>::desc(); }
};
#endif
}  // namespace __emu_gen
#pragma pop_macro("threadIdx")
#pragma pop_macro("blockIdx")
#pragma pop_macro("blockDim")
#pragma pop_macro("gridDim")

// Features a CPU cannot emulate meaningfully: the emulator's pre-scan names them with the line;
// these are a second line of defence.
#define __EMU_NEEDS_GPU(what) static_assert(false, what " is not supported by the emulator: this kernel needs an NVIDIA GPU (or Google Colab)")
#define tex1Dfetch(...) __EMU_NEEDS_GPU("texture fetch")
#define tex2D(...) __EMU_NEEDS_GPU("texture fetch")
#define surf2Dwrite(...) __EMU_NEEDS_GPU("surface write")

// Names of the host's <math.h>, <float.h> and <limits.h> that NVRTC (CuPy's compiler for the GPU)
// does not have: a kernel using them would compile here and fail on a GPU. Undefined after the
// runtime's own headers (which have expanded them already), so that the learner's `#ifndef INFINITY`
// works as under NVRTC; compiler.py adds what to write instead to the "not declared" error.
#undef INFINITY
#undef NAN
#undef HUGE_VAL
#undef HUGE_VALF
#undef HUGE_VALL
#undef MAXFLOAT
#undef M_E
#undef M_LOG2E
#undef M_LOG10E
#undef M_LN2
#undef M_LN10
#undef M_PI
#undef M_PI_2
#undef M_PI_4
#undef M_1_PI
#undef M_2_PI
#undef M_2_SQRTPI
#undef M_SQRT2
#undef M_SQRT1_2
#undef FLT_MAX
#undef FLT_MIN
#undef FLT_EPSILON
#undef FLT_TRUE_MIN
#undef DBL_MAX
#undef DBL_MIN
#undef DBL_EPSILON
#undef DBL_TRUE_MIN
#undef CHAR_BIT
#undef SCHAR_MIN
#undef SCHAR_MAX
#undef UCHAR_MAX
#undef SHRT_MIN
#undef SHRT_MAX
#undef USHRT_MAX
#undef INT_MIN
#undef INT_MAX
#undef UINT_MAX
#undef LONG_MIN
#undef LONG_MAX
#undef ULONG_MAX
#undef LLONG_MIN
#undef LLONG_MAX
#undef ULLONG_MAX
