// Part of the runtime library (included at the end of runtime.cpp), not of kernel modules:
// shared-window addresses and cp.async, which emu_ptx.h calls.
//
// Shared-window addresses. On a GPU, __cvta_generic_to_shared gives a 32-bit offset in the
// block's shared window, which ldmatrix and cp.async take. Here shared memory is the module's
// thread-local block (static __shared__) or the dynamic arena, so a 32-bit address names one of the
// two by its top bit. Static: relative to a 64 KB-aligned base, so the low 16 bits of the address
// are the pointer's (thread-local variables keep their __align__). Dynamic: relative to the start
// of extern __shared__ memory, which is at window offset 0 (1024-aligned, as on a GPU without
// static shared memory), so swizzles computed on addresses stay inside the buffer.
static const unsigned SHWIN_STATIC = 0x40000000u, SHWIN_DYN = 0x80000000u;

static uintptr_t shwin_static_base(Worker* w) { return (uintptr_t)w->tls_anchor & ~(uintptr_t)0xffff; }
static uintptr_t shwin_dyn_base(Worker* w) { return (uintptr_t)w->dyn_lo; }

static bool in_static_shared(Worker* w, uintptr_t a, size_t n) {
  uintptr_t lo = (uintptr_t)w->tls_anchor + w->L->tls_lo_rel, hi = (uintptr_t)w->tls_anchor + w->L->tls_hi_rel;
  return a >= lo && a + n <= hi;
}
static bool in_dyn_shared(Worker* w, uintptr_t a, size_t n) {
  return w->dyn_size && a >= (uintptr_t)w->dyn_lo && a + n <= (uintptr_t)w->dyn_lo + w->dyn_size;
}

EXPORT unsigned emu_rt_cvta_shared(EmuCtx* c, const void* p, const char* file, int line) {
  Worker* w = (Worker*)c->worker;
  uintptr_t a = (uintptr_t)p;
  if (in_dyn_shared(w, a, 0))
    return SHWIN_DYN + (unsigned)(a - shwin_dyn_base(w));
  if (in_static_shared(w, a, 0)) return SHWIN_STATIC + (unsigned)(a - shwin_static_base(w));
  InRuntime guard(w);
  fail(w, EMU_ERR_TRAP, file, line,
       "__cvta_generic_to_shared(%p): the pointer is not in shared memory (it must point into a __shared__ "
       "array or the extern __shared__ buffer of the block)", p);
}

EXPORT void* emu_rt_shared_ptr(EmuCtx* c, unsigned addr, unsigned n, unsigned align, const char* what,
                               const char* file, int line) {
  Worker* w = (Worker*)c->worker;
  uintptr_t a = addr >= SHWIN_DYN ? shwin_dyn_base(w) + (addr - SHWIN_DYN)
                                  : shwin_static_base(w) + ((long long)addr - (long long)SHWIN_STATIC);
  bool ok = addr >= SHWIN_DYN ? in_dyn_shared(w, a, n) : in_static_shared(w, a, n);
  if (!ok) {
    InRuntime guard(w);
    fail(w, EMU_ERR_TRAP, file, line,
         "%s: shared-window address 0x%08x (%u bytes) is outside the block's shared memory: a shared address "
         "comes from __cvta_generic_to_shared(pointer into a __shared__ array) plus an offset that stays "
         "inside the array", what, addr, n);
  }
  if (align > 1 && (addr % align)) {
    InRuntime guard(w);
    fail(w, EMU_ERR_TRAP, file, line, "misaligned address: %s at shared address 0x%08x needs %u-byte alignment",
         what, addr, align);
  }
  return (void*)a;
}

// cp.async: each thread's copies wait in its own queue, tagged with the number of the commit group
// they will belong to; cp.async.wait_group N performs (writes) every copy of all but the N most
// recent committed groups. Per worker thread, that is per block being run.
struct AsyncCopy {
  char* dst;
  unsigned n;
  unsigned group;
  unsigned char data[16];
};
struct AsyncState {
  std::vector<std::vector<AsyncCopy>> queue;  // per CUDA thread of the block
  std::vector<unsigned> committed;            // per CUDA thread: groups committed so far
  bool used = false;                          // a cp.async or commit since the last reset
};
static thread_local AsyncState t_async;

// Every queue empty and every count zero at a block's start. Reset only after a block that used
// cp.async: clearing 256 queues before each block of a kernel that never copies asynchronously
// cost a few percent of the MNIST step.
static void async_begin_block(Worker* w) {
  AsyncState& S = t_async;
  if (!S.used && S.queue.size() >= w->nthreads && S.committed.size() >= w->nthreads) return;
  if (S.queue.size() < w->nthreads) S.queue.resize(w->nthreads);
  for (auto& q : S.queue) q.clear();
  S.committed.assign(S.committed.size() > w->nthreads ? S.committed.size() : w->nthreads, 0);
  S.used = false;
}

// Check mode: the shadow entries of shared memory [a, a+n) (nullptr where not shared memory).
static Shadow* async_shadow(Worker* w, uintptr_t x) {
  if (x >= w->st_lo && x < w->st_hi) return &w->sh_static[(x - w->st_lo) / SG];
  uintptr_t dlo = (uintptr_t)w->dyn_lo;
  if (x >= dlo && x < dlo + w->dyn_size) return &w->sh_dyn[(x - dlo) / SG];
  return nullptr;
}

EXPORT void emu_rt_cp_async(EmuCtx* c, unsigned dst, const void* data, unsigned n, const char* file, int line) {
  Worker* w = (Worker*)c->worker;
  uintptr_t pc = (uintptr_t)__builtin_return_address(0);
  char* p = (char*)emu_rt_shared_ptr(c, dst, n, n, "cp.async destination", file, line);
  AsyncState& S = t_async;
  S.used = true;
  unsigned tid = c->tid_linear;
  AsyncCopy cp;
  cp.dst = p;
  cp.n = n;
  cp.group = S.committed[tid];
  memcpy(cp.data, data, n);
  S.queue[tid].push_back(cp);
  if (w->L->check) {
    // The copy is a write of the destination, from now until the wait that covers it: it races with
    // unordered earlier accesses (checked now) and with every access before the wait (pending).
    check_slow(w, (uintptr_t)p, n, true, pc, 0, false);
    for (uintptr_t x = (uintptr_t)p & ~(SG - 1); x < (uintptr_t)p + n; x += SG)
      if (Shadow* s = async_shadow(w, x)) s->pending = 1;
  }
}

EXPORT void emu_rt_cp_async_commit(EmuCtx* c) {
  t_async.used = true;
  t_async.committed[c->tid_linear]++;
}

EXPORT void emu_rt_cp_async_wait(EmuCtx* c, int keep, const char* file, int line) {
  Worker* w = (Worker*)c->worker;
  uintptr_t pc = (uintptr_t)__builtin_return_address(0);
  AsyncState& S = t_async;
  unsigned tid = c->tid_linear;
  if (keep < 0) {
    InRuntime guard(w);
    fail(w, EMU_ERR_TRAP, file, line, "cp.async.wait_group %d: the number of groups left pending must be >= 0", keep);
  }
  long long done_below = (long long)S.committed[tid] - keep;  // groups numbered below this complete now
  std::vector<AsyncCopy>& q = S.queue[tid];
  size_t kept = 0;
  for (size_t i = 0; i < q.size(); i++) {
    AsyncCopy& cp = q[i];
    if ((long long)cp.group >= done_below) {
      q[kept++] = cp;
      continue;
    }
    memcpy(cp.dst, cp.data, cp.n);
    if (w->L->check) {
      // The data lands now: a write by this thread at the wait, which other threads may read only
      // after a barrier.
      for (uintptr_t x = (uintptr_t)cp.dst & ~(SG - 1); x < (uintptr_t)cp.dst + cp.n; x += SG)
        if (Shadow* s = async_shadow(w, x)) s->pending = 0;
      check_slow(w, (uintptr_t)cp.dst, cp.n, true, pc, 0, false);
    }
  }
  q.resize(kept);
}
