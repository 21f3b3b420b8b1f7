// 16-bit floating point for cuda_fp16.h, cuda_bf16.h and the tensor-core emulation (emu_ptx.h):
// conversions of the bits, rounding to nearest even as the GPU's cvt.rn does.
// A fused multiply-add must round once, from the exact a*b+c to the 16-bit format, as the GPU's
// HFMA does: rounding a*b+c to float first and then to half (or bfloat16) can round twice in the
// same direction. Round-to-odd at an intermediate precision p+2 bits wider than the target is
// innocuous, so a*b+c (a*b exact in double) goes exact -> double (odd) -> float (odd) -> 16 bits.
#pragma once
#include <math.h>
#include <string.h>

// double -> float rounded to odd: the nearest float if d is one, else whichever of the two floats
// around d has an odd last significand bit (overflow gives FLT_MAX, which still rounds to inf).
static inline float __emu_d2f_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  unsigned b;
  memcpy(&b, &f, 4);
  if (b & 1u) return f;
  return nextafterf(f, (float)(d > (double)f ? INFINITY : -INFINITY));
}
// a*b + c (a*b of two floats is exact in double), rounded to odd at double then at float precision.
static inline float __emu_fma_odd(float a, float b, float c) {
  double p = (double)a * (double)b, s = p + (double)c;
  if (s != s || s - s != 0) return (float)s;  // NaN or inf: no rounding question
  double bv = s - p, err = (p - (s - bv)) + ((double)c - bv);  // TwoSum: s + err == p + c exactly
  if (err != 0) {
    unsigned long long u;
    memcpy(&u, &s, 8);
    if (!(u & 1ull)) s = nextafter(s, err > 0 ? INFINITY : -INFINITY);
  }
  return __emu_d2f_odd(s);
}

// float -> IEEE binary16 bits, round to nearest even; NaN -> CUDA's canonical 0x7fff.
static inline unsigned short __emu_f2h_bits(float f) {
  unsigned x;
  memcpy(&x, &f, 4);
  unsigned sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7fffu;  // NaN: CUDA's canonical half NaN, whatever the payload and sign
  if (ax == 0x7f800000u) return (unsigned short)(sign | 0x7c00u);
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    float a;
    memcpy(&a, &ax, 4);
    return (unsigned short)(sign | (unsigned)nearbyintf(a * 16777216.0f));
  }
  unsigned h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (unsigned short)(sign | h);
}
static inline float __emu_h2f_bits(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  if (e == 0) {
    float r = (float)m * 5.9604644775390625e-8f;
    return sign ? -r : r;
  }
  bits = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
  float r;
  memcpy(&r, &bits, 4);
  return r;
}

// float -> bfloat16 bits (the top 16 bits of a float), round to nearest even; NaN -> 0x7fff.
static inline unsigned short __emu_f2bf_bits(float f) {
  unsigned x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN: CUDA's canonical bfloat16 NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}
static inline float __emu_bf2f_bits(unsigned short b) {
  unsigned x = (unsigned)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}
