// The PTX instructions of the tensor-core lab, as C++: compiler.py rewrites each inline
// `asm volatile("...")` statement it recognises into calls of these functions (see
// rewrite_inline_ptx). Register layouts are those of the PTX ISA, so that a learner's wrong fragment
// layout gives wrong values, as on a GPU:
//   mma.sync.aligned.m16n8k16.row.col (f16 or bf16 inputs, f32 or f16 accumulators)
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16
//   cp.async.{ca,cg}.shared.global (4, 8, 16 bytes), commit_group, wait_group, wait_all
//   __cvta_generic_to_shared (shared-window addresses are 32-bit, as on a GPU).
// The warp-collective instructions meet at the runtime's warp rendezvous (emu_rt_warp): each lane
// hands in a record of its registers, and the last lane to arrive computes every lane's result.
// Memory is read and written by each lane itself, in inlined code, so that check mode sees those
// accesses at the learner's source line.
#pragma once
#include "emu_fp_round.h"

#define __EMU_AI static inline __attribute__((always_inline))
#define __EMU_COLLECTIVE static __attribute__((noinline, no_sanitize("thread")))

// ---- shared-window addresses ------------------------------------------------------------------
static inline size_t __cvta_generic_to_shared(const void* p, const char* f = __builtin_FILE(),
                                              int l = __builtin_LINE()) {
  return emu_rt_cvta_shared(__emu_w, p, f, l);
}
static inline void* __cvta_shared_to_generic(size_t a, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return emu_rt_shared_ptr(__emu_w, (unsigned)a, 1, 1, "__cvta_shared_to_generic", f, l);
}

__EMU_AI void __emu_need_full_warp(const char* what, const char* f, int l) {
  unsigned m = emu_rt_activemask(__emu_w);
  if (m != 0xffffffffu) {
    char msg[320];
    snprintf(msg, sizeof msg,
             "%s is a .sync.aligned warp instruction: all 32 lanes of the warp must execute it, but only lanes "
             "0x%08x of this warp are running (the block size is not a multiple of 32, or lanes returned early)",
             what, m);
    emu_rt_trap(__emu_w, msg, f, l);
  }
}

// ---- ldmatrix ------------------------------------------------------------------------------
// Matrix j (of 1, 2 or 4) is 8 rows of 8 b16 values; lane 8*j + r gives the shared address of
// row r. Lane l receives, for each matrix, the pair (row l/4, columns 2*(l%4) and 2*(l%4)+1) in
// one .b32 register (the lower column in the low half); with .trans, the pair (rows 2*(l%4) and
// 2*(l%4)+1, column l/4).
struct __emu_ldmatrix_lane {
  EmuCollective fn;
  int num, trans;
  unsigned row[4];  // the 16 bytes of the row this lane addressed (lanes < 8*num)
  unsigned out[4];
};
__EMU_COLLECTIVE void __emu_ldmatrix_all(void* const* lanes, unsigned members) {
  (void)members;
  const __emu_ldmatrix_lane* first = (const __emu_ldmatrix_lane*)lanes[0];
  auto elem = [&](unsigned rowlane, unsigned col) -> unsigned {  // b16 element col of a row
    const __emu_ldmatrix_lane* r = (const __emu_ldmatrix_lane*)lanes[rowlane];
    return (r->row[col >> 1] >> (16 * (col & 1))) & 0xffffu;
  };
  for (unsigned l = 0; l < 32; l++) {
    __emu_ldmatrix_lane* me = (__emu_ldmatrix_lane*)lanes[l];
    for (int j = 0; j < first->num; j++) {
      unsigned base = 8u * (unsigned)j;
      if (!first->trans)
        me->out[j] = elem(base + l / 4, 2 * (l % 4)) | (elem(base + l / 4, 2 * (l % 4) + 1) << 16);
      else
        me->out[j] = elem(base + 2 * (l % 4), l / 4) | (elem(base + 2 * (l % 4) + 1, l / 4) << 16);
    }
  }
}
__EMU_AI void __emu_ldmatrix(int num, int trans, unsigned addr, unsigned* d, const char* f, int l) {
  __emu_need_full_warp("ldmatrix", f, l);
  __emu_ldmatrix_lane rec;
  rec.fn = __emu_ldmatrix_all;
  rec.num = num;
  rec.trans = trans;
  unsigned lane = __emu_w->tid_linear % 32;
  rec.row[0] = rec.row[1] = rec.row[2] = rec.row[3] = 0;
  if (lane < 8u * (unsigned)num) {
    const unsigned* q = (const unsigned*)emu_rt_shared_ptr(__emu_w, addr, 16, 16, "ldmatrix row address", f, l);
    rec.row[0] = q[0];
    rec.row[1] = q[1];
    rec.row[2] = q[2];
    rec.row[3] = q[3];
  }
  emu_rt_warp(__emu_w, EMU_W_LDMATRIX, 0xffffffffu, (unsigned long long)(uintptr_t)&rec, 0, 32, f, l);
  for (int j = 0; j < num; j++) d[j] = rec.out[j];
}

// ---- mma.sync.aligned.m16n8k16.row.col ---------------------------------------------------------
// groupID g = lane/4, t = lane%4. A (16x16, row-major) in 4 .b32 registers of two 16-bit values:
// a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1], a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9].
// B (16x8, "col": k runs down a column): b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g].
// C and D (16x8): c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1].
// Products of 16-bit values are exact in float; they are summed in float in k order onto C (the
// GPU's order and internal rounding are unspecified: on inputs whose sums are exact in float, the
// result is the GPU's, bit for bit).
struct __emu_mma_lane {
  EmuCollective fn;
  int bf16;  // inputs are bfloat16 (else half)
  unsigned a[4], b[2];
  float c[4], d[4];
};
__EMU_COLLECTIVE void __emu_mma_m16n8k16_all(void* const* lanes, unsigned members) {
  (void)members;
  float A[16][16], B[16][8], C[16][8];
  int bf16 = ((const __emu_mma_lane*)lanes[0])->bf16;
  auto cvt = [bf16](unsigned bits) { return bf16 ? __emu_bf2f_bits((unsigned short)bits) : __emu_h2f_bits((unsigned short)bits); };
  for (unsigned l = 0; l < 32; l++) {
    const __emu_mma_lane* r = (const __emu_mma_lane*)lanes[l];
    unsigned g = l / 4, t = l % 4;
    for (unsigned i = 0; i < 4; i++) {
      unsigned row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
      A[row][col] = cvt(r->a[i] & 0xffffu);
      A[row][col + 1] = cvt(r->a[i] >> 16);
    }
    for (unsigned i = 0; i < 2; i++) {
      B[2 * t + 8 * i][g] = cvt(r->b[i] & 0xffffu);
      B[2 * t + 8 * i + 1][g] = cvt(r->b[i] >> 16);
    }
    for (unsigned i = 0; i < 4; i++) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = r->c[i];
  }
  for (unsigned l = 0; l < 32; l++) {
    __emu_mma_lane* r = (__emu_mma_lane*)lanes[l];
    unsigned g = l / 4, t = l % 4;
    for (unsigned i = 0; i < 4; i++) {
      unsigned row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      float acc = C[row][col];
      for (int k = 0; k < 16; k++) acc = fmaf(A[row][k], B[k][col], acc);
      r->d[i] = acc;
    }
  }
}
// f32 accumulators: c and d are 4 floats each.
__EMU_AI void __emu_mma_m16n8k16_f32(int bf16, const unsigned* a, const unsigned* b, const float* c, float* d,
                                     const char* f, int l) {
  __emu_need_full_warp("mma.sync", f, l);
  __emu_mma_lane rec;
  rec.fn = __emu_mma_m16n8k16_all;
  rec.bf16 = bf16;
  for (int i = 0; i < 4; i++) rec.a[i] = a[i], rec.c[i] = c[i];
  rec.b[0] = b[0];
  rec.b[1] = b[1];
  emu_rt_warp(__emu_w, EMU_W_MMA, 0xffffffffu, (unsigned long long)(uintptr_t)&rec, 0, 32, f, l);
  for (int i = 0; i < 4; i++) d[i] = rec.d[i];
}
// f16 accumulators: c and d are 2 .b32 registers of two halves (c[0] = row g, c[1] = row g+8).
__EMU_AI void __emu_mma_m16n8k16_f16(const unsigned* a, const unsigned* b, const unsigned* c, unsigned* d,
                                     const char* f, int l) {
  float cf[4], df[4];
  for (int i = 0; i < 4; i++) cf[i] = __emu_h2f_bits((unsigned short)(c[i >> 1] >> (16 * (i & 1))));
  __emu_mma_m16n8k16_f32(0, a, b, cf, df, f, l);
  for (int i = 0; i < 2; i++) d[i] = __emu_f2h_bits(df[2 * i]) | ((unsigned)__emu_f2h_bits(df[2 * i + 1]) << 16);
}

// ---- cp.async -------------------------------------------------------------------------------
// The source is read when the instruction is issued; the shared destination is written when a
// cp.async.wait_group (or wait_all) of the issuing thread covers the copy's group. Until then, in
// check mode, any access to the destination is reported as a race.
__EMU_AI void __emu_cp_async(unsigned dst, const void* src, unsigned n, unsigned src_size, const char* f, int l) {
  if (n != 4 && n != 8 && n != 16) {
    char msg[160];
    snprintf(msg, sizeof msg, "cp.async copies 4, 8 or 16 bytes, not %u", n);
    emu_rt_trap(__emu_w, msg, f, l);
  }
  if ((uintptr_t)src % n) {
    char msg[200];
    snprintf(msg, sizeof msg, "misaligned address: cp.async of %u bytes from global address %p, which is not "
             "a multiple of %u", n, src, n);
    emu_rt_trap(__emu_w, msg, f, l);
  }
  unsigned buf[4] = {0, 0, 0, 0};
  if (src_size >= n) {
    const unsigned* q = (const unsigned*)src;
    for (unsigned i = 0; i < n / 4; i++) buf[i] = q[i];
  } else {  // src-size operand: the bytes past src_size are zero-filled
    const unsigned char* q = (const unsigned char*)src;
    unsigned char* b = (unsigned char*)buf;
    for (unsigned i = 0; i < src_size; i++) b[i] = q[i];
  }
  emu_rt_cp_async(__emu_w, dst, buf, n, f, l);
}
__EMU_AI void __emu_cp_async_commit() { emu_rt_cp_async_commit(__emu_w); }
__EMU_AI void __emu_cp_async_wait(long long keep, const char* f, int l) { emu_rt_cp_async_wait(__emu_w, (int)keep, f, l); }
__EMU_AI void __emu_cp_async_wait_all(const char* f, int l) {
  emu_rt_cp_async_commit(__emu_w);
  emu_rt_cp_async_wait(__emu_w, 0, f, l);
}
