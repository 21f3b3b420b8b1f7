// mma.h for the emulator: nvcuda::wmma with half and bfloat16 inputs, float or half accumulators,
// shapes m16n16k16, m32n8k16 and m8n32k16.
//
// CUDA leaves the layout of a WMMA fragment unspecified; the emulator's is: element e of lane l
// is element f = 32*e + l of the tile in row-major order (row f / cols, column f % cols). Any
// code that uses fragments only through load/store/fill/mma_sync and element-wise operations on
// x[] is correct under every layout. load_matrix_sync, store_matrix_sync and fill_fragment are
// done by each lane on its own elements (check mode sees each lane's accesses); mma_sync is a
// warp collective: the 32 lanes meet, and the last one computes D = A*B + C for all. Products of
// 16-bit values are exact in float and summed in float in k order onto C.
#pragma once
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_fp16.h"

namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int m, int n, int k>
struct __emu_tile;
template <int m, int n, int k>
struct __emu_tile<matrix_a, m, n, k> { enum { rows = m, cols = k }; };
template <int m, int n, int k>
struct __emu_tile<matrix_b, m, n, k> { enum { rows = k, cols = n }; };
template <int m, int n, int k>
struct __emu_tile<accumulator, m, n, k> { enum { rows = m, cols = n }; };

template <class Use, int m, int n, int k, class T, class Layout = void>
struct fragment {
  static_assert((m == 16 && n == 16 && k == 16) || (m == 32 && n == 8 && k == 16) || (m == 8 && n == 32 && k == 16),
                "wmma::fragment: the emulator supports the half/bfloat16 shapes m16n16k16, m32n8k16 and m8n32k16");
  static_assert(std::is_same<Use, accumulator>::value || std::is_same<T, __half>::value ||
                    std::is_same<T, __nv_bfloat16>::value,
                "wmma::fragment: matrix_a and matrix_b fragments hold half or __nv_bfloat16");
  static_assert(!std::is_same<Use, accumulator>::value || std::is_same<T, float>::value || std::is_same<T, __half>::value,
                "wmma::fragment: accumulator fragments hold float or half");
  static_assert(std::is_same<Use, accumulator>::value == std::is_same<Layout, void>::value,
                "wmma::fragment: matrix_a and matrix_b fragments take a layout (row_major or col_major), "
                "accumulator fragments none");
  enum { rows = __emu_tile<Use, m, n, k>::rows, cols = __emu_tile<Use, m, n, k>::cols, num_elements = rows * cols / 32 };
  typedef T element_type;
  typedef T storage_element_type;
  T x[num_elements];
};

// CUDA's requirements on the memory operand: a 256-bit aligned pointer, ldm a multiple of 16 bytes.
template <class T>
__EMU_AI void __emu_wmma_check(const T* p, unsigned ldm, const char* what, const char* f, int l) {
  if ((uintptr_t)p % 32 || (ldm * sizeof(T)) % 16) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "%s: %s (pointer %p, ldm %u): the pointer must be 32-byte (256-bit) aligned and ldm a multiple of "
             "16 bytes (%u elements)", what, (uintptr_t)p % 32 ? "misaligned address" : "bad leading dimension",
             (const void*)p, ldm, (unsigned)(16 / sizeof(T)));
    emu_rt_trap(__emu_w, msg, f, l);
  }
}

template <class Use, int m, int n, int k, class T, class Layout, class V>
__EMU_AI void fill_fragment(fragment<Use, m, n, k, T, Layout>& a, const V& v) {
  for (int e = 0; e < fragment<Use, m, n, k, T, Layout>::num_elements; e++) a.x[e] = T(v);
}

template <class Use, int m, int n, int k, class T, class Layout>
__EMU_AI void load_matrix_sync(fragment<Use, m, n, k, T, Layout>& a, const T* p, unsigned ldm,
                                const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  static_assert(!std::is_same<Layout, void>::value,
                "wmma::load_matrix_sync of an accumulator takes the memory layout: (frag, ptr, ldm, mem_row_major)");
  typedef fragment<Use, m, n, k, T, Layout> F;
  __emu_wmma_check(p, ldm, "wmma::load_matrix_sync", f, l);
  unsigned lane = __emu_w->tid_linear % 32;
  for (int e = 0; e < F::num_elements; e++) {
    unsigned f = 32u * e + lane, r = f / F::cols, c = f % F::cols;
    a.x[e] = std::is_same<Layout, row_major>::value ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
  }
}
template <int m, int n, int k, class T>
__EMU_AI void load_matrix_sync(fragment<accumulator, m, n, k, T>& a, const T* p, unsigned ldm, layout_t layout,
                                const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  typedef fragment<accumulator, m, n, k, T> F;
  __emu_wmma_check(p, ldm, "wmma::load_matrix_sync", f, l);
  unsigned lane = __emu_w->tid_linear % 32;
  for (int e = 0; e < F::num_elements; e++) {
    unsigned f = 32u * e + lane, r = f / F::cols, c = f % F::cols;
    a.x[e] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
  }
}
template <int m, int n, int k, class T>
__EMU_AI void store_matrix_sync(T* p, const fragment<accumulator, m, n, k, T>& a, unsigned ldm, layout_t layout,
                                 const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  typedef fragment<accumulator, m, n, k, T> F;
  __emu_wmma_check((const T*)p, ldm, "wmma::store_matrix_sync", f, l);
  unsigned lane = __emu_w->tid_linear % 32;
  for (int e = 0; e < F::num_elements; e++) {
    unsigned f = 32u * e + lane, r = f / F::cols, c = f % F::cols;
    (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = a.x[e];
  }
}

struct __emu_wmma_lane {
  EmuCollective fn;
  const void *a, *b, *c;
  void* d;
};
template <int m, int n, int k, class Ta, class La, class Lb, class Tc, class Td>
__EMU_COLLECTIVE void __emu_wmma_all(void* const* lanes, unsigned members) {
  (void)members;
  typedef fragment<matrix_a, m, n, k, Ta, La> FA;
  typedef fragment<matrix_b, m, n, k, Ta, Lb> FB;
  typedef fragment<accumulator, m, n, k, Tc> FC;
  typedef fragment<accumulator, m, n, k, Td> FD;
  float A[m][k], B[k][n], C[m][n];
  for (unsigned l = 0; l < 32; l++) {
    const __emu_wmma_lane* r = (const __emu_wmma_lane*)lanes[l];
    for (int e = 0; e < FA::num_elements; e++) {
      unsigned f = 32u * e + l;
      A[f / k][f % k] = (float)((const FA*)r->a)->x[e];
    }
    for (int e = 0; e < FB::num_elements; e++) {
      unsigned f = 32u * e + l;
      B[f / n][f % n] = (float)((const FB*)r->b)->x[e];
    }
    for (int e = 0; e < FC::num_elements; e++) {
      unsigned f = 32u * e + l;
      C[f / n][f % n] = (float)((const FC*)r->c)->x[e];
    }
  }
  for (unsigned l = 0; l < 32; l++) {
    FD* d = (FD*)((const __emu_wmma_lane*)lanes[l])->d;
    for (int e = 0; e < FD::num_elements; e++) {
      unsigned f = 32u * e + l, i = f / n, j = f % n;
      float acc = C[i][j];
      for (int kk = 0; kk < k; kk++) acc = fmaf(A[i][kk], B[kk][j], acc);
      d->x[e] = Td(acc);
    }
  }
}
template <int m, int n, int k, class Ta, class La, class Lb, class Tc, class Td>
__EMU_AI void mma_sync(fragment<accumulator, m, n, k, Td>& d, const fragment<matrix_a, m, n, k, Ta, La>& a,
                       const fragment<matrix_b, m, n, k, Ta, Lb>& b, const fragment<accumulator, m, n, k, Tc>& c,
                       bool satf = false, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  (void)satf;
  __emu_need_full_warp("wmma::mma_sync", f, l);
  __emu_wmma_lane rec{__emu_wmma_all<m, n, k, Ta, La, Lb, Tc, Td>, &a, &b, &c, &d};
  emu_rt_warp(__emu_w, EMU_W_WMMA_MMA, 0xffffffffu, (unsigned long long)(uintptr_t)&rec, 0, 32, f, l);
}
}  // namespace wmma
}  // namespace nvcuda
