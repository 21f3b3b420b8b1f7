// CUDA atomics on top of the GCC __atomic builtins: blocks may run on several worker threads, so
// they must be real atomics. Floating-point adds are compare-and-swap loops, as on older GPUs.
#pragma once

#define __EMU_ATOMIC_INT(T)                                                                            \
  static inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }          \
  static inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }          \
  static inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }        \
  static inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }          \
  static inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }            \
  static inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }          \
  static inline T atomicCAS(T* a, T cmp, T v) {                                                        \
    __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);                \
    return cmp;                                                                                        \
  }                                                                                                    \
  static inline T atomicMin(T* a, T v) {                                                               \
    T old = __atomic_load_n(a, __ATOMIC_RELAXED);                                                      \
    while (v < old && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { \
    }                                                                                                  \
    return old;                                                                                        \
  }                                                                                                    \
  static inline T atomicMax(T* a, T v) {                                                               \
    T old = __atomic_load_n(a, __ATOMIC_RELAXED);                                                      \
    while (v > old && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { \
    }                                                                                                  \
    return old;                                                                                        \
  }
__EMU_ATOMIC_INT(int)
__EMU_ATOMIC_INT(unsigned int)
__EMU_ATOMIC_INT(unsigned long long)
__EMU_ATOMIC_INT(long long)
#undef __EMU_ATOMIC_INT

static inline unsigned short atomicCAS(unsigned short* a, unsigned short cmp, unsigned short v) {
  __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;
}
static inline unsigned atomicInc(unsigned* a, unsigned lim) {
  unsigned old = __atomic_load_n(a, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(a, &old, old >= lim ? 0u : old + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
static inline unsigned atomicDec(unsigned* a, unsigned lim) {
  unsigned old = __atomic_load_n(a, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(a, &old, (old == 0 || old > lim) ? lim : old - 1, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
  }
  return old;
}
static inline float atomicAdd(float* a, float v) {
  unsigned* p = (unsigned*)a;
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED), nv;
  do {
    float f;
    memcpy(&f, &old, 4);
    f += v;
    memcpy(&nv, &f, 4);
  } while (!__atomic_compare_exchange_n(p, &old, nv, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  float r;
  memcpy(&r, &old, 4);
  return r;
}
static inline double atomicAdd(double* a, double v) {
  unsigned long long* p = (unsigned long long*)a;
  unsigned long long old = __atomic_load_n(p, __ATOMIC_RELAXED), nv;
  do {
    double f;
    memcpy(&f, &old, 8);
    f += v;
    memcpy(&nv, &f, 8);
  } while (!__atomic_compare_exchange_n(p, &old, nv, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  double r;
  memcpy(&r, &old, 8);
  return r;
}
static inline float atomicExch(float* a, float v) {
  unsigned nv;
  memcpy(&nv, &v, 4);
  unsigned old = __atomic_exchange_n((unsigned*)a, nv, __ATOMIC_RELAXED);
  float r;
  memcpy(&r, &old, 4);
  return r;
}
template <class F>
static inline float __emu_float_cas_op(float* a, F f) {
  unsigned* p = (unsigned*)a;
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED), nv;
  do {
    float x;
    memcpy(&x, &old, 4);
    x = f(x);
    memcpy(&nv, &x, 4);
  } while (!__atomic_compare_exchange_n(p, &old, nv, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  float r;
  memcpy(&r, &old, 4);
  return r;
}
static inline float atomicMax(float* a, float v) { return __emu_float_cas_op(a, [v](float x) { return fmaxf(x, v); }); }
static inline float atomicMin(float* a, float v) { return __emu_float_cas_op(a, [v](float x) { return fminf(x, v); }); }

// scoped variants: one address space on the CPU
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicSub_block atomicSub
#define atomicExch_block atomicExch
#define atomicMin_block atomicMin
#define atomicMax_block atomicMax
#define atomicCAS_block atomicCAS
#define atomicAnd_block atomicAnd
#define atomicOr_block atomicOr
#define atomicXor_block atomicXor
#define atomicInc_block atomicInc
