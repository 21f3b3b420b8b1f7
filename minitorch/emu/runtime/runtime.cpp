// The emulator runtime: block scheduler with one stackful fiber per CUDA thread, barriers and warp
// primitives, fault recovery, guarded device buffers, printf capture and the check-mode shadow
// (the __tsan_* hooks that kernels compiled with -fsanitize=thread call; libtsan is never linked).
// Compiled once per content hash by compiler.py and loaded with RTLD_GLOBAL so that modules resolve
// the emu_rt_* and __tsan_* symbols against it.
#include "emu_abi.h"

#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#if defined(__cpp_impl_coroutine)
#include <coroutine>
#endif

#define EXPORT extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------------------------------------
// Context switch. A hand-written switch saves only the callee-saved registers (~40 ns less than
// swapcontext, which makes a signal-mask syscall each time). ucontext is the portable fallback.
// ---------------------------------------------------------------------------------------------
struct Worker;
extern "C" void emu_fiber_main(Worker* w, long idx);

#if defined(__x86_64__) && !defined(EMU_FORCE_UCONTEXT)
#define EMU_ASM_SWITCH 1
extern "C" void emu_switch(void** save_sp, void* new_sp);
extern "C" void emu_fiber_trampoline();
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
.hidden emu_switch
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch,.-emu_switch
.globl emu_fiber_trampoline
.type emu_fiber_trampoline,@function
.hidden emu_fiber_trampoline
emu_fiber_trampoline:
  movq %r12, %rdi
  movq %r13, %rsi
  call emu_fiber_main@PLT
  ud2
.size emu_fiber_trampoline,.-emu_fiber_trampoline
)");
static void* init_stack(void* top, Worker* w, long idx) {
  // top is 16-byte aligned; after 6 pops and ret, rsp == top, so the trampoline's call sees an
  // ABI-aligned stack.
  void** sp = (void**)top;
  *--sp = (void*)&emu_fiber_trampoline;
  *--sp = nullptr;          // rbp
  *--sp = nullptr;          // rbx
  *--sp = (void*)w;         // r12
  *--sp = (void*)idx;       // r13
  *--sp = nullptr;          // r14
  *--sp = nullptr;          // r15
  return sp;
}
#elif defined(__aarch64__) && !defined(EMU_FORCE_UCONTEXT)
#define EMU_ASM_SWITCH 1
extern "C" void emu_switch(void** save_sp, void* new_sp);
extern "C" void emu_fiber_trampoline();
asm(R"(
.text
.globl emu_switch
.type emu_switch,%function
.hidden emu_switch
emu_switch:
  sub sp, sp, #176
  stp x19, x20, [sp, #0]
  stp x21, x22, [sp, #16]
  stp x23, x24, [sp, #32]
  stp x25, x26, [sp, #48]
  stp x27, x28, [sp, #64]
  stp x29, x30, [sp, #80]
  stp d8, d9, [sp, #96]
  stp d10, d11, [sp, #112]
  stp d12, d13, [sp, #128]
  stp d14, d15, [sp, #144]
  mov x2, sp
  str x2, [x0]
  mov sp, x1
  ldp x19, x20, [sp, #0]
  ldp x21, x22, [sp, #16]
  ldp x23, x24, [sp, #32]
  ldp x25, x26, [sp, #48]
  ldp x27, x28, [sp, #64]
  ldp x29, x30, [sp, #80]
  ldp d8, d9, [sp, #96]
  ldp d10, d11, [sp, #112]
  ldp d12, d13, [sp, #128]
  ldp d14, d15, [sp, #144]
  add sp, sp, #176
  ret
.size emu_switch,.-emu_switch
.globl emu_fiber_trampoline
.type emu_fiber_trampoline,%function
.hidden emu_fiber_trampoline
emu_fiber_trampoline:
  mov x0, x19
  mov x1, x20
  bl emu_fiber_main
  brk #0
.size emu_fiber_trampoline,.-emu_fiber_trampoline
)");
static void* init_stack(void* top, Worker* w, long idx) {
  uint64_t* sp = (uint64_t*)((char*)top - 176);
  memset(sp, 0, 176);
  sp[0] = (uint64_t)w;                              // x19
  sp[1] = (uint64_t)idx;                            // x20
  sp[11] = (uint64_t)(void*)&emu_fiber_trampoline;  // x30
  return sp;
}
#else
#define EMU_ASM_SWITCH 0
#endif

// ---------------------------------------------------------------------------------------------
// Workers and fibers
// ---------------------------------------------------------------------------------------------
enum : uint8_t { F_RUN = 0, F_BAR = 1, F_WARP = 2, F_DONE = 3 };

struct Fiber {
  void* sp;
  uint3 tid;
  uint8_t state;
  int bar_line;
  const char* bar_file;
  unsigned nbar;
  int pred;
  int result;
  // warp primitive in progress
  int wop;
  unsigned wmask;
  unsigned long long wval;
  int warg, wwidth, wline;
  const char* wfile;
  unsigned long long wout;
#if !EMU_ASM_SWITCH
  ucontext_t uc;
#endif
};

struct WGroup {
  unsigned mask, arrived;
  int op;
};

struct Warp {
  unsigned alive;
  int ngroups;
  WGroup g[8];
  uint16_t wsync;
};

// Check-mode shadow: one entry per SG bytes of shared memory. Two, not four: threads that write
// neighbouring __half / __nv_bfloat16 elements of a shared tile must not look like they race.
static const uintptr_t SG = 2;
struct Acc {
  uint32_t epoch;   // 0: none
  uint16_t tid;
  uint16_t wsync;
  uint8_t vol;
  uint8_t atomic;  // an atomic operation: it races with plain accesses, never with other atomics
  uintptr_t pc;
};
struct Shadow {
  uint8_t ignore, init;
  uint8_t pending;  // a cp.async of thread w.tid is writing it until that thread's cp.async.wait_group
  Acc w, r1, r2;
};

// Check-mode shadow of device memory: one entry per 4 bytes of each array a launch touches (an
// anonymous mapping per array, so only the pages of touched addresses cost memory), reset per launch.
// Threads are named by (block, thread); accesses of one block are ordered by its barriers (epoch)
// and warp primitives (wsync); accesses of different blocks never are.
struct GAcc {
  uint32_t epoch;   // 0: none
  uint32_t block;   // linear block index
  uint16_t bits;    // bits 0-9: linear thread index, bit 10: atomic, bits 11-14: the bytes of the word
  uint16_t wsync;
  int32_t pc;       // relative to the kernel's entry (run1)
};
struct GShadow {
  GAcc w, r;        // the last write (or atomic), a read not ordered before the later ones
};
struct GPending {   // a write that races with another write: benign if it stores the value already there
  int on;
  uintptr_t addr;
  size_t n;
  unsigned char old[16];
  EmuFinding f;
};

struct Worker {
  EmuCtx ctx;
  const EmuLaunch* L;
  EmuResult* R;
  // fibers
  std::vector<Fiber> fibers;
  char* stacks = nullptr;
  size_t stack_stride = 0, stack_usable = 0, nstacks = 0;
  char* big_stack = nullptr;      // plain mode: one fiber runs the whole block
  size_t big_size = 0;
  Fiber big;
  void* sched_sp = nullptr;
  void* dummy_sp = nullptr;
#if !EMU_ASM_SWITCH
  ucontext_t sched_uc, dummy_uc;
#endif
  unsigned nthreads = 0;
  unsigned live = 0, arrived = 0;
  int bar_line = 0;
  const char* bar_file = nullptr;
  unsigned bar_n = 0, bar_first = 0;
  std::vector<unsigned> ord, pos;
  std::vector<Warp> warps;
  bool fibers_mode = false;
  volatile int in_kernel = 0;
  volatile int in_runtime = 0;     // inside an emu_rt_* call: a stop request waits until it returns
  pthread_t thread;
  bool failed = false;
  // dynamic shared memory arena: the block's region ends flush against a guard page
  char* arena = nullptr;
  size_t arena_size = 0;
  char* dyn_lo = nullptr;
  size_t dyn_size = 0;
  // signal alt stack
  char* altstack = nullptr;
  // static shared (TLS) block of the module for this thread
  char* tls_anchor = nullptr;
  // printf
  std::string out;
  // warnings
  int warn_early_return = 0;
  unsigned warn_thread[3], warn_block[3];
  int warn_line = 0;
  const char* warn_file = nullptr;
  // check mode
  uint32_t epoch = 1;
  std::vector<Shadow> sh_static, sh_dyn;
  uintptr_t st_lo = 0, st_hi = 0;
  uintptr_t rz_lo = 0, rz_hi = 0;   // static shared red zone: the TLS block +- 256 bytes
  uint64_t rng = 1;
  std::vector<GShadow*> gsh;         // per launch array: shadow of its whole mapping [buf_lo, buf_hi)
  std::vector<size_t> gsh_len;
  std::vector<int> gsh_owner;        // views of one mapping share the first one's shadow
  std::vector<std::pair<GShadow*, size_t>> gsh_spare;  // small shadows kept (zeroed) for the next launches
  int saw_fence = 0;
  GPending pend;
  // kernels split at their barriers (emu_rt_split_block): coroutine frames, one per CUDA thread
  std::vector<void*> co_h;
  std::vector<char*> co_chunks;   // the frames' arena: chunks never move, reused block after block
  std::vector<size_t> co_sizes;
  size_t co_chunk = 0;
  bool co_ready = false;          // fibers[i].tid set for this launch
};

static thread_local Worker* tls_worker = nullptr;
static Worker* g_check_worker = nullptr;   // check mode runs on one worker: hooks avoid TLS lookups
static const size_t PAGE = 4096;

static uint64_t rng_next(uint64_t& s) {
  s ^= s << 13; s ^= s >> 7; s ^= s << 17;
  return s;
}

static void* map_or_die(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) { perror("minitorch.emu: mmap"); abort(); }
  return p;
}

static void ensure_stacks(Worker* w, unsigned n, size_t usable) {
  if (w->stacks && w->nstacks >= n && w->stack_usable == usable) return;
  if (w->stacks) munmap(w->stacks, w->stack_stride * w->nstacks);
  // Each stack: [guard page][usable + 4 KB for the per-stack cache offset]
  w->stack_usable = usable;
  w->stack_stride = PAGE + usable + PAGE;
  w->nstacks = n < 32 ? 32 : n;
  w->stacks = (char*)map_or_die(w->stack_stride * w->nstacks);
  for (size_t i = 0; i < w->nstacks; i++) mprotect(w->stacks + i * w->stack_stride, PAGE, PROT_NONE);
}

static void* stack_top(Worker* w, unsigned i) {
  // Offset each stack top by a different multiple of 64 bytes so the hot frames of consecutive
  // fibers do not all map to the same cache sets.
  char* top = w->stacks + (size_t)i * w->stack_stride + w->stack_stride - ((i * 64u) % PAGE) - 64;
  return (void*)((uintptr_t)top & ~(uintptr_t)15);
}

static Worker* new_worker() {
  Worker* w = new Worker();
  w->ctx.worker = w;
  w->altstack = (char*)map_or_die(1 << 16);
  w->big_size = 4u << 20;
  w->big_stack = (char*)map_or_die(w->big_size + PAGE);
  mprotect(w->big_stack, PAGE, PROT_NONE);
  return w;
}

static std::vector<Worker*> g_workers;
static std::mutex g_mu;

// ---------------------------------------------------------------------------------------------
// Errors: fill the result and jump back to the scheduler context of this worker.
// ---------------------------------------------------------------------------------------------
static void cur_ids(Worker* w, unsigned t[3], unsigned b[3]) {
  t[0] = w->ctx.threadIdx.x; t[1] = w->ctx.threadIdx.y; t[2] = w->ctx.threadIdx.z;
  b[0] = w->ctx.blockIdx.x; b[1] = w->ctx.blockIdx.y; b[2] = w->ctx.blockIdx.z;
}

__attribute__((noreturn)) static void to_scheduler(Worker* w) {
  w->in_kernel = 0;
#if EMU_ASM_SWITCH
  emu_switch(&w->dummy_sp, w->sched_sp);
#else
  setcontext(&w->sched_uc);
#endif
  __builtin_unreachable();
}

// The first fault of a launch is the one reported (later ones are usually other threads hitting the
// same bug). No lock: it is also called from signal handlers.
static void record_first_fault(Worker* w, int kind, uintptr_t addr, uintptr_t pc, long long offset, int extra,
                               int is_write, int sig = 0, int si_code = 0) {
  EmuResult* R = w->R;
  if (R->kind != EMU_OK) return;
  R->kind = kind;
  R->sig = sig;
  R->si_code = si_code;
  R->addr = addr;
  R->pc = pc;
  R->offset = offset;
  R->extra = extra;
  R->is_write = is_write;
  cur_ids(w, R->thread, R->block);
}

__attribute__((noreturn)) static void fail(Worker* w, int kind, const char* file, int line, const char* fmt, ...) {
  EmuResult* R = w->R;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (R->kind == EMU_OK) {
      R->kind = kind;
      cur_ids(w, R->thread, R->block);
      R->line = line;
      if (file) snprintf(R->file, sizeof R->file, "%s", file);
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(R->msg, sizeof R->msg, fmt, ap);
      va_end(ap);
    }
  }
  w->failed = true;
  to_scheduler(w);
}

// Ctrl-C (SIGINT) and the watchdog (EMU_STOP_SIG) stop a launch: at once when the thread is in the
// learner's code (an infinite loop never calls the runtime), else when the runtime call returns.
static volatile sig_atomic_t g_stop = 0;  // 1: interrupted, 2: timed out

__attribute__((noreturn)) static void stop_now(Worker* w, uintptr_t pc) {
  record_first_fault(w, EMU_ERR_STOP, 0, pc, 0, g_stop, 0);
  w->failed = true;
  to_scheduler(w);
}

struct InRuntime {  // marks a runtime call made by kernel code
  Worker* w;
  explicit InRuntime(Worker* wk) : w(wk) { w->in_runtime = 1; }
  ~InRuntime() {
    w->in_runtime = 0;
    if (g_stop) stop_now(w, 0);
  }
};

// ---------------------------------------------------------------------------------------------
// Scheduling
// ---------------------------------------------------------------------------------------------
static inline void set_cur(Worker* w, unsigned i) {
  w->ctx.tid_linear = i;
  w->ctx.threadIdx = w->fibers[i].tid;
}

static void switch_fiber(Worker* w, Fiber* from, unsigned to) {
  set_cur(w, to);
  // In the common case (every thread reaches the same barrier) the fibers run in schedule order:
  // start loading the stack top of the one two places after 'to' (its saved registers and the
  // kernel's frame above them: 8 cache lines), cold after the block's other fibers ran, so that it
  // has arrived when its turn comes. A hint only (a stale or finished fiber's address is harmless);
  // ~10% off a 16x16-tiled SGEMM's launch with 2 lines; 8 lines took another 1-3% off the MNIST
  // step's fiber kernels, 16 no more (emu_speed_experiments-*.json, series 8).
  unsigned q = w->pos[to] + 2;
  if (q >= w->nthreads) q -= w->nthreads;
  if (q < w->nthreads) {
    const Fiber& after = w->fibers[w->ord[q]];
    for (int line = 0; line < 8; line++) __builtin_prefetch((const char*)after.sp + 64 * line);
  }
#if EMU_ASM_SWITCH
  emu_switch(from ? &from->sp : &w->dummy_sp, w->fibers[to].sp);
#else
  swapcontext(from ? &from->uc : &w->dummy_uc, &w->fibers[to].uc);
#endif
}

static void describe_waiters(Worker* w, char* buf, size_t n) {
  size_t k = 0;
  int shown = 0;
  for (unsigned i = 0; i < w->nthreads && shown < 6; i++) {
    const Fiber& f = w->fibers[i];
    if (f.state == F_BAR) {
      k += snprintf(buf + k, k < n ? n - k : 0, "%sthread (%u,%u,%u) waits at __syncthreads() line %d",
                    shown ? "; " : "", f.tid.x, f.tid.y, f.tid.z, f.bar_line);
      shown++;
    } else if (f.state == F_WARP) {
      k += snprintf(buf + k, k < n ? n - k : 0, "%sthread (%u,%u,%u) waits at a warp primitive (mask 0x%08x) line %d",
                    shown ? "; " : "", f.tid.x, f.tid.y, f.tid.z, f.wmask, f.wline);
      shown++;
    }
    if (k >= n) break;
  }
}

// Picks the next runnable fiber after the current one in schedule order and switches to it.
// 'save' is where the current fiber's stack pointer goes (nullptr: the current fiber is finished).
static void run_next(Worker* w, bool finished) {
  unsigned cur = w->ctx.tid_linear;
  unsigned n = w->nthreads;
  if (w->live == 0) {
    to_scheduler(w);
  }
  unsigned p = w->pos[cur];
  for (unsigned k = 1; k <= n; k++) {
    unsigned q = p + k;
    if (q >= n) q -= n;
    unsigned i = w->ord[q];
    if (w->fibers[i].state == F_RUN) {
      if (i == cur) return;  // only possible if cur was released meanwhile
      switch_fiber(w, finished ? nullptr : &w->fibers[cur], i);
      return;
    }
  }
  char buf[1024];
  describe_waiters(w, buf, sizeof buf);
  fail(w, EMU_ERR_BARRIER, nullptr, 0,
       "deadlock: no thread of the block can continue (%s). Threads that wait at different barriers or "
       "warp primitives never meet: every thread of the block must reach the same __syncthreads(), and "
       "every lane named in a warp primitive's mask must reach it.", buf);
}

static void release_barrier(Worker* w) {
  int count = 0, all = 1, any = 0;
  for (unsigned i = 0; i < w->nthreads; i++) {
    Fiber& f = w->fibers[i];
    if (f.state == F_BAR) {
      count += f.pred != 0;
      all &= f.pred != 0;
      any |= f.pred != 0;
    }
  }
  for (unsigned i = 0; i < w->nthreads; i++) {
    Fiber& f = w->fibers[i];
    if (f.state == F_BAR) {
      f.state = F_RUN;
      f.result = count;
      f.pred = all | (any << 1);
    }
  }
  w->arrived = 0;
  w->epoch++;
}

// Threads that have exited while the others wait at barrier number bar_n.
static void check_exited_at_release(Worker* w) {
  if (w->live == w->nthreads) return;
  for (unsigned i = 0; i < w->nthreads; i++) {
    const Fiber& f = w->fibers[i];
    if (f.state != F_DONE || f.nbar >= w->bar_n) continue;
    if (f.nbar == 0) {
      if (!w->warn_early_return) {
        w->warn_early_return = 1;
        w->warn_thread[0] = f.tid.x; w->warn_thread[1] = f.tid.y; w->warn_thread[2] = f.tid.z;
        w->warn_block[0] = w->ctx.blockIdx.x; w->warn_block[1] = w->ctx.blockIdx.y; w->warn_block[2] = w->ctx.blockIdx.z;
        w->warn_line = w->bar_line;
        w->warn_file = w->bar_file;
      }
    } else {
      w->ctx.threadIdx = f.tid;
      fail(w, EMU_ERR_BARRIER, w->bar_file, w->bar_line,
           "barrier divergence: thread (%u,%u,%u) exited after %u __syncthreads() while other threads of "
           "the block wait at __syncthreads() line %d (their barrier number %u). Every thread must execute "
           "the same sequence of barriers: keep __syncthreads() out of conditions and loops whose trip count "
           "depends on the thread.",
           f.tid.x, f.tid.y, f.tid.z, f.nbar, w->bar_line, w->bar_n);
    }
  }
}

static void complete_group(Worker* w, unsigned warp, int gi);

static void try_complete_groups(Worker* w, unsigned warp) {
  Warp& W = w->warps[warp];
  for (int g = 0; g < W.ngroups; g++) {
    WGroup& G = W.g[g];
    unsigned need = G.mask & W.alive;
    if ((G.arrived & need) == need && G.arrived) {
      complete_group(w, warp, g);
      g = -1;  // groups were compacted; rescan
    }
  }
}

static void plain_main(Worker* w);

extern "C" void emu_fiber_main(Worker* w, long idx) {
  w->in_runtime = 0;
  if (idx < 0) plain_main(w);
  w->L->run1(w->L->args);
  w->in_runtime = 1;
  // The thread has returned from the kernel.
  unsigned cur = w->ctx.tid_linear;
  Fiber& f = w->fibers[cur];
  f.state = F_DONE;
  w->live--;
  Warp& W = w->warps[cur / 32];
  W.alive &= ~(1u << (cur % 32));
  if (W.ngroups) try_complete_groups(w, cur / 32);
  if (w->arrived && w->arrived == w->live) {
    check_exited_at_release(w);
    release_barrier(w);
  }
  run_next(w, true);
  to_scheduler(w);
}

static void plain_main(Worker* w) {
  w->L->plain(w->L->args, &w->ctx, w->L->schedule ? w->ord.data() : nullptr);
  to_scheduler(w);
}

// Thread cur arrives at the barrier of (file, line): the checks of a divergent barrier, then it waits.
// True when it was the last live thread to arrive (the caller releases the barrier).
static bool arrive_at_barrier(Worker* w, unsigned cur, int pred, const char* file, int line) {
  Fiber& f = w->fibers[cur];
  f.nbar++;
  f.bar_line = line;
  f.bar_file = file;
  f.pred = pred;
  if (w->arrived == 0) {
    w->bar_line = line;
    w->bar_file = file;
    w->bar_n = f.nbar;
    w->bar_first = cur;
  } else if (line != w->bar_line || (file != w->bar_file && strcmp(file, w->bar_file) != 0)) {
    const Fiber& o = w->fibers[w->bar_first];
    fail(w, EMU_ERR_BARRIER, file, line,
         "barrier divergence: thread (%u,%u,%u) waits at __syncthreads() line %d while thread (%u,%u,%u) "
         "waits at __syncthreads() line %d. All threads of a block must reach the same __syncthreads(); "
         "a barrier inside a branch that only some threads take hangs or corrupts data on a GPU.",
         f.tid.x, f.tid.y, f.tid.z, line, o.tid.x, o.tid.y, o.tid.z, w->bar_line);
  } else if (f.nbar != w->bar_n) {
    const Fiber& o = w->fibers[w->bar_first];
    fail(w, EMU_ERR_BARRIER, file, line,
         "barrier divergence: thread (%u,%u,%u) reaches __syncthreads() line %d for the %u-th time while "
         "thread (%u,%u,%u) waits there for the %u-th time: the threads run different numbers of loop "
         "iterations around the barrier.",
         f.tid.x, f.tid.y, f.tid.z, line, f.nbar, o.tid.x, o.tid.y, o.tid.z, w->bar_n);
  }
  f.state = F_BAR;
  w->arrived++;
  return w->arrived == w->live;
}

EXPORT int emu_rt_barrier(EmuCtx* c, int kind, int pred, const char* file, int line) {
  Worker* w = (Worker*)c->worker;
  InRuntime guard(w);
  if (!w->fibers_mode)
    fail(w, EMU_ERR_INTERNAL, file, line,
         "internal: __syncthreads() in a kernel that the emulator ran without fibers");
  unsigned cur = c->tid_linear;
  Fiber& f = w->fibers[cur];
  if (arrive_at_barrier(w, cur, pred, file, line)) {
    check_exited_at_release(w);
    release_barrier(w);
  } else {
    run_next(w, false);
  }
  // resumed after the release
  if (kind == 1) return f.result;
  if (kind == 2) return f.pred & 1;
  if (kind == 3) return (f.pred >> 1) & 1;
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Kernels split at their barriers. compiler.py compiles a kernel whose only synchronisation is
// __syncthreads() in its own body as a C++ coroutine: each barrier a co_await, so a CUDA thread is
// a small heap frame instead of a fiber with its own stack, and moving from one thread to the next
// is a return and a call instead of a context switch. The threads are run exactly as the fibers
// would run them (same order, same barrier bookkeeping and diagnostics: the code above), on the
// plain-mode stack. Check mode always uses the fibers.
// ---------------------------------------------------------------------------------------------
static const size_t CO_CHUNK = 1u << 20;

static void split_new_chunk(Worker* w, size_t n) {
  size_t size = n > CO_CHUNK ? n : CO_CHUNK;
  char* p = (char*)aligned_alloc(64, (size + 63) / 64 * 64);
  if (!p) fail(w, EMU_ERR_INTERNAL, nullptr, 0, "internal: out of memory for the threads' frames");
  w->co_chunks.push_back(p);
  w->co_sizes.push_back(size);
}

// Frees the chunks past the first (a launch with large frames does not keep its memory).
static void split_trim(Worker* w) {
  for (size_t i = 1; i < w->co_chunks.size(); i++) free(w->co_chunks[i]);
  if (w->co_chunks.size() > 1) {
    w->co_chunks.resize(1);
    w->co_sizes.resize(1);
  }
}

EXPORT void* emu_rt_split_alloc(EmuCtx* c, size_t n) {
  Worker* w = (Worker*)c->worker;
  size_t k = w->co_chunk + 1;  // the next chunk that holds n bytes (a frame never straddles two)
  while (k < w->co_chunks.size() && w->co_sizes[k] < n) k++;
  if (k >= w->co_chunks.size()) {
    split_new_chunk(w, n);
    k = w->co_chunks.size() - 1;
  }
  w->co_chunk = k;
  char* p = w->co_chunks[k];
  c->co_next = p + n;
  c->co_end = p + w->co_sizes[k];
  return p;
}

// The runnable thread after cur in schedule order (run_next's choice); fails with its deadlock report.
static unsigned split_next(Worker* w, unsigned cur) {
  unsigned n = w->nthreads, p = w->pos[cur];
  for (unsigned k = 1; k <= n; k++) {
    unsigned q = p + k;
    if (q >= n) q -= n;
    unsigned i = w->ord[q];
    if (w->fibers[i].state == F_RUN) return i;
  }
  char buf[1024];
  describe_waiters(w, buf, sizeof buf);
  fail(w, EMU_ERR_BARRIER, nullptr, 0,
       "deadlock: no thread of the block can continue (%s). Threads that wait at different barriers or "
       "warp primitives never meet: every thread of the block must reach the same __syncthreads(), and "
       "every lane named in a warp primitive's mask must reach it.", buf);
}

EXPORT void emu_rt_split_block(EmuCtx* c, void* (*start)(void* data), void* data) {
  Worker* w = (Worker*)c->worker;
#if defined(__cpp_impl_coroutine)
  unsigned n = w->nthreads;
  if (!w->co_ready) {  // once a launch, as for the fibers
    w->co_ready = true;
    split_trim(w);
    unsigned bx = w->L->block[0], by = w->L->block[1];
    w->fibers.resize(n);
    for (unsigned i = 0; i < n; i++) w->fibers[i].tid = uint3{i % bx, (i / bx) % by, i / (bx * by)};
    w->co_h.resize(n);
  }
  if (w->co_chunks.empty()) split_new_chunk(w, CO_CHUNK);
  w->co_chunk = 0;
  c->co_next = w->co_chunks[0];
  c->co_end = w->co_chunks[0] + w->co_sizes[0];
  for (unsigned i = 0; i < n; i++) {
    w->fibers[i].state = F_RUN;
    w->fibers[i].nbar = 0;
    w->co_h[i] = nullptr;
  }
  w->live = n;
  w->arrived = 0;
  unsigned cur = w->ord[0];
  for (;;) {
    set_cur(w, cur);
    void*& h = w->co_h[cur];
    if (!h) {
      h = start(data);  // runs the thread up to its first barrier
    } else {
      std::coroutine_handle<>::from_address(h).resume();
    }
    if (std::coroutine_handle<>::from_address(h).done()) {
      w->fibers[cur].state = F_DONE;
      w->live--;
      if (w->arrived && w->arrived == w->live) {
        check_exited_at_release(w);
        release_barrier(w);
      }
      if (w->live == 0) break;
    } else if (arrive_at_barrier(w, cur, 0, c->co_file, c->co_line)) {
      check_exited_at_release(w);
      release_barrier(w);
      continue;  // the last thread to arrive goes on first, as with the fibers
    }
    cur = split_next(w, cur);
  }
  for (unsigned i = 0; i < n; i++) std::coroutine_handle<>::from_address(w->co_h[i]).destroy();
#else
  (void)start;
  (void)data;
  fail(w, EMU_ERR_INTERNAL, nullptr, 0, "internal: a split kernel, but the runtime was built without coroutines");
#endif
}

static unsigned long long warp_value(Worker* w, unsigned warp, unsigned lane, unsigned src, unsigned members) {
  if (src >= 32 || !(members & (1u << src))) return w->fibers[warp * 32 + lane].wval;
  return w->fibers[warp * 32 + src].wval;
}

static void complete_group(Worker* w, unsigned warp, int gi) {
  Warp& W = w->warps[warp];
  WGroup G = W.g[gi];
  unsigned members = G.arrived;
  unsigned ballot = 0;
  int op = G.op;
  if (op >= EMU_W_COLLECTIVE) {  // mma.sync, ldmatrix, wmma::mma_sync: one call computes every lane's result
    void* lanes[32] = {};
    for (unsigned l = 0; l < 32; l++)
      if ((members >> l) & 1) lanes[l] = (void*)(uintptr_t)w->fibers[warp * 32 + l].wval;
    (*(EmuCollective*)lanes[__builtin_ctz(members)])(lanes, members);
  }
  for (unsigned l = 0; l < 32; l++)
    if ((members >> l) & 1) ballot |= (w->fibers[warp * 32 + l].wval != 0) << l;
  // match_any: lanes with equal values
  for (unsigned l = 0; l < 32; l++) {
    if (!((members >> l) & 1)) continue;
    Fiber& f = w->fibers[warp * 32 + l];
    unsigned wd = (unsigned)f.wwidth;
    unsigned seg = l & ~(wd - 1);
    unsigned long long out = 0;
    switch (op) {
      case EMU_W_SYNCWARP: out = 0; break;
      case EMU_W_SHFL: out = warp_value(w, warp, l, seg + ((unsigned)f.warg & (wd - 1)), members); break;
      case EMU_W_SHFL_UP: {
        unsigned d = (unsigned)f.warg;
        out = warp_value(w, warp, l, (l - seg) >= d ? l - d : l, members);
        break;
      }
      case EMU_W_SHFL_DOWN: {
        unsigned d = (unsigned)f.warg;
        out = warp_value(w, warp, l, (l - seg) + d < wd ? l + d : l, members);
        break;
      }
      case EMU_W_SHFL_XOR: {
        unsigned s = l ^ (unsigned)f.warg;
        out = warp_value(w, warp, l, s < seg + wd ? s : l, members);
        break;
      }
      case EMU_W_BALLOT: out = ballot; break;
      case EMU_W_ANY: out = ballot != 0; break;
      case EMU_W_ALL: out = ballot == members; break;
      case EMU_W_MATCH_ANY: {
        unsigned m = 0;
        for (unsigned k = 0; k < 32; k++)
          if (((members >> k) & 1) && w->fibers[warp * 32 + k].wval == f.wval) m |= 1u << k;
        out = m;
        break;
      }
      case EMU_W_MATCH_ALL: {
        bool same = true;
        for (unsigned k = 0; k < 32; k++)
          if (((members >> k) & 1) && w->fibers[warp * 32 + k].wval != f.wval) same = false;
        out = same ? members : 0;
        break;
      }
    }
    f.wout = out;
    f.state = F_RUN;
  }
  W.wsync++;
  W.g[gi] = W.g[W.ngroups - 1];
  W.ngroups--;
}

static const char* warp_op_name(int op) {
  switch (op) {
    case EMU_W_SYNCWARP: return "__syncwarp";
    case EMU_W_SHFL: return "__shfl_sync";
    case EMU_W_SHFL_UP: return "__shfl_up_sync";
    case EMU_W_SHFL_DOWN: return "__shfl_down_sync";
    case EMU_W_SHFL_XOR: return "__shfl_xor_sync";
    case EMU_W_BALLOT: return "__ballot_sync";
    case EMU_W_ANY: return "__any_sync";
    case EMU_W_ALL: return "__all_sync";
    case EMU_W_MATCH_ANY: return "__match_any_sync";
    case EMU_W_MMA: return "mma.sync";
    case EMU_W_LDMATRIX: return "ldmatrix";
    case EMU_W_WMMA_MMA: return "wmma::mma_sync";
    default: return "__match_all_sync";
  }
}

EXPORT unsigned long long emu_rt_warp(EmuCtx* c, int op, unsigned mask, unsigned long long val, int arg,
                                      int width, const char* file, int line) {
  Worker* w = (Worker*)c->worker;
  InRuntime guard(w);
  if (!w->fibers_mode)
    fail(w, EMU_ERR_INTERNAL, file, line, "internal: warp primitive in a kernel run without fibers");
  unsigned cur = c->tid_linear;
  unsigned warp = cur / 32, lane = cur % 32;
  if (width <= 0 || width > 32 || (width & (width - 1)))
    fail(w, EMU_ERR_WARP, file, line, "%s: width %d is not a power of two between 1 and 32",
         warp_op_name(op), width);
  if (!(mask & (1u << lane)))
    fail(w, EMU_ERR_WARP, file, line,
         "%s with mask 0x%08x called by lane %u, which is not in the mask: every calling thread must "
         "have its own bit set in the mask", warp_op_name(op), mask, lane);
  Fiber& f = w->fibers[cur];
  f.wop = op; f.wmask = mask; f.wval = val; f.warg = arg; f.wwidth = width; f.wline = line; f.wfile = file;
  Warp& W = w->warps[warp];
  int gi = -1;
  for (int g = 0; g < W.ngroups; g++)
    if (W.g[g].mask == mask) { gi = g; break; }
  if (gi < 0) {
    for (int g = 0; g < W.ngroups; g++)
      if (W.g[g].mask & mask)
        fail(w, EMU_ERR_WARP, file, line,
             "%s with mask 0x%08x overlaps another warp primitive in progress with mask 0x%08x: lanes of "
             "one warp disagree about which lanes take part", warp_op_name(op), mask, W.g[g].mask);
    if (W.ngroups == 8) fail(w, EMU_ERR_WARP, file, line, "too many concurrent warp groups");
    gi = W.ngroups++;
    W.g[gi].mask = mask;
    W.g[gi].arrived = 0;
    W.g[gi].op = op;
  } else if (W.g[gi].op != op) {
    fail(w, EMU_ERR_WARP, file, line,
         "warp divergence: lane %u calls %s (line %d) while other lanes of mask 0x%08x are in %s",
         lane, warp_op_name(op), line, mask, warp_op_name(W.g[gi].op));
  }
  W.g[gi].arrived |= 1u << lane;
  f.state = F_WARP;
  unsigned need = mask & W.alive;
  if ((W.g[gi].arrived & need) == need) {
    complete_group(w, warp, gi);
  } else {
    run_next(w, false);
  }
  return f.wout;
}

EXPORT unsigned emu_rt_activemask(EmuCtx* c) {
  Worker* w = (Worker*)c->worker;
  if (!w->fibers_mode) return 1u << (c->tid_linear % 32);
  return w->warps[c->tid_linear / 32].alive;
}

EXPORT int emu_rt_vprintf(EmuCtx* c, const char* fmt, va_list ap) {
  Worker* w = c ? (Worker*)c->worker : tls_worker;
  char buf[512];
  va_list ap2;
  va_copy(ap2, ap);
  if (!w) {
    int n = vfprintf(stdout, fmt, ap);
    va_end(ap2);
    return n;
  }
  InRuntime guard(w);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  if (w->out.size() > (8u << 20)) { va_end(ap2); return n; }  // like CUDA's printf FIFO: drop when full
  if (n >= 0 && (size_t)n < sizeof buf) {
    w->out.append(buf, n);
  } else if (n > 0) {
    std::string s((size_t)n + 1, '\0');
    vsnprintf(&s[0], s.size(), fmt, ap2);
    w->out.append(s.data(), n);
  }
  va_end(ap2);
  return n;
}

EXPORT void emu_rt_assert_fail(EmuCtx* c, const char* expr, const char* file, unsigned line, const char* func) {
  Worker* w = c ? (Worker*)c->worker : tls_worker;
  if (!w) { fprintf(stderr, "%s:%u: %s: Assertion `%s' failed.\n", file, line, func, expr); abort(); }
  fail(w, EMU_ERR_ASSERT, file, (int)line, "assertion `%s` failed in %s", expr, func);
}

EXPORT void emu_rt_trap(EmuCtx* c, const char* what, const char* file, int line) {
  Worker* w = c ? (Worker*)c->worker : tls_worker;
  if (!w) abort();
  fail(w, EMU_ERR_TRAP, file, line, "%s", what);
}

// ---------------------------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------------------------
static const int SIGS[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP};
static const int NSIG_H = sizeof SIGS / sizeof SIGS[0];
static struct sigaction g_old[NSIG_H];

static void on_signal(int sig, siginfo_t* si, void* ucv) {
  Worker* w = tls_worker;
  if (!w || !w->in_kernel) {
    // Not ours: put the previous handler back and let the instruction fault again.
    for (int i = 0; i < NSIG_H; i++)
      if (SIGS[i] == sig) sigaction(sig, &g_old[i], nullptr);
    if (sig == SIGABRT) raise(sig);
    return;
  }
  uintptr_t addr = (uintptr_t)si->si_addr;
  uintptr_t pc = 0;
  ucontext_t* uc = (ucontext_t*)ucv;
  int is_write = -1;
#if defined(__x86_64__)
  pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
  is_write = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#elif defined(__aarch64__)
  pc = (uintptr_t)uc->uc_mcontext.pc;
#else
  (void)uc;
#endif
  int kind = EMU_ERR_SIGNAL;
  long long off = 0;
  if (sig == SIGSEGV || sig == SIGBUS) {
    if (w->stacks && addr >= (uintptr_t)w->stacks && addr < (uintptr_t)w->stacks + w->stack_stride * w->nstacks) {
      size_t within = (addr - (uintptr_t)w->stacks) % w->stack_stride;
      if (within < PAGE) kind = EMU_ERR_STACK;
    } else if (addr >= (uintptr_t)w->big_stack && addr < (uintptr_t)w->big_stack + PAGE) {
      kind = EMU_ERR_STACK;
    } else if (w->arena && addr >= (uintptr_t)w->arena && addr < (uintptr_t)w->arena + w->arena_size + PAGE) {
      kind = EMU_ERR_DYNSMEM;
      off = (long long)(addr - (uintptr_t)w->dyn_lo);
    }
  }
  record_first_fault(w, kind, addr, pc, off, 0, is_write, sig, si->si_code);
  w->failed = true;
  to_scheduler(w);
}

static int stop_sig() { return SIGRTMIN + 4; }
static struct sigaction g_old_int, g_old_stop;

// The launched module's code [lo, hi), and whether a watchdog re-sends the stop signal every 50 ms.
static volatile uintptr_t g_code_lo = 0, g_code_hi = 0;
static volatile int g_resend = 0;

// A PLT stub of the module (the jump to __tls_get_addr, to libm, ...) has no source line either:
// `jmp *GOT(%rip)`, `bnd jmp *GOT(%rip)`, each possibly after an `endbr64`.
static bool in_plt_stub(uintptr_t pc) {
#if defined(__x86_64__)
  const unsigned char* p = (const unsigned char*)pc;
  if (p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa) p += 4;
  if (p[0] == 0xf2) p += 1;
  return p[0] == 0xff && p[1] == 0x25;
#else
  (void)pc;
  return false;
#endif
}

static void on_stop(int sig, siginfo_t*, void* ucv) {
  if (!g_stop) g_stop = sig == SIGINT ? 1 : 2;
  Worker* w = tls_worker;
  if (!w || !w->in_kernel || w->in_runtime) return;  // handled when the runtime call returns
  uintptr_t pc = 0;
#if defined(__x86_64__)
  pc = (uintptr_t)((ucontext_t*)ucv)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  pc = (uintptr_t)((ucontext_t*)ucv)->uc_mcontext.pc;
#else
  (void)ucv;
#endif
  // Caught inside a library the kernel called (the dynamic linker's TLS lookup behind every
  // threadIdx and __shared__ access, libm): the report could not name the learner's line. The
  // watchdog's next signal will most likely land in the kernel's own code.
  if (g_resend && (pc < g_code_lo || pc >= g_code_hi || in_plt_stub(pc))) return;
  stop_now(w, pc);
}

// [lo, hi) of the executable segments of the loaded object that contains addr.
struct CodeRange { uintptr_t addr, lo, hi; };
static int find_code_range(struct dl_phdr_info* info, size_t, void* data) {
  CodeRange* c = (CodeRange*)data;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph.p_vaddr, e = a + ph.p_memsz;
    if (c->addr >= a && c->addr < e) mine = true;
    if (ph.p_flags & PF_X) {
      if (a < lo) lo = a;
      if (e > hi) hi = e;
    }
  }
  if (!mine) return 0;
  c->lo = lo;
  c->hi = hi;
  return 1;
}

static void set_code_range(const void* fn) {
  static std::map<uintptr_t, std::pair<uintptr_t, uintptr_t>> known;  // modules are never unloaded
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = known.find((uintptr_t)fn);
  if (it == known.end()) {
    CodeRange c{(uintptr_t)fn, 0, UINTPTR_MAX};
    dl_iterate_phdr(find_code_range, &c);
    it = known.emplace((uintptr_t)fn, std::make_pair(c.lo, c.hi)).first;
  }
  g_code_lo = it->second.first;
  g_code_hi = it->second.second;
}

static void install_handlers() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NSIG_H; i++) sigaction(SIGS[i], &sa, &g_old[i]);
  sa.sa_sigaction = on_stop;
  sa.sa_flags |= SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(stop_sig(), &sa, &g_old_stop);
}
static void restore_handlers() {
  for (int i = 0; i < NSIG_H; i++) sigaction(SIGS[i], &g_old[i], nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(stop_sig(), &g_old_stop, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Check mode: shared-memory race / uninitialised-read shadow, exact global OOB.
// ---------------------------------------------------------------------------------------------
static uint3 lin2tid(Worker* w, unsigned i) {
  unsigned bx = w->ctx.blockDim.x, by = w->ctx.blockDim.y;
  return uint3{i % bx, (i / bx) % by, i / (bx * by)};
}

static void add_finding(Worker* w, int kind, int space, long long off, const Acc* a, uint16_t tid, uintptr_t pc,
                        int vol) {
  EmuResult* R = w->R;
  R->n_findings_total++;
  for (int i = 0; i < R->n_findings; i++) {
    const EmuFinding& F = R->findings[i];
    if (F.kind == kind && F.pc2 == pc && F.pc1 == (a ? a->pc : 0)) return;
  }
  if (R->n_findings >= EMU_MAX_FINDINGS) return;
  EmuFinding& F = R->findings[R->n_findings++];
  memset(&F, 0, sizeof F);
  F.kind = kind;
  F.space = space;
  F.offset = off;
  uint3 t2 = lin2tid(w, tid);
  F.t2[0] = t2.x; F.t2[1] = t2.y; F.t2[2] = t2.z;
  if (a) {
    uint3 t1 = lin2tid(w, a->tid);
    F.t1[0] = t1.x; F.t1[1] = t1.y; F.t1[2] = t1.z;
    F.same_warp = (a->tid / 32) == (tid / 32);
  }
  F.block[0] = w->ctx.blockIdx.x; F.block[1] = w->ctx.blockIdx.y; F.block[2] = w->ctx.blockIdx.z;
  F.pc1 = a ? a->pc : 0;
  F.pc2 = pc;
  F.vol = vol || (a && a->vol);
}

static inline bool ordered(Worker* w, const Acc& a, uint16_t tid) {
  if (a.epoch != w->epoch || a.tid == tid) return true;
  if (a.tid / 32 == tid / 32 && w->warps[tid / 32].wsync != a.wsync) return true;
  return false;
}

static inline Acc access_by(Worker* w, uint16_t tid, int vol, bool atomic, uintptr_t pc) {
  return Acc{w->epoch, tid, w->warps.empty() ? (uint16_t)0 : w->warps[tid / 32].wsync, (uint8_t)vol, (uint8_t)atomic, pc};
}

static inline void shadow_access(Worker* w, Shadow* s, int space, long long off, bool write, uintptr_t pc, int vol) {
  if (s->ignore) return;
  uint16_t tid = (uint16_t)w->ctx.tid_linear;
  Acc me = access_by(w, tid, vol, false, pc);
  if (s->pending) {
    add_finding(w, EMU_F_ASYNC, space, off, &s->w, tid, pc, vol);
    return;
  }
  if (!write) {
    if (!s->init) add_finding(w, EMU_F_UNINIT, space, off, nullptr, tid, pc, vol);
    if (!ordered(w, s->w, tid)) add_finding(w, EMU_F_RAW, space, off, &s->w, tid, pc, vol);
    if (s->r1.epoch != w->epoch || s->r1.tid == tid) s->r1 = me;
    else if (s->r2.epoch != w->epoch || s->r2.tid == tid) s->r2 = me;
  } else {
    if (!ordered(w, s->w, tid)) add_finding(w, EMU_F_WAW, space, off, &s->w, tid, pc, vol);
    else if (!ordered(w, s->r1, tid)) add_finding(w, EMU_F_WAR, space, off, &s->r1, tid, pc, vol);
    else if (!ordered(w, s->r2, tid)) add_finding(w, EMU_F_WAR, space, off, &s->r2, tid, pc, vol);
    s->w = me;
    s->init = 1;
  }
}

__attribute__((noreturn)) static void oob_fault(Worker* w, int kind, uintptr_t a, long long off, int extra, bool write,
                                                 uintptr_t pc) {
  record_first_fault(w, kind, a, pc, off, extra, write);
  w->failed = true;
  to_scheduler(w);
}

static inline bool in_static_var(Worker* w, uintptr_t a, size_t n) {
  if (a < w->st_lo || a + n > w->st_hi) return false;
  for (uintptr_t x = a & ~(SG - 1); x < a + n; x += SG)
    if (w->sh_static[(x - w->st_lo) / SG].ignore) return false;
  return true;
}

// ---- device memory ------------------------------------------------------------------------
static inline uint32_t cur_block(Worker* w) {
  const EmuCtx& c = w->ctx;
  return c.blockIdx.x + c.gridDim.x * (c.blockIdx.y + c.gridDim.y * c.blockIdx.z);
}

static inline bool g_ordered(Worker* w, const GAcc& a, uint32_t blk, uint16_t tid) {
  if (a.epoch == 0) return true;
  if (a.block != blk) return false;            // threads of different blocks: never ordered in a launch
  if (a.epoch != w->epoch) return true;        // a barrier of the block in between
  unsigned t = a.bits & 1023u;
  if (t == tid) return true;
  return t / 32 == tid / 32 && w->warps[tid / 32].wsync != a.wsync;  // a warp primitive in between
}

static void add_gfinding(Worker* w, int kind, int buf, long long off, const GAcc& a, uint16_t tid, uintptr_t pc,
                         int flags) {
  EmuResult* R = w->R;
  R->n_findings_total++;
  uintptr_t base = (uintptr_t)w->L->run1;
  uintptr_t pc1 = base + a.pc;
  for (int i = 0; i < R->n_findings; i++) {
    const EmuFinding& F = R->findings[i];
    if (F.space == 2 && F.kind == kind && F.pc2 == pc && F.pc1 == pc1 && (F.flags & EMU_FF_BENIGN) == (flags & EMU_FF_BENIGN))
      return;
  }
  if (R->n_findings >= EMU_MAX_FINDINGS) return;
  EmuFinding& F = R->findings[R->n_findings++];
  memset(&F, 0, sizeof F);
  F.kind = kind;
  F.space = 2;
  F.buf = buf;
  F.offset = off;
  uint3 t2 = lin2tid(w, tid), t1 = lin2tid(w, a.bits & 1023u);
  F.t1[0] = t1.x; F.t1[1] = t1.y; F.t1[2] = t1.z;
  F.t2[0] = t2.x; F.t2[1] = t2.y; F.t2[2] = t2.z;
  F.block[0] = w->ctx.blockIdx.x; F.block[1] = w->ctx.blockIdx.y; F.block[2] = w->ctx.blockIdx.z;
  unsigned gx = w->ctx.gridDim.x, gy = w->ctx.gridDim.y;
  F.block1[0] = a.block % gx; F.block1[1] = (a.block / gx) % gy; F.block1[2] = a.block / (gx * gy);
  F.same_warp = a.block == cur_block(w) && (a.bits & 1023u) / 32 == tid / 32;
  F.pc1 = pc1;
  F.pc2 = pc;
  F.flags = flags | ((a.bits >> 10) & 1 ? EMU_FF_ATOMIC : 0);
}

// The value a racing write stored is known only after it ran: compare it at the next hook.
static void resolve_pending(Worker* w) {
  GPending& p = w->pend;
  p.on = 0;
  EmuResult* R = w->R;
  int benign = memcmp((const void*)p.addr, p.old, p.n) == 0;
  R->n_findings_total++;
  for (int i = 0; i < R->n_findings; i++) {
    const EmuFinding& F = R->findings[i];
    if (F.space == 2 && F.kind == p.f.kind && F.pc2 == p.f.pc2 && F.pc1 == p.f.pc1 && (F.flags & EMU_FF_BENIGN) == benign)
      return;
  }
  if (R->n_findings >= EMU_MAX_FINDINGS) return;
  R->findings[R->n_findings] = p.f;
  R->findings[R->n_findings++].flags |= benign ? EMU_FF_BENIGN : 0;
}

static void device_access(Worker* w, int buf, uintptr_t a, size_t n, bool write, bool atomic, uintptr_t pc) {
  const EmuLaunch* L = w->L;
  int own = w->gsh_owner[buf];
  uintptr_t lo = L->buf_lo[own];
  if (!w->gsh[own]) {
    size_t len = (L->buf_hi[own] - lo + 3) / 4 * sizeof(GShadow);
    for (size_t i = 0; i < w->gsh_spare.size(); i++)
      if (w->gsh_spare[i].second >= len) {  // warm in the cache, unlike fresh pages
        w->gsh[own] = w->gsh_spare[i].first;
        w->gsh_len[own] = w->gsh_spare[i].second;
        w->gsh_spare.erase(w->gsh_spare.begin() + i);
        break;
      }
    if (!w->gsh[own]) {
      void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) return;  // no room for a shadow: this array goes unchecked
      w->gsh[own] = (GShadow*)m;
      w->gsh_len[own] = len;
    }
  }
  GShadow* sh = w->gsh[own];
  uint32_t blk = cur_block(w);
  uint16_t tid = (uint16_t)w->ctx.tid_linear;
  uint16_t wsync = w->warps.empty() ? (uint16_t)0 : w->warps[tid / 32].wsync;
  int32_t rel = (int32_t)(pc - (uintptr_t)L->run1);
  uintptr_t data = L->buf_data[buf];
  uintptr_t hi = a + n > L->buf_hi[own] ? L->buf_hi[own] : a + n;
  for (uintptr_t x = a & ~(uintptr_t)3; x < hi; x += 4) {
    unsigned first = x < a ? (unsigned)(a - x) : 0u, end = x + 4 > a + n ? (unsigned)(a + n - x) : 4u;
    unsigned m = ((1u << end) - 1) & ~((1u << first) - 1);  // the bytes of this word the access covers
    GShadow& s = sh[(x - lo) / 4];
    GAcc me{w->epoch, blk, (uint16_t)(tid | (atomic ? 1u << 10 : 0) | (m << 11)), wsync, rel};
    long long off = (long long)(x < a ? a : x) - (long long)data;
    bool wconf = s.w.epoch && ((s.w.bits >> 11) & m) && !g_ordered(w, s.w, blk, tid);
    bool w_atomic = (s.w.bits >> 10) & 1;
    if (atomic) {
      // atomics among themselves are fine; an atomic and another thread's plain write race
      if (wconf && !w_atomic) { add_gfinding(w, EMU_F_WAW, buf, off, s.w, tid, pc, EMU_FF_ATOMIC_LATER); return; }
      // A plain write stays the one later atomics are checked against, even after its own thread's
      // atomics of the same interval: another thread's atomic must still see it.
      bool own = s.w.block == blk && s.w.epoch == w->epoch && (s.w.bits & 1023u) == tid;
      if (w_atomic || !s.w.epoch || (!own && g_ordered(w, s.w, blk, tid))) s.w = me;
    } else if (!write) {
      if (wconf && !w_atomic) { add_gfinding(w, EMU_F_RAW, buf, off, s.w, tid, pc, 0); return; }
      if (!s.r.epoch || g_ordered(w, s.r, blk, tid)) s.r = me;
    } else {
      if (wconf) {
        if (!w_atomic && n <= sizeof w->pend.old && !w->pend.on) {
          // a plain write over another thread's plain write: benign if both store the same value
          GPending& p = w->pend;
          p.on = 1;
          p.addr = a;
          p.n = n;
          memcpy(p.old, (const void*)a, n);
          EmuResult* R = w->R;
          int keep = R->n_findings;
          long long total = R->n_findings_total;
          add_gfinding(w, EMU_F_WAW, buf, off, s.w, tid, pc, 0);
          if (R->n_findings > keep) { p.f = R->findings[keep]; R->n_findings = keep; }
          else p.on = 0;  // already reported (or no room)
          R->n_findings_total = total;
        } else {
          add_gfinding(w, EMU_F_WAW, buf, off, s.w, tid, pc, 0);
        }
        s.w = me;
        return;
      }
      if (s.r.epoch && ((s.r.bits >> 11) & m) && !g_ordered(w, s.r, blk, tid)) {
        add_gfinding(w, EMU_F_WAR, buf, off, s.r, tid, pc, 0);
        s.w = me;
        return;
      }
      s.w = me;
    }
  }
}

static void device_shadow_begin(Worker* w) {
  const EmuLaunch* L = w->L;
  w->gsh.assign(L->n_bufs, nullptr);
  w->gsh_len.assign(L->n_bufs, 0);
  w->gsh_owner.resize(L->n_bufs);
  for (int i = 0; i < L->n_bufs; i++) {
    w->gsh_owner[i] = i;
    for (int j = 0; j < i; j++)
      if (L->buf_lo[j] == L->buf_lo[i] && L->buf_hi[j] == L->buf_hi[i]) { w->gsh_owner[i] = j; break; }
  }
  w->saw_fence = 0;
  w->pend.on = 0;
}

static void device_shadow_end(Worker* w) {
  if (w->pend.on) resolve_pending(w);
  if (w->saw_fence)
    for (int i = 0; i < w->R->n_findings; i++)
      if (w->R->findings[i].space == 2) w->R->findings[i].flags |= EMU_FF_FENCE;
  const size_t SPARE_MAX = 1u << 20, SPARE_KEPT = 16;
  for (size_t i = 0; i < w->gsh.size(); i++) {
    if (!w->gsh[i]) continue;
    if (w->gsh_len[i] <= SPARE_MAX && w->gsh_spare.size() < SPARE_KEPT) {
      memset((void*)w->gsh[i], 0, w->gsh_len[i]);
      w->gsh_spare.emplace_back(w->gsh[i], w->gsh_len[i]);
    } else {
      munmap(w->gsh[i], w->gsh_len[i]);
    }
  }
  w->gsh.clear();
}

__attribute__((noinline)) static void check_slow(Worker* w, uintptr_t a, size_t n, bool write, uintptr_t pc, int vol,
                                                bool atomic) {
  if (w->in_kernel == 0) return;
  if (w->pend.on) resolve_pending(w);
  if (a + n > w->rz_lo && a < w->rz_hi && !in_static_var(w, a, n)) {
    // Heap objects that instrumented code legitimately reads may sit next to the TLS block.
    uintptr_t anchor = (uintptr_t)w->tls_anchor;
    if (a >= anchor && a + n <= anchor + sizeof(void*)) return;  // the prelude's own thread-local
    if (a >= (uintptr_t)&w->ctx && a < (uintptr_t)(&w->ctx + 1)) return;
    const EmuLaunch* L = w->L;
    int na = 0;  // the argument array ends with a null pointer
    while (L->args[na]) {
      if (a >= (uintptr_t)L->args[na] && a < (uintptr_t)L->args[na] + 64) return;
      na++;
    }
    if (a >= (uintptr_t)L->args && a < (uintptr_t)(L->args + na + 1)) return;
    oob_fault(w, EMU_ERR_SHARED_OOB, a, (long long)(a - anchor), 0, write, pc);
  }
  if (a + n > (uintptr_t)w->arena && a < (uintptr_t)w->dyn_lo)
    oob_fault(w, EMU_ERR_DYNSMEM, a, (long long)(a - (uintptr_t)w->dyn_lo), 0, write, pc);
  if (a + n > w->st_lo && a < w->st_hi) {
    uintptr_t lo = a < w->st_lo ? w->st_lo : a, hi = a + n > w->st_hi ? w->st_hi : a + n;
    for (uintptr_t x = lo & ~(SG - 1); x < hi; x += SG)
      shadow_access(w, &w->sh_static[(x - w->st_lo) / SG], 0, (long long)(x - (uintptr_t)w->tls_anchor), write, pc, vol);
    return;
  }
  uintptr_t dlo = (uintptr_t)w->dyn_lo, dhi = dlo + w->dyn_size;
  if (a + n > dlo && a < dhi) {
    uintptr_t lo = a < dlo ? dlo : a, hi = a + n > dhi ? dhi : a + n;
    for (uintptr_t x = lo & ~(SG - 1); x < hi; x += SG)
      shadow_access(w, &w->sh_dyn[(x - dlo) / SG], 1, (long long)(x - dlo), write, pc, vol);
    return;
  }
  const EmuLaunch* L = w->L;
  for (int i = 0; i < L->n_bufs; i++) {
    uintptr_t d = L->buf_data[i], e = d + L->buf_nbytes[i];
    if (a + n > L->buf_lo[i] && a < L->buf_hi[i] && (a < d || a + n > e))
      oob_fault(w, EMU_ERR_OOB, a, (long long)(a - d), i, write, pc);
  }
  for (int i = 0; i < L->n_bufs; i++)
    if (a >= L->buf_data[i] && a + n <= L->buf_data[i] + L->buf_nbytes[i]) {
      device_access(w, i, a, n, write, atomic, pc);
      return;
    }
}

static inline void chk(uintptr_t a, size_t n, bool write, uintptr_t pc, int vol = 0, bool atomic = false) {
  Worker* w = g_check_worker;
  if (__builtin_expect(w == nullptr, 0)) return;
  // Fast paths: inside a device array of the launch (shadowed), or outside every region of interest.
  if (a + n <= w->rz_lo || a >= w->rz_hi) {
    if (a + n <= (uintptr_t)w->arena || a >= (uintptr_t)w->dyn_lo + w->dyn_size) {
      const EmuLaunch* L = w->L;
      bool near = false;
      for (int i = 0; i < L->n_bufs; i++) {
        if (a >= L->buf_data[i] && a + n <= L->buf_data[i] + L->buf_nbytes[i] && w->in_kernel) {
          if (w->pend.on) resolve_pending(w);
          if (!write && !atomic && (a & 3) + n <= 4) {
            // The common read: nothing written there in this launch, and a read of this barrier interval
            // of the block already recorded: nothing to report, nothing to record.
            int own = w->gsh_owner[i];
            const GShadow* sh = w->gsh[own];
            if (sh) {
              const GShadow& s = sh[(a - L->buf_lo[own]) / 4];
              if (s.w.epoch == 0 && s.r.epoch == w->epoch && s.r.block == cur_block(w)) return;
            }
          }
          device_access(w, i, a, n, write, atomic, pc);
          return;
        }
        if (a + n > L->buf_lo[i] && a < L->buf_hi[i]) near = true;  // out of bounds
      }
      if (!near && !w->pend.on) return;
    }
  }
  check_slow(w, a, n, write, pc, vol, atomic);
}

#define RA ((uintptr_t)__builtin_return_address(0))
#define TSAN_RW(N)                                                                              \
  EXPORT void __tsan_read##N(void* a) { chk((uintptr_t)a, N, false, RA); }                     \
  EXPORT void __tsan_write##N(void* a) { chk((uintptr_t)a, N, true, RA); }                     \
  EXPORT void __tsan_unaligned_read##N(void* a) { chk((uintptr_t)a, N, false, RA); }           \
  EXPORT void __tsan_unaligned_write##N(void* a) { chk((uintptr_t)a, N, true, RA); }           \
  EXPORT void __tsan_volatile_read##N(void* a) { chk((uintptr_t)a, N, false, RA, 1); }         \
  EXPORT void __tsan_volatile_write##N(void* a) { chk((uintptr_t)a, N, true, RA, 1); }         \
  EXPORT void __tsan_unaligned_volatile_read##N(void* a) { chk((uintptr_t)a, N, false, RA, 1); } \
  EXPORT void __tsan_unaligned_volatile_write##N(void* a) { chk((uintptr_t)a, N, true, RA, 1); }
TSAN_RW(1)
TSAN_RW(2)
TSAN_RW(4)
TSAN_RW(8)
TSAN_RW(16)
EXPORT void __tsan_read_range(void* a, unsigned long n) { chk((uintptr_t)a, n, false, RA); }
EXPORT void __tsan_write_range(void* a, unsigned long n) { chk((uintptr_t)a, n, true, RA); }
EXPORT void __tsan_init() {}
EXPORT void __tsan_func_entry(void*) {}
EXPORT void __tsan_func_exit() {}
EXPORT void __tsan_vptr_update(void*, void*) {}
EXPORT void __tsan_vptr_read(void*) {}
EXPORT void __tsan_atomic_thread_fence(int) {
  if (g_check_worker) g_check_worker->saw_fence = 1;  // named in device-memory race reports
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
EXPORT void __tsan_atomic_signal_fence(int) {}

// Atomics: do the operation for real (blocks may run on several workers). In shared memory an atomic
// counts as a write that races with another thread's plain access in the same barrier interval (zeroing
// an accumulator, then atomicAdd into it without a barrier between), never with another atomic.
static void shadow_atomic(Worker* w, Shadow* s, int space, long long off, uintptr_t pc) {
  if (s->ignore) return;
  uint16_t tid = (uint16_t)w->ctx.tid_linear;
  Acc me = access_by(w, tid, 0, true, pc);
  if (!s->w.atomic && !ordered(w, s->w, tid)) add_finding(w, EMU_F_WAW, space, off, &s->w, tid, pc, 0);
  else if (!ordered(w, s->r1, tid)) add_finding(w, EMU_F_WAR, space, off, &s->r1, tid, pc, 0);
  else if (!ordered(w, s->r2, tid)) add_finding(w, EMU_F_WAR, space, off, &s->r2, tid, pc, 0);
  // A plain write of this interval stays the one later accesses are checked against, even after its
  // own thread's atomics: another thread's atomic must still see it.
  if (s->w.atomic || s->w.epoch != w->epoch) s->w = me;
  s->init = 1;
}

// Always inlined: RA must be the kernel's address (the line reported), not this function's caller's.
__attribute__((always_inline)) static inline void atomic_touch(void* a, size_t n) {
  Worker* w = g_check_worker;
  if (!w) return;
  uintptr_t x = (uintptr_t)a, pc = RA;
  if (x >= w->st_lo && x < w->st_hi) {
    for (uintptr_t y = x & ~(SG - 1); y < x + n && y < w->st_hi; y += SG)
      shadow_atomic(w, &w->sh_static[(y - w->st_lo) / SG], 0, (long long)(y - (uintptr_t)w->tls_anchor), pc);
  } else if (x >= (uintptr_t)w->dyn_lo && x < (uintptr_t)w->dyn_lo + w->dyn_size) {
    for (uintptr_t y = x & ~(SG - 1); y < x + n && y < (uintptr_t)w->dyn_lo + w->dyn_size; y += SG)
      shadow_atomic(w, &w->sh_dyn[(y - (uintptr_t)w->dyn_lo) / SG], 1, (long long)(y - (uintptr_t)w->dyn_lo), pc);
  } else {
    chk(x, n, true, pc, 0, true);
  }
}

#define TSAN_ATOMIC(N, T)                                                                                \
  EXPORT T __tsan_atomic##N##_load(const volatile T* a, int) { atomic_touch((void*)a, N / 8); return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
  EXPORT void __tsan_atomic##N##_store(volatile T* a, T v, int) { atomic_touch((void*)a, N / 8); __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
  EXPORT T __tsan_atomic##N##_exchange(volatile T* a, T v, int) { atomic_touch((void*)a, N / 8); return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
  EXPORT T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { atomic_touch((void*)a, N / 8); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  EXPORT T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { atomic_touch((void*)a, N / 8); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  EXPORT T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { atomic_touch((void*)a, N / 8); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  EXPORT T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { atomic_touch((void*)a, N / 8); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
  EXPORT T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { atomic_touch((void*)a, N / 8); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  EXPORT T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) { atomic_touch((void*)a, N / 8); return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
  EXPORT int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) { atomic_touch((void*)a, N / 8); return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
  EXPORT int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) { atomic_touch((void*)a, N / 8); return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
  EXPORT T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) { atomic_touch((void*)a, N / 8); __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
TSAN_ATOMIC(8, uint8_t)
TSAN_ATOMIC(16, uint16_t)
TSAN_ATOMIC(32, uint32_t)
TSAN_ATOMIC(64, uint64_t)

// ---------------------------------------------------------------------------------------------
// Misaligned accesses (always on). Modules are compiled with -fsanitize=alignment: before each typed
// load or store the compiler tests the address against the type's alignment (float4: 16 bytes) and
// calls this handler when it fails, where a GPU faults with "misaligned address". libubsan is never
// linked: the runtime (loaded RTLD_GLOBAL) provides the handler, as it provides the __tsan_* hooks.
// ---------------------------------------------------------------------------------------------
struct UbsanLoc { const char* file; uint32_t line, column; };
struct UbsanType { uint16_t kind, info; char name[1]; };
struct UbsanMismatch { UbsanLoc loc; const UbsanType* type; unsigned char log_align, check_kind; };

__attribute__((noinline)) static void misaligned(const UbsanMismatch* d, uintptr_t ptr, uintptr_t pc) {
  Worker* w = tls_worker;
  if (!w || !w->in_kernel) {
    fprintf(stderr, "minitorch.emu: misaligned %s of %s at %p (%s:%u) outside a kernel\n",
            d->check_kind == 1 ? "store" : "load", d->type ? d->type->name : "?", (void*)ptr,
            d->loc.file ? d->loc.file : "?", d->loc.line);
    abort();
  }
  // Check kinds (UBSan's TypeCheckKind): 0 load, 1 store, others a member access or a reference.
  {
    std::lock_guard<std::mutex> lk(g_mu);
    EmuResult* R = w->R;
    if (R->kind == EMU_OK) {
      R->kind = EMU_ERR_MISALIGNED;
      cur_ids(w, R->thread, R->block);
      R->addr = ptr;
      R->pc = pc;
      R->extra = 1 << d->log_align;
      R->is_write = d->check_kind == 1 ? 1 : d->check_kind == 0 ? 0 : -1;
      R->line = (int)d->loc.line;
      if (d->loc.file) snprintf(R->file, sizeof R->file, "%s", d->loc.file);
      snprintf(R->msg, sizeof R->msg, "%s", d->type ? d->type->name : "");
    }
  }
  w->failed = true;
  to_scheduler(w);
}

EXPORT void __ubsan_handle_type_mismatch_v1(const UbsanMismatch* d, uintptr_t ptr) { misaligned(d, ptr, RA); }
EXPORT void __ubsan_handle_type_mismatch_v1_abort(const UbsanMismatch* d, uintptr_t ptr) { misaligned(d, ptr, RA); }
// -fsanitize=unreachable is on only so that every function of a module counts as sanitized for GCC's
// inliner (compiler.without_scalar_alignment_checks): reaching __builtin_unreachable() is a trap.
struct UbsanUnreachable { UbsanLoc loc; };
EXPORT void __ubsan_handle_builtin_unreachable(const UbsanUnreachable* d) {
  Worker* w = tls_worker;
  if (!w || !w->in_kernel) abort();
  fail(w, EMU_ERR_TRAP, d->loc.file, (int)d->loc.line, "__builtin_unreachable() reached");
}

// ---------------------------------------------------------------------------------------------
// Blocks and launches
// ---------------------------------------------------------------------------------------------
static void make_order(Worker* w, unsigned n, int schedule, uint64_t seed) {
  w->ord.resize(n);
  w->pos.resize(n);
  for (unsigned i = 0; i < n; i++) w->ord[i] = schedule == 1 ? n - 1 - i : i;
  if (schedule == 2) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    if (!s) s = 1;
    for (unsigned i = n; i > 1; i--) {
      unsigned j = (unsigned)(rng_next(s) % i);
      unsigned t = w->ord[i - 1]; w->ord[i - 1] = w->ord[j]; w->ord[j] = t;
    }
  }
  for (unsigned i = 0; i < n; i++) w->pos[w->ord[i]] = i;
}

static void fiber_init(Worker* w, Fiber* f, char* lo, size_t size, void* top, long idx) {
#if EMU_ASM_SWITCH
  (void)lo; (void)size;
  f->sp = init_stack(top, w, idx);
#else
  (void)top;
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = lo;
  f->uc.uc_stack.ss_size = size;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, (void (*)())emu_fiber_main, 2, w, idx);
#endif
}

static void from_scheduler(Worker* w, Fiber* f) {
#if EMU_ASM_SWITCH
  emu_switch(&w->sched_sp, f->sp);
#else
  swapcontext(&w->sched_uc, &f->uc);
#endif
}

static const size_t PAD_WINDOW = 1024;  // bytes of each red zone next to the variables that are checked

static void async_begin_block(Worker* w);

static void begin_block_shared(Worker* w) {
  const EmuLaunch* L = w->L;
  async_begin_block(w);
  if (L->pad_lo_end_rel || L->pad_hi_start_rel) {
    memset(w->tls_anchor + L->pad_lo_end_rel - PAD_WINDOW, 0xA5, PAD_WINDOW);
    memset(w->tls_anchor + L->pad_hi_start_rel, 0xA5, PAD_WINDOW);
  }
  // Poison shared memory with 0xFF bytes (a NaN for float and double) at each block start.
  for (int i = 0; i < L->n_static; i++) memset(w->tls_anchor + L->static_off[i], 0xFF, (size_t)L->static_size[i]);
  if (w->dyn_size) memset(w->dyn_lo, 0xFF, w->dyn_size);
  if (L->check) {
    w->epoch = 1;
    for (auto& s : w->sh_static) { s = Shadow(); s.ignore = 1; }
    for (int i = 0; i < L->n_static; i++) {
      uintptr_t a = (uintptr_t)w->tls_anchor + L->static_off[i];
      for (uintptr_t x = a & ~(SG - 1); x < a + L->static_size[i]; x += SG) w->sh_static[(x - w->st_lo) / SG].ignore = 0;
    }
    for (auto& s : w->sh_dyn) s = Shadow();
    for (auto& W : w->warps) W.wsync = 0;
  }
}

static void run_block(Worker* w, unsigned long long b) {
  const EmuLaunch* L = w->L;
  unsigned gx = L->grid[0], gy = L->grid[1];
  w->ctx.blockIdx.x = (unsigned)(b % gx);
  w->ctx.blockIdx.y = (unsigned)((b / gx) % gy);
  w->ctx.blockIdx.z = (unsigned)(b / ((unsigned long long)gx * gy));
  unsigned n = w->nthreads;
  if (L->schedule == 2) make_order(w, n, 2, L->seed * 1000003ull + b);
  begin_block_shared(w);
  unsigned bx = L->block[0], by = L->block[1];
  if (!w->fibers_mode) {
    w->ctx.threadIdx = uint3{0, 0, 0};
    w->ctx.tid_linear = 0;
    void* top = (void*)(((uintptr_t)w->big_stack + PAGE + w->big_size - 64) & ~(uintptr_t)15);
    fiber_init(w, &w->big, w->big_stack + PAGE, w->big_size, top, -1);
    w->in_kernel = 1;
    from_scheduler(w, &w->big);
    w->in_kernel = 0;
    return;
  }
  for (unsigned i = 0; i < n; i++) {
    Fiber& f = w->fibers[i];
    f.state = F_RUN;
    f.nbar = 0;
    fiber_init(w, &f, w->stacks + (size_t)i * w->stack_stride + PAGE, w->stack_stride - PAGE, stack_top(w, i), (long)i);
  }
  for (size_t k = 0; k < w->warps.size(); k++) {
    unsigned lanes = n - (unsigned)k * 32;
    w->warps[k].alive = lanes >= 32 ? 0xFFFFFFFFu : ((1u << lanes) - 1);
    w->warps[k].ngroups = 0;
  }
  w->live = n;
  w->arrived = 0;
  unsigned first = w->ord[0];
  set_cur(w, first);
  w->in_kernel = 1;
  from_scheduler(w, &w->fibers[first]);
  w->in_kernel = 0;
}

// After a block: a damaged red zone means a write past a static __shared__ array.
static void check_pads(Worker* w) {
  const EmuLaunch* L = w->L;
  const unsigned char* lo = (const unsigned char*)w->tls_anchor + L->pad_lo_end_rel - PAD_WINDOW;
  const unsigned char* hi = (const unsigned char*)w->tls_anchor + L->pad_hi_start_rel;
  // After every block: the intact case is one memcmp each (the byte loops below only locate damage).
  static const std::vector<unsigned char> intact(PAD_WINDOW, 0xA5);  // thread-safe initialisation
  if (memcmp(lo, intact.data(), PAD_WINDOW) == 0 && memcmp(hi, intact.data(), PAD_WINDOW) == 0) return;
  long long bad = 0;
  bool found = false;
  for (size_t i = 0; i < PAD_WINDOW; i++)
    if (lo[i] != 0xA5) { bad = L->pad_lo_end_rel - (long long)(PAD_WINDOW - i); found = true; break; }
  if (!found)
    for (size_t i = 0; i < PAD_WINDOW; i++)
      if (hi[i] != 0xA5) { bad = L->pad_hi_start_rel + (long long)i; found = true; break; }
  if (!found) return;
  std::lock_guard<std::mutex> lk(g_mu);
  EmuResult* R = w->R;
  if (R->kind == EMU_OK) {
    R->kind = EMU_ERR_SHARED_OOB;
    R->offset = bad;
    R->extra = 1;
    R->is_write = 1;
    R->block[0] = w->ctx.blockIdx.x; R->block[1] = w->ctx.blockIdx.y; R->block[2] = w->ctx.blockIdx.z;
  }
  w->failed = true;
}

struct Shared {
  std::atomic<unsigned long long> next{0};
  std::atomic<int> abort{0};
  unsigned long long nblocks;
  unsigned long long a_mul, a_add;
};

static unsigned long long gcd_u(unsigned long long a, unsigned long long b) {
  while (b) { unsigned long long t = a % b; a = b; b = t; }
  return a;
}

static void worker_loop(Worker* w, const EmuLaunch* L, Shared* S) {
  w->thread = pthread_self();
  w->in_runtime = 0;
  tls_worker = w;
  stack_t ss, old_ss;
  ss.ss_sp = w->altstack;
  ss.ss_size = 1 << 16;
  ss.ss_flags = 0;
  sigaltstack(&ss, &old_ss);
  w->L = L;
  w->failed = false;
  w->ctx.blockDim = dim3(L->block[0], L->block[1], L->block[2]);
  w->ctx.gridDim = dim3(L->grid[0], L->grid[1], L->grid[2]);
  w->nthreads = L->block[0] * L->block[1] * L->block[2];
  w->ctx.nthreads = w->nthreads;
  w->fibers_mode = L->use_fibers != 0;
  w->co_ready = false;
  w->warn_early_return = 0;
  w->out.clear();
  // module TLS: where this thread's static __shared__ variables live
  w->tls_anchor = (char*)L->bind(&w->ctx);
  // dynamic shared memory: the region ends flush against a guard page
  size_t need = (L->shared_mem + PAGE - 1) / PAGE * PAGE;
  if (need == 0) need = PAGE;
  if (!w->arena || w->arena_size < need) {
    if (w->arena) munmap(w->arena, w->arena_size + PAGE);
    w->arena = (char*)map_or_die(need + PAGE);
    w->arena_size = need;
    mprotect(w->arena + need, PAGE, PROT_NONE);
  }
  w->dyn_size = L->shared_mem;
  w->dyn_lo = w->arena + w->arena_size - ((L->shared_mem + 15) / 16 * 16);
  w->ctx.dyn_smem = w->dyn_lo;
  if (w->fibers_mode) {
    size_t usable = (size_t)(L->stack_kb > 0 ? L->stack_kb : 32) * 1024;
    ensure_stacks(w, w->nthreads, usable);
    w->fibers.resize(w->nthreads);
    // A fiber's thread index is the same in every block: computed once a launch, not once a block
    // (three divisions a thread, a few percent of a barrier kernel's blocks of 256 threads).
    unsigned bx = L->block[0], by = L->block[1];
    for (unsigned i = 0; i < w->nthreads; i++) w->fibers[i].tid = uint3{i % bx, (i / bx) % by, i / (bx * by)};
    w->warps.assign((w->nthreads + 31) / 32, Warp());
  } else {
    w->warps.assign((w->nthreads + 31) / 32, Warp());
  }
  make_order(w, w->nthreads, L->schedule == 2 ? 0 : L->schedule, L->seed);
  if (L->check) {
    w->st_lo = w->st_hi = 0;
    for (int i = 0; i < L->n_static; i++) {
      uintptr_t a = (uintptr_t)w->tls_anchor + L->static_off[i], e = a + L->static_size[i];
      if (!w->st_lo || a < w->st_lo) w->st_lo = a;
      if (e > w->st_hi) w->st_hi = e;
    }
    w->st_lo &= ~(SG - 1);
    w->rz_lo = (uintptr_t)w->tls_anchor + L->tls_lo_rel - 256;
    w->rz_hi = (uintptr_t)w->tls_anchor + L->tls_hi_rel + 256;
    w->sh_static.assign((w->st_hi - w->st_lo + SG - 1) / SG, Shadow());
    w->sh_dyn.assign((w->dyn_size + SG - 1) / SG, Shadow());
    device_shadow_begin(w);
    g_check_worker = w;
  }
  while (!S->abort.load(std::memory_order_relaxed)) {
    if (g_stop) {
      std::lock_guard<std::mutex> lk(g_mu);
      if (w->R->kind == EMU_OK) {
        w->R->kind = EMU_ERR_STOP;
        w->R->extra = g_stop;
        w->R->thread[0] = w->R->thread[1] = w->R->thread[2] = 0xFFFFFFFFu;
      }
      S->abort.store(1);
      break;
    }
    unsigned long long k = S->next.fetch_add(1);
    if (k >= S->nblocks) break;
    unsigned long long b = k;
    if (L->schedule == 1) b = S->nblocks - 1 - k;
    else if (L->schedule == 2) b = (S->a_mul * k + S->a_add) % S->nblocks;
    run_block(w, b);
    if (!w->failed && (L->pad_lo_end_rel || L->pad_hi_start_rel)) check_pads(w);
    if (w->failed) { S->abort.store(1); break; }
  }
  g_check_worker = nullptr;
  if (L->check) device_shadow_end(w);
  sigaltstack(&old_ss, nullptr);
  tls_worker = nullptr;
}

EXPORT int emu_launch(const EmuLaunch* L) {
  EmuResult* R = L->result;
  memset(R, 0, sizeof *R);
  Shared S;
  S.nblocks = (unsigned long long)L->grid[0] * L->grid[1] * L->grid[2];
  {
    uint64_t s = L->seed * 0x2545F4914F6CDD1Dull + 99;
    if (!s) s = 1;
    S.a_mul = 1;
    if (S.nblocks > 1) {
      do { S.a_mul = rng_next(s) % S.nblocks; } while (S.a_mul == 0 || gcd_u(S.a_mul, S.nblocks) != 1);
    }
    S.a_add = rng_next(s) % (S.nblocks ? S.nblocks : 1);
  }
  int nw = L->workers < 1 ? 1 : L->workers;
  if (L->check) nw = 1;
  if ((unsigned long long)nw > S.nblocks) nw = (int)S.nblocks;
  if (nw < 1) nw = 1;
  std::vector<Worker*> ws;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    while ((int)g_workers.size() < nw) g_workers.push_back(new_worker());
    ws.assign(g_workers.begin(), g_workers.begin() + nw);
  }
  for (Worker* w : ws) { w->R = R; w->thread = pthread_self(); }
  g_stop = 0;
  install_handlers();
  // The watchdog enforces the timeout, and passes a Ctrl-C on to workers that are not the thread
  // that received it. It only signals workers that are still running (checked under wd_mu).
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  bool done = false;
  std::vector<char> running(nw, 1);
  std::thread watchdog;
  set_code_range((const void*)L->bind);
  g_resend = L->timeout_ms > 0 || nw > 1;
  if (g_resend) {
    watchdog = std::thread([&] {
      auto t0 = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lk(wd_mu);
      while (!done) {
        wd_cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return done; });
        if (done) break;
        if (!g_stop && L->timeout_ms > 0 &&
            std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(L->timeout_ms))
          g_stop = 2;
        if (g_stop)
          for (int i = 0; i < nw; i++)
            if (running[i]) pthread_kill(ws[i]->thread, stop_sig());
      }
    });
  }
  auto run = [&](int i) {
    worker_loop(ws[i], L, &S);
    std::lock_guard<std::mutex> lk(wd_mu);
    running[i] = 0;
  };
  if (nw == 1) {
    run(0);
  } else {
    std::vector<std::thread> th;
    for (int i = 1; i < nw; i++) th.emplace_back(run, i);
    run(0);
    for (auto& t : th) t.join();
  }
  if (watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lk(wd_mu);
      done = true;
    }
    wd_cv.notify_all();
    watchdog.join();
  }
  restore_handlers();
  g_stop = 0;
  std::string out;
  for (Worker* w : ws) {
    out += w->out;
    w->out.clear();
    if (w->warn_early_return && !R->warn_early_return) {
      R->warn_early_return = 1;
      memcpy(R->warn_thread, w->warn_thread, sizeof R->warn_thread);
      memcpy(R->warn_block, w->warn_block, sizeof R->warn_block);
      R->warn_line = w->warn_line;
      if (w->warn_file) snprintf(R->warn_file, sizeof R->warn_file, "%s", w->warn_file);
    }
  }
  if (!out.empty()) {
    R->out_text = (char*)malloc(out.size() + 1);
    memcpy(R->out_text, out.data(), out.size());
    R->out_text[out.size()] = 0;
    R->out_len = (long long)out.size();
  }
  return R->kind;
}

EXPORT void emu_free_text(char* p) { free(p); }

// Device memory lives in its own reserved address range (PROT_NONE until allocated), like a GPU's
// separate address space: a stray index far past an array faults there or lands in another device
// array, and never scribbles over the Python heap, a library or a fiber stack.
static const size_t REGION_SIZE = 256ull << 30;   // address space only (MAP_NORESERVE, PROT_NONE)
static const size_t REGION_SKIP = 16ull << 30;    // room below the first array for negative indices
static const size_t GRANULE = 1u << 20;           // allocations are spaced at least 1 MiB apart
static char* g_region = nullptr;
static bool g_region_failed = false;
static size_t g_bump = REGION_SKIP;
static std::map<size_t, size_t> g_free;           // offset -> length, coalesced
static std::mutex g_alloc_mu;

static char* region_take(size_t len) {
  std::lock_guard<std::mutex> lk(g_alloc_mu);
  if (!g_region && !g_region_failed) {
    void* p = mmap(nullptr, REGION_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) g_region_failed = true;
    else g_region = (char*)p;
  }
  if (!g_region) return nullptr;
  len = (len + GRANULE - 1) / GRANULE * GRANULE;
  for (auto it = g_free.begin(); it != g_free.end(); ++it) {
    if (it->second >= len) {
      size_t off = it->first, rest = it->second - len;
      g_free.erase(it);
      if (rest) g_free[off + len] = rest;
      return g_region + off;
    }
  }
  if (g_bump + len > REGION_SIZE) return nullptr;
  char* p = g_region + g_bump;
  g_bump += len;
  return p;
}

static bool region_give(char* p, size_t len) {
  if (!g_region || p < g_region || p >= g_region + REGION_SIZE) return false;
  len = (len + GRANULE - 1) / GRANULE * GRANULE;
  // give the pages back to the system, keep the addresses reserved
  mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  std::lock_guard<std::mutex> lk(g_alloc_mu);
  size_t off = (size_t)(p - g_region);
  auto it = g_free.emplace(off, len).first;
  auto next = std::next(it);
  if (next != g_free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    g_free.erase(next);
  }
  if (it != g_free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      g_free.erase(it);
    }
  }
  return true;
}

// Guarded device buffers: [guard page][data pages, data ends flush with the last one][guard page].
// The data start is aligned down to 'align' bytes (16 keeps float4 loads legal).
EXPORT void* emu_alloc(unsigned long long nbytes, unsigned long long align, unsigned long long* map_lo,
                       unsigned long long* map_len) {
  size_t need = nbytes + (align ? align - 1 : 0);
  size_t pages = (need + PAGE - 1) / PAGE;
  if (pages == 0) pages = 1;
  size_t len = (pages + 2) * PAGE;
  char* b = region_take(len);
  if (!b) {
    void* base = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return nullptr;
    b = (char*)base;
  }
  if (mprotect(b + PAGE, pages * PAGE, PROT_READ | PROT_WRITE) != 0) {
    if (!region_give(b, len)) munmap(b, len);
    return nullptr;
  }
  char* end = b + PAGE + pages * PAGE;
  uintptr_t data = (uintptr_t)end - nbytes;
  if (align > 1) data &= ~(uintptr_t)(align - 1);
  *map_lo = (unsigned long long)(uintptr_t)b;
  *map_len = len;
  return (void*)data;
}

EXPORT void emu_free(unsigned long long map_lo, unsigned long long map_len) {
  if (!region_give((char*)(uintptr_t)map_lo, map_len)) munmap((void*)(uintptr_t)map_lo, map_len);
}

EXPORT int emu_abi_version() { return 3; }

#include "emu_async_rt.h"
