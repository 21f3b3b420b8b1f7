// cuda_fp16.h for the emulator: __half / __half2 stored as IEEE binary16 bits. Arithmetic is done
// in float and rounded back to nearest-even: for +, - and * this is exactly the GPU's correctly
// rounded half result (float's 24 bits >= 2*11+2 make the double rounding innocuous); fma rounds
// once through round-to-odd (emu_fp_round.h). Division is correctly rounded here, where CUDA's
// __hdiv (a reciprocal approximation) may differ in the last bit. A NaN result is 0x7fff.
#pragma once
#include <string.h>
#include <math.h>
#include "emu_fp_round.h"

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };

struct __attribute__((aligned(2))) __half {
  unsigned short __x;
  __half() = default;
  __half(const __half_raw& r) : __x(r.x) {}
  __half(float f) : __x(__emu_f2h_bits(f)) {}
  __half(double f) : __x(__emu_f2h_bits((float)f)) {}
  __half(int i) : __x(__emu_f2h_bits((float)i)) {}
  __half(unsigned i) : __x(__emu_f2h_bits((float)i)) {}
  __half(long long i) : __x(__emu_f2h_bits((float)i)) {}
  __half(unsigned long long i) : __x(__emu_f2h_bits((float)i)) {}
  __half(short i) : __x(__emu_f2h_bits((float)i)) {}
  operator float() const { return __emu_h2f_bits(__x); }
  operator __half_raw() const { return __half_raw{__x}; }
  __half& operator=(float f) { __x = __emu_f2h_bits(f); return *this; }
  __half& operator=(const __half_raw& r) { __x = r.x; return *this; }
};
struct __attribute__((aligned(4))) __half2 {
  __half x, y;
  __half2() = default;
  __half2(__half a, __half b) : x(a), y(b) {}
  __half2(const __half2_raw& r) { x.__x = r.x; y.__x = r.y; }
};
typedef __half half;
typedef __half2 half2;

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __double2half(double f) { return __half((float)f); }
static inline float __half2float(__half h) { return (float)h; }
static inline __half __int2half_rn(int i) { return __half((float)i); }
static inline int __half2int_rn(__half h) { return (int)nearbyintf((float)h); }
static inline int __half2int_rz(__half h) { return (int)(float)h; }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
static inline __half __short_as_half(short u) { return __half(__half_raw{(unsigned short)u}); }
static inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline float __low2float(__half2 h) { return (float)h.x; }
static inline float __high2float(__half2 h) { return (float)h.y; }
static inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
static inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
static inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
static inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }

#define __EMU_H_BIN(name, expr)                                                               \
  static inline __half name(__half a, __half b) { float x = (float)a, y = (float)b; return __half(expr); } \
  static inline __half2 name##2(__half2 a, __half2 b) { return __half2(name(a.x, b.x), name(a.y, b.y)); }
__EMU_H_BIN(__hadd, x + y)
__EMU_H_BIN(__hsub, x - y)
__EMU_H_BIN(__hmul, x * y)
__EMU_H_BIN(__hdiv, x / y)
__EMU_H_BIN(__hmax, fmaxf(x, y))
__EMU_H_BIN(__hmin, fminf(x, y))
#undef __EMU_H_BIN
static inline __half __hfma(__half a, __half b, __half c) { return __half(__emu_fma_odd((float)a, (float)b, (float)c)); }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
static inline __half __hneg(__half a) { return __ushort_as_half((unsigned short)(a.__x ^ 0x8000u)); }
static inline __half __habs(__half a) { return __ushort_as_half((unsigned short)(a.__x & 0x7fffu)); }
static inline bool __heq(__half a, __half b) { return (float)a == (float)b; }
static inline bool __hne(__half a, __half b) { return (float)a != (float)b; }
static inline bool __hlt(__half a, __half b) { return (float)a < (float)b; }
static inline bool __hle(__half a, __half b) { return (float)a <= (float)b; }
static inline bool __hgt(__half a, __half b) { return (float)a > (float)b; }
static inline bool __hge(__half a, __half b) { return (float)a >= (float)b; }
static inline bool __hisnan(__half a) { return (a.__x & 0x7fffu) > 0x7c00u; }
static inline int __hisinf(__half a) { return (a.__x & 0x7fffu) == 0x7c00u ? ((a.__x & 0x8000u) ? -1 : 1) : 0; }
static inline __half hexp(__half a) { return __half(expf((float)a)); }
static inline __half hlog(__half a) { return __half(logf((float)a)); }
static inline __half hsqrt(__half a) { return __half(sqrtf((float)a)); }
static inline __half hrsqrt(__half a) { return __half(1.0f / sqrtf((float)a)); }
static inline __half hrcp(__half a) { return __half(1.0f / (float)a); }
static inline __half htanh(__half a) { return __half(tanhf((float)a)); }
static inline __half2 h2exp(__half2 a) { return __half2(hexp(a.x), hexp(a.y)); }
static inline __half2 h2sqrt(__half2 a) { return __half2(hsqrt(a.x), hsqrt(a.y)); }
static inline __half operator+(__half a, __half b) { return __hadd(a, b); }
static inline __half operator-(__half a, __half b) { return __hsub(a, b); }
static inline __half operator*(__half a, __half b) { return __hmul(a, b); }
static inline __half operator/(__half a, __half b) { return __hdiv(a, b); }
static inline __half operator-(__half a) { return __hneg(a); }
static inline __half& operator+=(__half& a, __half b) { return a = __hadd(a, b); }
static inline __half& operator-=(__half& a, __half b) { return a = __hsub(a, b); }
static inline __half& operator*=(__half& a, __half b) { return a = __hmul(a, b); }
static inline __half& operator/=(__half& a, __half b) { return a = __hdiv(a, b); }
static inline bool operator==(__half a, __half b) { return __heq(a, b); }
static inline bool operator!=(__half a, __half b) { return __hne(a, b); }
static inline bool operator<(__half a, __half b) { return __hlt(a, b); }
static inline bool operator<=(__half a, __half b) { return __hle(a, b); }
static inline bool operator>(__half a, __half b) { return __hgt(a, b); }
static inline bool operator>=(__half a, __half b) { return __hge(a, b); }
static inline __half2 operator+(__half2 a, __half2 b) { return __hadd2(a, b); }
static inline __half2 operator-(__half2 a, __half2 b) { return __hsub2(a, b); }
static inline __half2 operator*(__half2 a, __half2 b) { return __hmul2(a, b); }
static inline __half atomicAdd(__half* a, __half v) {
  unsigned short* p = (unsigned short*)a;
  unsigned short old = __atomic_load_n(p, __ATOMIC_RELAXED), nv;
  do {
    nv = __emu_f2h_bits(__emu_h2f_bits(old) + (float)v);
  } while (!__atomic_compare_exchange_n(p, &old, nv, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return __ushort_as_half(old);
}
#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_NAN_FP16 __ushort_as_half((unsigned short)0x7FFFU)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7BFFU)
