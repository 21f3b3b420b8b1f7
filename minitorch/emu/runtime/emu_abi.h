// The binary interface shared by the emulator runtime (runtime.cpp, compiled once) and every
// compiled kernel module (prelude.h is force-included into the learner's source).
// Python mirrors EmuLaunch / EmuResult / EmuFinding with ctypes in launch.py: keep them in sync.
#pragma once
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// What kernel code reads through threadIdx, blockIdx, ...: one per worker thread, updated by the
// scheduler at each switch, so reading threadIdx is a load, not a call.
struct EmuCtx {
  uint3 threadIdx;
  uint3 blockIdx;
  dim3 blockDim;
  dim3 gridDim;
  char* dyn_smem;         // this block's dynamic shared memory (extern __shared__)
  unsigned int tid_linear;
  unsigned int nthreads;
  void* worker;           // runtime-private
  // Kernels split at their barriers (compiler.py: each CUDA thread a C++ coroutine): the frames'
  // bump allocator for the block, and where the thread that just suspended waits.
  char* co_next;
  char* co_end;
  const char* co_file;
  int co_line;
};

typedef void (*EmuRun1)(void** args);
typedef void (*EmuPlain)(void** args, EmuCtx* ctx, const unsigned int* order);
typedef void* (*EmuBind)(EmuCtx* ctx);

enum {
  EMU_OK = 0,
  EMU_ERR_SIGNAL = 1,      // SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT inside a kernel
  EMU_ERR_ASSERT = 2,
  EMU_ERR_TRAP = 3,
  EMU_ERR_BARRIER = 4,     // divergent barrier / deadlock
  EMU_ERR_STACK = 5,       // fiber stack overflow
  EMU_ERR_DYNSMEM = 6,     // out of bounds of dynamic shared memory
  EMU_ERR_OOB = 7,         // check mode: exact out-of-bounds on a global buffer
  EMU_ERR_WARP = 8,        // misuse of a warp primitive
  EMU_ERR_INTERNAL = 9,
  EMU_ERR_SHARED_OOB = 10,  // check mode: outside every static __shared__ variable
  EMU_ERR_STOP = 11,        // interrupted (extra 1: SIGINT) or timed out (extra 2)
  EMU_ERR_MISALIGNED = 12,  // an access not aligned to its type's alignment (extra: the alignment; msg: the type)
};

enum { EMU_F_RAW = 1, EMU_F_WAR = 2, EMU_F_WAW = 3, EMU_F_UNINIT = 4,
       EMU_F_ASYNC = 5 };  // EMU_F_ASYNC: an access to shared memory that a cp.async may still be writing

struct EmuFinding {
  int kind;
  int space;              // 0: static __shared__ (offset from the TLS anchor), 1: dynamic shared, 2: device
  long long offset;
  unsigned int t1[3], t2[3], block[3];
  unsigned long long pc1, pc2;   // pc1: earlier access, pc2: the access that found the problem
  int vol;                       // one of the accesses was volatile
  int same_warp;
  // device memory (space 2): offset is from the start of the launch's array number 'buf'; the two
  // threads may be in different blocks (block1: the earlier access's block)
  int buf;
  unsigned int block1[3];
  int flags;                     // EMU_FF_*
};

// same value written; the earlier access is an atomic; __threadfence() ran; the later access is an atomic
enum { EMU_FF_BENIGN = 1, EMU_FF_ATOMIC = 2, EMU_FF_FENCE = 4, EMU_FF_ATOMIC_LATER = 8 };

#define EMU_MAX_FINDINGS 32

struct EmuResult {
  int kind;
  int sig;
  int si_code;
  unsigned long long addr;
  unsigned long long pc;
  unsigned int thread[3], block[3];
  int line;
  long long offset;              // EMU_ERR_DYNSMEM / EMU_ERR_OOB: byte offset; OOB: buffer index in 'extra'
  int extra;
  int is_write;
  char file[256];
  char msg[2048];
  // warnings
  int warn_early_return;
  unsigned int warn_thread[3], warn_block[3];
  int warn_line;
  char warn_file[256];
  // printf output (malloc'ed by the runtime; freed by emu_free_text)
  char* out_text;
  long long out_len;
  // check mode
  int n_findings;
  long long n_findings_total;
  EmuFinding findings[EMU_MAX_FINDINGS];
};

struct EmuLaunch {
  EmuRun1 run1;
  EmuPlain plain;
  EmuBind bind;
  void** args;
  unsigned int grid[3], block[3];
  unsigned long long shared_mem;
  int use_fibers;
  int schedule;                  // 0 forward, 1 reverse, 2 random
  unsigned long long seed;
  int workers;
  int check;
  int stack_kb;
  int n_static;                  // static __shared__ variables: (offset from TLS anchor, size)
  const long long* static_off;
  const long long* static_size;
  long long tls_lo_rel, tls_hi_rel;   // the module's TLS block, relative to the anchor (check mode)
  long long pad_lo_end_rel, pad_hi_start_rel;  // red zones around the static __shared__ variables
  long long timeout_ms;                        // 0: no watchdog
  int n_bufs;                    // device buffers of this launch (check mode OOB): data, nbytes, map lo/hi
  const unsigned long long* buf_data;
  const unsigned long long* buf_nbytes;
  const unsigned long long* buf_lo;
  const unsigned long long* buf_hi;
  EmuResult* result;
};

enum {
  EMU_W_SYNCWARP = 0, EMU_W_SHFL = 1, EMU_W_SHFL_UP = 2, EMU_W_SHFL_DOWN = 3, EMU_W_SHFL_XOR = 4,
  EMU_W_BALLOT = 5, EMU_W_ANY = 6, EMU_W_ALL = 7, EMU_W_MATCH_ANY = 8, EMU_W_MATCH_ALL = 9,
  // Collectives (emu_ptx.h, mma.h): each lane's value is a pointer to its record, whose first member
  // is an EmuCollective; the last lane to arrive calls it once with every lane's record.
  EMU_W_COLLECTIVE = 16, EMU_W_MMA = 16, EMU_W_LDMATRIX = 17, EMU_W_WMMA_MMA = 18,
};
typedef void (*EmuCollective)(void* const* lanes, unsigned int members);

#ifdef __cplusplus
extern "C" {
#endif
// Called by kernel code (declared here, defined in runtime.cpp, resolved when the module is loaded).
int emu_rt_barrier(EmuCtx* c, int kind, int pred, const char* file, int line);
unsigned long long emu_rt_warp(EmuCtx* c, int op, unsigned int mask, unsigned long long val, int arg,
                               int width, const char* file, int line);
unsigned int emu_rt_activemask(EmuCtx* c);
int emu_rt_vprintf(EmuCtx* c, const char* fmt, va_list ap);
__attribute__((noreturn)) void emu_rt_assert_fail(EmuCtx* c, const char* expr, const char* file,
                                                  unsigned int line, const char* func);
__attribute__((noreturn)) void emu_rt_trap(EmuCtx* c, const char* what, const char* file, int line);
// Shared-window (32-bit) addresses and cp.async (runtime/emu_async_rt.h).
unsigned int emu_rt_cvta_shared(EmuCtx* c, const void* p, const char* file, int line);
void* emu_rt_shared_ptr(EmuCtx* c, unsigned int addr, unsigned int n, unsigned int align, const char* what,
                        const char* file, int line);
void emu_rt_cp_async(EmuCtx* c, unsigned int dst, const void* data, unsigned int n, const char* file, int line);
void emu_rt_cp_async_commit(EmuCtx* c);
void emu_rt_cp_async_wait(EmuCtx* c, int keep, const char* file, int line);
// Kernels split at their barriers: start(data) makes the current thread's coroutine and runs it to its
// first barrier (or its end), returning its handle's address; the runtime resumes the threads as the
// fibers would run them. emu_rt_split_alloc: a frame that does not fit in the block's arena.
void emu_rt_split_block(EmuCtx* c, void* (*start)(void* data), void* data);
void* emu_rt_split_alloc(EmuCtx* c, size_t n);
#ifdef __cplusplus
}
#endif
