"""minitorch.emu turns learners' bugs into precise Python exceptions, and the process survives."""

from __future__ import annotations

import os
import re
import time
import warnings

import numpy as np
import pytest

from minitorch import emu

RNG = np.random.default_rng(99)


def mod(src: str, **kw: object) -> emu.RawModule:
    return emu.RawModule(code=src, **kw)


def line_of(src: str, marker: str) -> int:
    for i, ln in enumerate(src.splitlines(), 1):
        if f"// @{marker}" in ln:
            return i
    raise AssertionError(marker)


def still_works() -> None:
    src = r"""
extern "C" __global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""
    x = RNG.standard_normal(777).astype(np.float32)
    y = emu.zeros(777)
    mod(src).get_function("twice")((4,), (256,), (emu.asarray(x), y, np.int32(777)))
    np.testing.assert_array_equal(y.get(), 2 * x)


# ------------------------------------------------------------------------------ memory faults
OOB = r"""
extern "C" __global__ void scale(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = 2.0f * x[i % n];  // @store
}
extern "C" __global__ void under(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i - 1];  // @under
}
extern "C" __global__ void nullp(float* out) {
    float* p = nullptr;
    out[threadIdx.x] = p[threadIdx.x];  // @null
}
"""


def test_out_of_bounds_write_is_a_fault_with_argument_offset_block_thread() -> None:
    x, out = emu.asarray(np.ones(1000, np.float32)), emu.zeros(1000)
    k = mod(OOB, filename="scale.cu").get_function("scale")
    for _ in range(2):  # the process survives and a second fault is reported the same way
        with pytest.raises(emu.KernelFault) as ei:
            k((4,), (256,), (x, out, np.int32(1000)))
        e = ei.value
        assert isinstance(e, RuntimeError)
        assert (e.kernel, e.argument, e.argument_name, e.offset, e.nbytes) == ("scale", 1, "out", 4000, 4000)
        assert e.block == (3, 0, 0) and e.thread == (232, 0, 0)
        assert e.line == line_of(OOB, "store")
        assert "argument #1 (`out`): byte offset 4000 of a 4000-byte buffer, thread (232,0,0) block (3,0,0)" in str(e)
        assert f"scale.cu:{line_of(OOB, 'store')}" in str(e)
    np.testing.assert_array_equal(out.get()[:1000], 2.0)  # every in-bounds thread ran before the fault
    still_works()


def test_faults_with_several_workers() -> None:
    x, out = emu.asarray(np.ones(4096, np.float32)), emu.zeros(4096)
    with emu.workers(2), pytest.raises(emu.KernelFault) as ei:
        mod(OOB).get_function("scale")((20,), (256,), (x, out, np.int32(4096)))
    assert ei.value.argument == 1 and ei.value.offset >= 4 * 4096 and ei.value.block[0] >= 16
    assert ei.value.offset == 4 * (256 * ei.value.block[0] + ei.value.thread[0])
    still_works()


def test_write_into_the_alignment_padding_is_caught_after_the_launch() -> None:
    n = 1001  # 4004 bytes: the 16-byte aligned start leaves 12 bytes before the guard page
    x, out = emu.asarray(np.ones(n, np.float32)), emu.zeros(n)
    k = mod(OOB).get_function("scale")
    with pytest.raises(emu.KernelFault) as ei:
        k((1,), (1002,), (x, out, np.int32(n)))
    assert ei.value.argument == 1 and ei.value.offset == 4004
    assert "byte offset 4004 of a 4004-byte buffer" in str(ei.value)
    still_works()


def test_write_before_the_start_is_caught_after_the_launch() -> None:
    src = r"""
extern "C" __global__ void back(float* x, int n) {
    int i = threadIdx.x;
    if (i < n) x[i - 1] = 1.0f;  // thread 0 writes x[-1]
}
"""
    x = emu.zeros(100)
    with pytest.raises(emu.KernelFault, match="byte offset -4 of a 400-byte buffer") as ei:
        mod(src).get_function("back")((1,), (128,), (x, np.int32(100)))
    assert ei.value.argument == 0 and ei.value.offset == -4
    mod(src).get_function("back")((1,), (128,), (x, np.int32(0)))  # the canary was repaired: no second report
    still_works()


def test_check_mode_reports_exact_offsets_and_reads_before_the_start() -> None:
    n = 1001
    x, out = emu.asarray(np.ones(n, np.float32)), emu.zeros(n)
    m = mod(OOB)
    with emu.check_mode():
        with pytest.raises(emu.KernelFault) as ei:
            m.get_function("scale")((1,), (1024,), (x, out, np.int32(n)))
        assert (ei.value.offset, ei.value.thread, ei.value.argument) == (4004, (1001, 0, 0), 1)
        with pytest.raises(emu.KernelFault) as ei:
            m.get_function("under")((1,), (64,), (x, out, np.int32(n)))
        e = ei.value
        assert (e.argument, e.offset, e.thread, e.line) == (0, -4, (0, 0, 0), line_of(OOB, "under"))
        assert "out-of-bounds read" in str(e)
    still_works()


@pytest.mark.parametrize("offset", [1 << 24, 1 << 28, -(1 << 24)])
def test_far_out_of_bounds_writes_fault_instead_of_corrupting_the_process(offset: int) -> None:
    src = r"""
extern "C" __global__ void far(float* x, long long off, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i + off] = 1.0f;
}
"""
    keep = [emu.zeros(1 << 16) for _ in range(8)]  # other device arrays around it
    x = emu.zeros(4099)
    with pytest.raises(emu.KernelFault, match="illegal memory write|out-of-bounds write"):
        mod(src).get_function("far")((17,), (256,), (x, np.int64(offset), np.int32(4099)))
    assert all((k.get() == 0).all() for k in keep)
    still_works()


def test_device_memory_is_returned_and_reused() -> None:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(50):
        a = emu.zeros(4 << 20, np.uint8)  # 4 MiB, touched
        a.set(np.ones(4 << 20, np.uint8))
        del a
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 64, grown_mb  # 200 MiB allocated in all, freed as it went


def test_null_pointer_is_reported() -> None:
    with pytest.raises(emu.KernelFault, match="null"):
        mod(OOB).get_function("nullp")((1,), (32,), (emu.zeros(32),))
    still_works()


def test_dynamic_shared_memory_overflow_is_reported() -> None:
    src = r"""
extern "C" __global__ void k(float* out) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = buf[threadIdx.x];
}
"""
    with pytest.raises(emu.KernelFault, match=r"dynamic shared memory.*byte offset 64 of the 64 bytes"):
        mod(src).get_function("k")((1,), (32,), (emu.zeros(32),), shared_mem=64)
    still_works()


def test_stack_overflow_in_a_thread_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    # on fibers: split at its barrier (minitorch/emu/split.py), the kernel's variables live in a heap frame
    monkeypatch.setenv("MINITORCH_EMU_SPLIT", "0")
    src = r"""
extern "C" __global__ void k(float* out, int n) {
    volatile float local[40000];
    for (int i = 0; i < n; i++) local[i] = i;
    __syncthreads();
    out[threadIdx.x] = local[n - 1];
}
"""
    with pytest.raises(emu.KernelFault, match="stack overflow"):
        mod(src).get_function("k")((1,), (4,), (emu.zeros(4), np.int32(40000)))
    still_works()


# ------------------------------------------------------------------ assert, abort, div by zero
TRAPS = r"""
#include <cassert>
#include <cstdlib>
extern "C" __global__ void check(const int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) assert(x[i] != 13);  // @assert
}
extern "C" __global__ void ratio(const int* a, const int* b, int* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] / b[i];  // @div
}
extern "C" __global__ void stop(int n) {
    if (threadIdx.x == n) abort();
}
extern "C" __global__ void trap(int n) {
    if (threadIdx.x == n) __trap();  // @trap
}
"""


def test_assert_in_a_kernel() -> None:
    x = np.arange(100, dtype=np.int32)
    with pytest.raises(emu.KernelFault) as ei:
        mod(TRAPS, filename="traps.cu").get_function("check")((4,), (32,), (emu.asarray(x), np.int32(100)))
    e = ei.value
    assert e.thread == (13, 0, 0) and e.block == (0, 0, 0) and e.line == line_of(TRAPS, "assert")
    assert "x[i] != 13" in str(e) and "traps.cu" in str(e)
    still_works()


def test_integer_division_by_zero() -> None:
    a = np.arange(64, dtype=np.int32)
    b = np.ones(64, np.int32)
    b[40] = 0
    with pytest.raises(emu.KernelFault, match="division by zero") as ei:
        mod(TRAPS).get_function("ratio")((2,), (32,), (emu.asarray(a), emu.asarray(b), emu.zeros(64, np.int32),
                                                       np.int32(64)))
    assert ei.value.block == (1, 0, 0) and ei.value.thread == (8, 0, 0)
    assert ei.value.line == line_of(TRAPS, "div")
    still_works()


def test_abort_and_trap_do_not_kill_the_process() -> None:
    m = mod(TRAPS)
    for _ in range(2):
        with pytest.raises(emu.KernelFault, match="abort") as ei:
            m.get_function("stop")((1,), (32,), (np.int32(5),))
        assert ei.value.thread == (5, 0, 0)
    with pytest.raises(emu.KernelFault, match="__trap") as ei:
        m.get_function("trap")((1,), (32,), (np.int32(9),))
    assert ei.value.thread == (9, 0, 0) and ei.value.line == line_of(TRAPS, "trap")
    still_works()


# ----------------------------------------------------------------------------------- barriers
def test_barrier_divergence_names_both_lines() -> None:
    src = r"""
extern "C" __global__ void k(float* x) {
    if (threadIdx.x % 2 == 0) {
        x[threadIdx.x] = 1.0f;
        __syncthreads();  // @even
    } else {
        __syncthreads();  // @odd
        x[threadIdx.x] = 2.0f;
    }
}
"""
    with pytest.raises(emu.KernelFault, match="barrier divergence") as ei:
        mod(src).get_function("k")((1,), (64,), (emu.zeros(64),))
    msg = str(ei.value)
    assert f"line {line_of(src, 'even')}" in msg and f"line {line_of(src, 'odd')}" in msg
    assert ei.value.kind == "barrier-divergence" and ei.value.block == (0, 0, 0)
    still_works()


def test_thread_dependent_barrier_count_is_an_error() -> None:
    src = r"""
extern "C" __global__ void k(float* x) {
    for (int i = 0; i < (int)threadIdx.x % 3 + 1; i++) {
        __syncthreads();  // @loop
        x[threadIdx.x] += 1.0f;
    }
}
"""
    with pytest.raises(emu.KernelFault, match="barrier divergence") as ei:
        mod(src).get_function("k")((1,), (32,), (emu.zeros(32),))
    assert f"line {line_of(src, 'loop')}" in str(ei.value)


def test_early_return_before_a_barrier_is_a_warning_and_still_correct() -> None:
    src = r"""
extern "C" __global__ void k(const float* x, float* y, int n) {
    __shared__ float s[128];
    int i = threadIdx.x;
    if (i >= n) return;
    s[i] = x[i];
    __syncthreads();  // @bar
    y[i] = s[n - 1 - i];
}
"""
    x = RNG.standard_normal(128).astype(np.float32)
    y = emu.zeros(128)
    with pytest.warns(emu.BarrierWarning, match=f"line {line_of(src, 'bar')}"):
        mod(src).get_function("k")((1,), (128,), (emu.asarray(x), y, np.int32(100)))
    np.testing.assert_array_equal(y.get()[:100], x[:100][::-1])


def test_warp_primitive_deadlock_is_reported() -> None:
    src = r"""
extern "C" __global__ void k(int* x) {
    int v = threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_down_sync(0xffffffffu, v, 1);  // lanes 16-31 never arrive
    __syncthreads();
    x[threadIdx.x] = v;
}
"""
    with pytest.raises(emu.KernelFault, match="deadlock"):
        mod(src).get_function("k")((1,), (32,), (emu.zeros(32, np.int32),))
    still_works()


# --------------------------------------------------------------------------------- check mode
SGEMM_RACE = r"""
#define TILE 16
extern "C" __global__ void sgemm(const float* A, const float* B, float* C, int n) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < n / TILE; ++t) {
        As[ty][tx] = A[row * n + t * TILE + tx];  // @loadA
        Bs[ty][tx] = B[(t * TILE + ty) * n + col];  // @loadB
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];  // @compute
        SECOND_BARRIER
    }
    C[row * n + col] = acc;
}
"""


def _sgemm(src: str, n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    a = RNG.standard_normal((n, n)).astype(np.float32)
    b = RNG.standard_normal((n, n)).astype(np.float32)
    c = emu.zeros((n, n))
    mod(src, filename="matmul.cu").get_function("sgemm")((n // 16, n // 16), (16, 16),
                                                          (emu.asarray(a), emu.asarray(b), c, np.int32(n)))
    return c.get(), a.astype(np.float64) @ b


def test_check_mode_reports_missing_syncthreads_in_tiled_matmul_with_both_lines() -> None:
    src = SGEMM_RACE.replace("SECOND_BARRIER", "")
    with emu.check_mode():
        with pytest.raises(emu.KernelFault) as ei:
            _sgemm(src)
    msg = str(ei.value)
    assert "write-after-read" in msg and "`As`" in msg and "matmul.cu" in msg
    war = [f for f in ei.value.findings if f["kind"] == "write-after-read" and f["variable"] == "As"]
    assert war and {war[0]["line"], war[0]["other_line"]} == {line_of(src, "loadA"), line_of(src, "compute")}
    assert f"line {line_of(src, 'compute')}" in msg and f"line {line_of(src, 'loadA')}" in msg
    still_works()


def test_check_mode_is_quiet_and_correct_on_the_fixed_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINITORCH_EMU_CHECK", "1")
    got, ref = _sgemm(SGEMM_RACE.replace("SECOND_BARRIER", "__syncthreads();"))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_check_mode_reports_uninitialised_shared_reads() -> None:
    src = r"""
extern "C" __global__ void k(float* out) {
    __shared__ float tile[64];
    if (threadIdx.x < 60) tile[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x];  // @read
}
"""
    with emu.check_mode(), pytest.raises(emu.KernelFault, match="uninitialised") as ei:
        mod(src).get_function("k")((1,), (64,), (emu.zeros(64),))
    f = ei.value.findings[0]
    assert f["variable"] == "tile" and f["line"] == line_of(src, "read")
    assert 60 <= f["thread"][0] < 64 and f["offset"] == 4 * f["thread"][0]


def test_check_mode_names_the_missing_barrier_of_a_double_buffered_loop_before_its_uninitialised_reads() -> None:
    # without the barrier at the end of a step, a thread reads the second copy of the tile before anyone stored it
    # (an uninitialised read) and reads the first copy while others write it (a race): the race is the cause and
    # names the barrier to add, so it leads the report and gives the fault its kind
    src = r"""
extern "C" __global__ void k(const float* x, float* out, int steps) {
    __shared__ float tile[2][64];
    tile[0][threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    float acc = 0.0f;
    for (int s = 0; s < steps; ++s) {
        acc += tile[s & 1][63 - threadIdx.x];  // @read
        if (s + 1 < steps) tile[(s + 1) & 1][threadIdx.x] = x[(s + 1) * 64 + threadIdx.x];  // @store
    }
    out[threadIdx.x] = acc;
}
"""
    x = RNG.standard_normal(4 * 64).astype(np.float32)
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        mod(src).get_function("k")((1,), (64,), (emu.asarray(x), emu.zeros(64), np.int32(4)))
    kinds = [f["kind"] for f in ei.value.findings]
    assert "uninitialised-read" in kinds and ei.value.kind != "uninitialised-read", kinds
    assert kinds.index("uninitialised-read") > 0 and "__syncthreads()" in str(ei.value).split("\n  - ")[1]


def test_check_mode_reports_static_and_dynamic_shared_overruns() -> None:
    src = r"""
extern "C" __global__ void k(float* out, int idx) {
    __shared__ float tile[64];
    tile[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x + idx];  // @tile
}
extern "C" __global__ void d(float* out, int idx) {
    extern __shared__ float dyn[];
    dyn[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = dyn[(int)threadIdx.x - idx];  // @dyn
}
"""
    m = mod(src)
    out = emu.zeros(64)
    with emu.check_mode():
        m.get_function("k")((1,), (64,), (out, np.int32(0)))  # in bounds: no report
        with pytest.raises(emu.KernelFault, match="out-of-bounds read of __shared__ `tile`") as ei:
            m.get_function("k")((1,), (64,), (out, np.int32(100)))
        assert ei.value.line == line_of(src, "tile") and ei.value.offset >= 256 and ei.value.nbytes == 256
        with pytest.raises(emu.KernelFault, match="dynamic shared memory") as ei:
            m.get_function("d")((1,), (64,), (out, np.int32(3)), shared_mem=256)
        assert ei.value.offset == -12 and ei.value.line == line_of(src, "dyn")
    still_works()


def test_shared_array_off_by_one_write_is_caught_in_normal_mode_without_damage() -> None:
    src = r"""
extern "C" __global__ void k(float* out, int wr) {
    __shared__ float tile[64];
    tile[threadIdx.x] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 0) tile[wr] = 5.0f;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x];
}
"""
    k = mod(src).get_function("k")
    out = emu.zeros(64)
    for wr in (64, 65, -1):
        with pytest.raises(emu.KernelFault, match="out-of-bounds write of __shared__ `tile`") as ei:
            k((2,), (64,), (out, np.int32(wr)))
        assert ei.value.offset == 4 * wr and ei.value.block == (0, 0, 0) and ei.value.thread is None
    k((2,), (64,), (out, np.int32(3)))
    np.testing.assert_array_equal(out.get(), np.where(np.arange(64) == 3, 5.0, 1.0))
    still_works()


def test_normal_mode_poisons_shared_memory_with_nan() -> None:
    src = r"""
extern "C" __global__ void k(float* out) {
    __shared__ float tile[64];
    if (threadIdx.x < 60) tile[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x];
}
"""
    out = emu.zeros(64)
    mod(src).get_function("k")((1,), (64,), (out,))
    got = out.get()
    assert (got[:60] == 1).all() and np.isnan(got[60:]).all()


def test_check_mode_explains_legacy_volatile_warp_reductions() -> None:
    src = r"""
extern "C" __global__ void k(const float* x, float* out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    if (t < 32) {
        volatile float* v = s;
        v[t] += v[t + 32];
        v[t] += v[t + 16];  // @step
        v[t] += v[t + 8];
    }
    if (t == 0) out[0] = s[0];
}
"""
    with emu.check_mode(), pytest.raises(emu.KernelFault, match="__syncwarp") as ei:
        mod(src).get_function("k")((1,), (64,), (emu.asarray(np.ones(64, np.float32)), emu.zeros(1)))
    assert "volatile" in str(ei.value) and "same warp" in str(ei.value)


def test_check_mode_handles_warp_shuffles_without_false_positives() -> None:
    src = r"""
extern "C" __global__ void k(const float* x, float* out) {
    __shared__ float warp_sums[8];
    int t = threadIdx.x;
    float v = x[blockIdx.x * blockDim.x + t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (t % 32 == 0) warp_sums[t / 32] = v;
    __syncthreads();
    if (t < 32) {
        v = t < 8 ? warp_sums[t] : 0.0f;
        for (int o = 4; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (t == 0) out[blockIdx.x] = v;
    }
}
"""
    x = RNG.standard_normal(1024).astype(np.float32)
    out = emu.zeros(4)
    with emu.check_mode():
        mod(src).get_function("k")((4,), (256,), (emu.asarray(x), out))
    np.testing.assert_allclose(out.get(), x.astype(np.float64).reshape(4, 256).sum(1), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ endless loops
LOOPS = r"""
extern "C" __global__ void spin(float* x, long long n) {
    for (long long i = threadIdx.x; i < n; i += 0)  // @spin  (the stride is never added)
        x[i % 64] += 1.0f;
}
extern "C" __global__ void spin_after_barrier(float* x, int n) {
    __shared__ float s[64];
    s[threadIdx.x] = 0.0f;
    __syncthreads();
    while (s[0] < n) { x[threadIdx.x] += 1.0f; }  // @wait
}
"""


@pytest.mark.parametrize(("kernel", "workers"), [("spin", 1), ("spin_after_barrier", 1), ("spin", 2)])
def test_endless_loops_are_stopped_by_the_time_limit(kernel: str, workers: int) -> None:
    m = mod(LOOPS, filename="loops.cu")
    t0 = time.perf_counter()
    with emu.time_limit(0.3), emu.workers(workers), pytest.raises(emu.KernelFault, match="did not finish") as ei:
        m.get_function(kernel)((4,), (64,), (emu.zeros(64), np.int32(5) if kernel != "spin" else np.int64(5)))
    assert time.perf_counter() - t0 < 5
    e = ei.value
    # the for loop's header or its body (line + 1): where the compiler's code for the endless loop lies
    first = line_of(LOOPS, "spin" if kernel == "spin" else "wait")
    assert e.kind == "timeout" and e.line in ((first, first + 1) if kernel == "spin" else (first,)), str(e)
    assert e.thread is not None and e.block is not None
    still_works()


def test_ctrl_c_interrupts_a_running_launch() -> None:
    import subprocess
    import sys
    from pathlib import Path

    child = r"""
import os, signal, sys, threading, numpy as np
from minitorch import emu
k = emu.RawModule(code=sys.argv[1]).get_function("spin")
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    k((1,), (64,), (emu.zeros(64), np.int64(5)))
except KeyboardInterrupt as e:
    print("INTERRUPTED", e)
x = emu.zeros(64)
print("STILL WORKS", float(x.get().sum()))
"""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    p = subprocess.run([sys.executable, "-c", child, LOOPS], capture_output=True, text=True, timeout=120, env=env)
    assert "INTERRUPTED kernel 'spin' interrupted" in p.stdout and "STILL WORKS 0.0" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0


# ------------------------------------------------------------------------------ launch limits
LIMITS = r"""
extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }
extern "C" __global__ void big(float* x) {
    __shared__ float s[13000];
    s[threadIdx.x] = 1.0f;
    x[threadIdx.x] = s[threadIdx.x];
}
"""


@pytest.mark.parametrize(("grid", "block"), [(1, 1025), (1, (32, 33)), (1, (1, 1, 65)), (0, 32), ((1, 65536), 32),
                                             (1, 0)])
def test_invalid_configurations(grid: object, block: object) -> None:
    with pytest.raises(emu.LaunchError, match="cudaErrorInvalidConfiguration"):
        mod(LIMITS).get_function("k")(grid, block, (emu.zeros(2048),))


def test_too_much_shared_memory() -> None:
    m = mod(LIMITS)
    with pytest.raises(emu.LaunchError, match="too many resources requested"):
        m.get_function("k")((1,), (32,), (emu.zeros(32),), shared_mem=48 * 1024 + 4)
    with pytest.raises(emu.LaunchError, match="too much shared data"):
        m.get_function("big")((1,), (32,), (emu.zeros(32),))
    m.get_function("k")((1,), (32,), (emu.zeros(32),), shared_mem=48 * 1024)  # exactly the limit is fine


# ------------------------------------------------------------------------------ argument packing
FILL = r"""
extern "C" __global__ void fill(float* out, float value, long long n) {
    for (long long i = threadIdx.x; i < n; i += blockDim.x) out[i] = value;
}
extern "C" __global__ void ifill(int* out, int value, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = value;
}
"""


def test_python_float_for_a_float_parameter_is_a_type_error_in_strict_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINITORCH_EMU_ARGS", raising=False)
    k = mod(FILL, filename="memory.cu").get_function("fill")
    with pytest.raises(TypeError) as ei:
        k((1,), (32,), (emu.zeros(10), 1.5, 10))
    assert str(ei.value) == ("argument #1 of fill(float* out, float value, long long int n): a Python float is "
                             "packed as a 64-bit double but the parameter is `float`; pass numpy.float32(x)")


def test_cupy_mode_reproduces_cupys_packing_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINITORCH_EMU_ARGS", "cupy")
    k = mod(FILL).get_function("fill")
    out = emu.zeros(10)
    with pytest.warns(emu.ArgumentWarning, match="numpy.float32"):
        k((1,), (32,), (out, 3.0e9, 10))
    half = np.frombuffer(np.float64(3.0e9).tobytes()[:4], np.float32)[0]  # a float reads half a double
    np.testing.assert_array_equal(out.get().view(np.uint32), np.full(10, half, np.float32).view(np.uint32))
    monkeypatch.delenv("MINITORCH_EMU_ARGS")
    emu.set_arg_mode("cupy")
    try:
        with pytest.warns(emu.ArgumentWarning):
            k((1,), (32,), (out, 2.0, 10))
    finally:
        emu.set_arg_mode("strict")
    with pytest.raises(TypeError):
        k((1,), (32,), (out, 2.0, 10))


def test_other_packing_rules() -> None:
    m = mod(FILL)
    fill, ifill = m.get_function("fill"), m.get_function("ifill")
    out = emu.zeros(10, np.int32)
    ifill((1,), (32,), (out, 7, 10))  # a Python int that fits an int parameter works (as on a GPU)
    np.testing.assert_array_equal(out.get(), 7)
    with pytest.raises(TypeError, match="does not fit"):
        ifill((1,), (32,), (out, 2**40, 10))
    with pytest.raises(TypeError, match="Python int"):
        fill((1,), (32,), (emu.zeros(10), 3, 10))
    with pytest.raises(TypeError, match="numpy.float32"):
        fill((1,), (32,), (emu.zeros(10), np.float64(3), 10))
    with pytest.raises(TypeError, match="host memory"):
        fill((1,), (32,), (np.zeros(10, np.float32), np.float32(1), 10))
    with pytest.raises(TypeError, match="float64"):
        fill((1,), (32,), (emu.zeros(10, np.float64), np.float32(1), 10))
    with pytest.raises(TypeError, match="takes 3 argument"):
        fill((1,), (32,), (emu.zeros(10), np.float32(1)))
    with pytest.raises(TypeError, match="not a pointer"):
        fill((1,), (32,), (emu.zeros(10), emu.zeros(1), 10))


def test_get_function_explains_missing_names() -> None:
    src = r"""
template <typename T> __global__ void t(T* x) { x[0] = T(1); }
__global__ void cpp(float* x) { x[0] = 1; }
extern "C" __global__ void c(float* x) { x[0] = 1; }
"""
    m = mod(src)
    with pytest.raises(emu.LaunchError, match="name_expressions"):
        m.get_function("t")
    with pytest.raises(emu.LaunchError, match='extern "C"'):
        m.get_function("cpp")
    with pytest.raises(emu.LaunchError, match="CUDA_ERROR_NOT_FOUND"):
        m.get_function("nope")
    out = emu.zeros(1)
    mod(src, name_expressions=["cpp"]).get_function("cpp")((1,), (1,), (out,))
    assert out.get()[0] == 1


# ------------------------------------------------------------------------------------ compiling
def test_kernels_removed_by_the_preprocessor_and_bad_name_expressions() -> None:
    src = r"""
#if 0
extern "C" __global__ void old(float* x) { x[0] = 1; }
#endif
template <typename T> __global__ void t(T* x) { x[0] = T(2); }
extern "C" __global__ void kept(float* x) { x[0] = 3; }
"""
    for _ in range(2):  # compiled, then from the cache
        m = mod(src)
        assert m.kernel_names() == ["kept"]
    out = emu.zeros(1)
    m.get_function("kept")((1,), (1,), (out,))
    assert out.get()[0] == 3
    with pytest.raises(emu.CompileError, match="name_expressions"):
        mod(src, name_expressions=["t<flaot>"])


def test_compile_errors_carry_the_learners_file_and_line() -> None:
    src = 'extern "C" __global__ void k(float* x) {\n    float v = 1.0f;\n    x[0] = v + missing;\n}\n'
    with pytest.raises(emu.CompileError) as ei:
        mod(src, filename="memory.cu")
    assert re.search(r"^memory\.cu:3:\d+: error: .*missing", str(ei.value), re.M), str(ei.value)
    assert "__emu_tu" not in str(ei.value)


@pytest.mark.parametrize(("use", "name", "instead"), [
    ("x[0] = -INFINITY;", "INFINITY", "__int_as_float(0x7f800000)"),
    ("x[0] = NAN;", "NAN", "__int_as_float(0x7fffffff)"),
    ("x[0] = HUGE_VALF;", "HUGE_VALF", "__int_as_float(0x7f800000)"),
    ("x[0] = FLT_MAX;", "FLT_MAX", "__int_as_float(0x7f7fffff)"),
    ("x[0] = sinf(M_PI * x[1]);", "M_PI", "3.14159265358979f"),
    ("x[0] = (float)INT_MAX;", "INT_MAX", "2147483647"),
])
def test_host_math_names_nvrtc_lacks_do_not_compile(use: str, name: str, instead: str) -> None:
    # NVRTC, CuPy's compiler for the GPU, has no host <math.h>/<float.h>/<limits.h>: a kernel using INFINITY
    # compiled on the emulator and failed on an H100. Now it fails here too, saying what to write instead.
    src = f'extern "C" __global__ void k(float* x) {{\n    {use}\n}}\n'
    with pytest.raises(emu.CompileError) as ei:
        mod(src, filename="lab.cu")
    msg = str(ei.value)
    assert re.search(rf"^lab\.cu:2:\d+: error: .*{name}", msg, re.M), msg
    assert re.search(rf"^lab\.cu:2:\d+: note: NVRTC, the GPU's compiler, has no {name}\b.*"
                     rf"{re.escape(instead)}", msg, re.M), msg


def test_what_nvrtc_has_still_compiles() -> None:
    # the course's own pattern (Lab 8b), CUDA's math_constants.h, and the device functions NVRTC provides
    src = r"""
#include <math_constants.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
extern "C" __global__ void k(float* x, int* flags) {
    x[0] = -INFINITY;
    x[1] = CUDART_INF_F;
    x[2] = CUDART_PI_F;
    flags[0] = isinf(x[0]) + 2 * isnan(__int_as_float(0x7fffffff)) + 4 * isfinite(x[2]) + 8 * signbit(x[0]);
}
"""
    x, flags = emu.zeros(3), emu.asarray(np.zeros(1, np.int32))
    mod(src).get_function("k")((1,), (1,), (x, flags))
    np.testing.assert_array_equal(x.get(), np.array([-np.inf, np.inf, np.pi], np.float32))
    assert flags.get()[0] == 15


@pytest.mark.parametrize(("snippet", "what"), [
    ('int v; asm volatile("mov.u32 %0, %%laneid;" : "=r"(v)); x[0] = v;', "%laneid"),
    ('asm volatile("bar.sync 0;");', "inline PTX `bar.sync`"),
    ("cuda::memcpy_async(x, x + 1, 4, pipe);", "cuda::memcpy_async"),
    ("auto g = cooperative_groups::this_grid(); g.sync();", "grid-wide cooperative groups"),
    ("child<<<1, 1>>>(x);", "dynamic parallelism"),
    ("x[0] = tex1Dfetch<float>(t, 0);", "textures"),
])
def test_unsupported_features_need_a_gpu(snippet: str, what: str) -> None:
    src = f'extern "C" __global__ void k(float* x) {{\n    {snippet}\n}}\n'
    with pytest.raises(emu.CompileError) as ei:
        mod(src, filename="lab.cu")
    msg = str(ei.value)
    assert msg.startswith("lab.cu:2:") and what in msg and "needs an NVIDIA GPU" in msg, msg


def test_compile_time_and_cache(tmp_path: object, monkeypatch: pytest.MonkeyPatch,
                                record_property: object) -> None:
    monkeypatch.setenv("MINITORCH_EMU_CACHE", str(tmp_path))
    from minitorch.emu import rt

    rt.lib()  # the runtime library is built once per machine, not per module
    src = TRAPS + f"\n// {time.time()} {os.getpid()}\n"
    t0 = time.perf_counter()
    m = mod(src)
    uncached = time.perf_counter() - t0
    assert not m.cached
    t0 = time.perf_counter()
    m2 = mod(src)
    cached = time.perf_counter() - t0
    assert m2.cached
    record_property("compile_seconds", {"uncached": round(uncached, 3), "cached": round(cached, 4)})  # type: ignore[operator]
    assert cached < 1.0
    assert uncached < 10.0  # typically ~0.3 s with g++ -O2 on a 2-core machine


def test_warnings_do_not_leak_from_correct_kernels() -> None:
    src = r"""
extern "C" __global__ void k(float* x) {
    __shared__ float s[32];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    x[threadIdx.x] = s[31 - threadIdx.x];
}
"""
    out = emu.zeros(32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod(src).get_function("k")((1,), (32,), (out,))
    np.testing.assert_array_equal(out.get(), np.arange(32)[::-1])


def test_build_directories_of_ended_processes_are_swept(tmp_path: object) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from minitorch.emu import compiler

    build = Path(str(tmp_path)) / "build"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = build / f"{'a' * 32}-{ended.stdout.strip()}-123"  # a process that ended while compiling
    alive = build / f"{'b' * 32}-{os.getppid()}"  # a running process's compile
    mine = build / f"{'c' * 32}-{os.getpid()}-7"
    for d in (gone, alive, mine):
        d.mkdir(parents=True)
        (d / "mod.s").write_text("")
    assert compiler.sweep_build_dirs(Path(str(tmp_path))) == 1
    assert not gone.exists() and alive.exists() and mine.exists()
    assert compiler.sweep_build_dirs(Path(str(tmp_path))) == 0  # once per process
