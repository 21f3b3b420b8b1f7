"""Kernels split at their barriers (minitorch/emu/split.py): each CUDA thread a coroutine instead of a fiber.
The same bits as the fibers (the threads run in the same order), the same diagnostics (barrier divergence,
early exits), fibers kept where the kernel does anything else that synchronises, and in check mode, whose race
detectors still find a missing barrier."""

from __future__ import annotations

import re
import uuid
import warnings

import numpy as np
import pytest

from minitorch import emu
from minitorch.emu import compiler, split
from minitorch.emu.specialize import specialize_now

RNG = np.random.default_rng(11)

# A tiled matmul with a 2-D block (TY rows of TX threads, not square) and every kind of line the rewrite
# touches: an early return of a whole block, integer parameters (one assigned, so not made constant), a
# lambda that captures by reference and has a return of its own, an odd number of rows and columns.
TILED = r"""
#define TX 8
#define TY 4
extern "C" __global__ void mm(const float* __restrict__ a, const float* __restrict__ b,
                              float* __restrict__ c, int n, int m, int k, int skip_block) {
    __shared__ float as[TY][TX], bs[TX][TX];
    if ((int)blockIdx.x == skip_block) {
        return;  // a whole block leaves: uniform, no barrier divergence
    }
    int row = blockIdx.y * TY + threadIdx.y, col = blockIdx.x * TX + threadIdx.x;
    float acc = 0.0f;
    auto at = [&](int r, int t) -> float { return r < n && t < k ? a[r * k + t] : 0.0f; };
    for (int t = 0; t < k; t += TX) {
        as[threadIdx.y][threadIdx.x] = at(row, t + threadIdx.x);
        for (int j = threadIdx.y; j < TX; j += TY) {
            bs[j][threadIdx.x] = t + j < k && col < m ? b[(t + j) * m + col] : 0.0f;
        }
        __syncthreads();
        for (int i = 0; i < TX; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
        __syncthreads();
    }
    m -= 0;
    if (row < n && col < m) c[row * m + col] = acc;
}
// the same without its second barrier: a race (the next tile overwrites what slow threads still read)
extern "C" __global__ void mm_racy(const float* a, const float* b, float* c, int n) {
    __shared__ float as[TX][TX], bs[TX][TX];
    int row = blockIdx.y * TX + threadIdx.y, col = blockIdx.x * TX + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n; t += TX) {
        as[threadIdx.y][threadIdx.x] = row < n && t + threadIdx.x < n ? a[row * n + t + threadIdx.x] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = t + threadIdx.y < n && col < n ? b[(t + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TX; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
    }
    if (row < n && col < n) c[row * n + col] = acc;
}
// a barrier in a thread-dependent branch
extern "C" __global__ void diverge(float* y) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    if (threadIdx.x < 5) {
        __syncthreads();  // @first
    } else {
        __syncthreads();  // @second
    }
    y[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
// a thread-dependent number of barriers
extern "C" __global__ void trips(float* y) {
    for (int i = 0; i <= (int)threadIdx.x % 3; ++i) {
        __syncthreads();  // @trips
    }
    y[threadIdx.x] = 1.0f;
}
// threads that leave before the barrier the others wait at: a warning, still correct
extern "C" __global__ void early(float* y, int n) {
    __shared__ float s[64];
    if ((int)threadIdx.x >= n) return;
    s[threadIdx.x] = 2.0f * threadIdx.x;
    __syncthreads();  // @early
    y[threadIdx.x] = s[n - 1 - threadIdx.x];
}
// a fault after a barrier, and printf: reported as on fibers
extern "C" __global__ void late_fault(float* y, const int* at, int n) {
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (threadIdx.x % 16 == 3) printf("thread %d sees %g\n", (int)threadIdx.x, s[63 - threadIdx.x]);
    __syncthreads();
    y[at[threadIdx.x]] = s[threadIdx.x];  // @fault
}
// synchronisation other than __syncthreads() in the kernel: fibers
__device__ float block_sum(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < (int)blockDim.x / 32; ++i) t += scratch[i];
    __syncthreads();
    return t;
}
extern "C" __global__ void sums(const float* x, float* out, int n) {
    __shared__ float scratch[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = block_sum(i < n ? x[i] : 0.0f, scratch);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
extern "C" __global__ void counted(const float* x, int* out) {
    int c = __syncthreads_count(x[threadIdx.x] > 0.0f);
    if (threadIdx.x == 0) out[0] = c;
}
"""


def line_of(marker: str) -> int:
    return next(i for i, ln in enumerate(TILED.splitlines(), 1) if f"// @{marker}" in ln)


def exports(mod: emu.RawModule) -> dict[str, compiler.Export]:
    return {e.name: e for e in mod._variants[False].built.exports}


def build(monkeypatch: pytest.MonkeyPatch, split_on: bool) -> emu.RawModule:
    monkeypatch.setenv("MINITORCH_EMU_SPLIT", "1" if split_on else "0")
    mod = emu.RawModule(code=TILED, filename="split_probe.cu")
    assert exports(mod)["mm"].split == split_on  # what each comparison below compares
    return mod


def test_which_kernels_are_split(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = exports(build(monkeypatch, True))
    assert {n for n, e in ex.items() if e.split} == {"mm", "mm_racy", "diverge", "trips", "early", "late_fault"}
    assert ex["sums"].uses_sync and ex["counted"].uses_sync  # fibers: a shuffle, __syncthreads_count
    assert not any(e.split for e in exports(build(monkeypatch, False)).values())


def test_split_tiled_kernel_gives_the_fibers_bits_at_odd_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    n, m, k = 37, 29, 45
    a = RNG.standard_normal((n, k)).astype(np.float32)
    b = RNG.standard_normal((k, m)).astype(np.float32)
    grid = ((m + 7) // 8, (n + 3) // 4)
    outs = []
    for split_on in (True, False):
        c = emu.asarray(np.full((n, m), -1.0, np.float32))
        build(monkeypatch, split_on).get_function("mm")(grid, (8, 4), (emu.asarray(a), emu.asarray(b), c, np.int32(n),
                                                                       np.int32(m), np.int32(k), np.int32(1)))
        outs.append(emu.asnumpy(c))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    ref[:, 8:16] = -1.0  # block column 1 returned at once
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-4)
    assert outs[0].tobytes() == outs[1].tobytes()


@pytest.mark.parametrize("order", ["reverse", "random"])
def test_split_follows_the_schedule_as_the_fibers_do(monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """The racy kernel's result depends on the order the threads run in: the split code runs them in the fibers'
    order under every schedule, so even its wrong bits are the fibers' bits."""
    n = 21
    a, b = (RNG.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    outs = []
    for split_on in (True, False):
        c = emu.zeros((n, n), np.float32)
        with emu.schedule(order, seed=3):
            build(monkeypatch, split_on).get_function("mm_racy")((3, 3), (8, 8), (emu.asarray(a), emu.asarray(b), c,
                                                                                  np.int32(n)))
        outs.append(emu.asnumpy(c))
    assert outs[0].tobytes() == outs[1].tobytes()


def test_check_mode_runs_the_fibers_and_finds_the_missing_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = build(monkeypatch, True)
    assert exports(mod)["mm_racy"].split
    n = 16
    a, b = (emu.asarray(RNG.standard_normal((n, n)).astype(np.float32)) for _ in range(2))
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        mod.get_function("mm_racy")((2, 2), (8, 8), (a, b, emu.zeros((n, n), np.float32), np.int32(n)))
    assert not any(e.split for e in mod._variants[True].built.exports)
    assert "write-after-read" in str(ei.value) and "mm_racy" in str(ei.value), str(ei.value)


def diagnosis(monkeypatch: pytest.MonkeyPatch, split_on: bool, kernel: str) -> str:
    with pytest.raises(emu.KernelFault, match="barrier divergence") as ei:
        build(monkeypatch, split_on).get_function(kernel)((2,), (64,), (emu.zeros(64, np.float32),))
    assert ei.value.kind == "barrier-divergence"
    return str(ei.value)


@pytest.mark.parametrize("kernel,marker", [("diverge", "second"), ("trips", "trips")])
def test_divergent_barriers_are_diagnosed_as_on_fibers(monkeypatch: pytest.MonkeyPatch, kernel: str,
                                                       marker: str) -> None:
    text = diagnosis(monkeypatch, True, kernel)
    assert text == diagnosis(monkeypatch, False, kernel)
    assert f"line {line_of(marker)}" in text


def test_early_exit_before_a_barrier_warns_as_on_fibers(monkeypatch: pytest.MonkeyPatch) -> None:
    got = []
    for split_on in (True, False):
        y = emu.zeros(64, np.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            build(monkeypatch, split_on).get_function("early")((1,), (64,), (y, np.int32(40)))
        got.append(([str(w.message) for w in caught if issubclass(w.category, emu.BarrierWarning)], emu.asnumpy(y)))
    assert got[0][0] == got[1][0] and len(got[0][0]) == 1 and f"line {line_of('early')}" in got[0][0][0]
    np.testing.assert_array_equal(got[0][1][:40], 2.0 * (39 - np.arange(40)))
    assert got[0][1].tobytes() == got[1][1].tobytes()


def test_faults_and_printf_are_reported_as_on_fibers(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    at = np.arange(64, dtype=np.int32)
    at[37] = 1 << 22  # thread 37 writes far outside y
    got = []
    for split_on in (True, False):
        with pytest.raises(emu.KernelFault) as ei:
            build(monkeypatch, split_on).get_function("late_fault")((1,), (64,), (emu.zeros(64, np.float32),
                                                                                   emu.asarray(at), np.int32(64)))
        # the faulting address depends on where y was placed (it differs between the two runs): compared without it
        got.append((re.sub(r"0x[0-9a-f]+", "0x...", str(ei.value)), capsys.readouterr().out))
    assert got[0] == got[1]
    assert f"split_probe.cu:{line_of('fault')}" in got[0][0] and "thread (37,0,0)" in got[0][0], got[0][0]
    assert got[0][1].splitlines()[0] == "thread 3 sees 60"


def test_kernels_that_keep_their_fibers_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = build(monkeypatch, True)
    x = RNG.standard_normal(300).astype(np.float32)
    out = emu.zeros(3, np.float32)
    mod.get_function("sums")((3,), (128,), (emu.asarray(x), out, np.int32(300)))
    np.testing.assert_allclose(emu.asnumpy(out), np.add.reduceat(x.astype(np.float64), [0, 128, 256]), rtol=1e-5)
    cnt = emu.zeros(1, np.int32)
    mod.get_function("counted")((1,), (64,), (emu.asarray(x[:64]), cnt))
    assert int(emu.asnumpy(cnt)[0]) == int((x[:64] > 0).sum())


def test_specialised_split_kernel_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled again for its integer arguments (specialize.py), the split kernel's parameters are constants:
    the same bits as its generic code."""
    monkeypatch.setenv("MINITORCH_EMU_SPECIALIZE", "1e-9")
    mod = build(monkeypatch, True)
    n, m, k = 19, 23, 17
    a = emu.asarray(RNG.standard_normal((n, k)).astype(np.float32))
    b = emu.asarray(RNG.standard_normal((k, m)).astype(np.float32))
    args = (np.int32(n), np.int32(m), np.int32(k), np.int32(-1))
    consts = tuple((3 + j, 4, int(v)) for j, v in enumerate(args))
    fn = mod.get_function("mm")
    outs = []
    for i in range(5):
        if i == 3:
            specialize_now(timeout=300)
            assert mod.specializer.failed is None, mod.specializer.failed
            assert mod.specializer.lookup(fn.export.index, consts) is not None
        c = emu.zeros((n, m), np.float32)
        fn((3, 5), (8, 4), (a, b, c, *args))
        outs.append(emu.asnumpy(c).tobytes())
    assert len(set(outs)) == 1


SPLIT_ME = r"""
extern "C" __global__ void k(float* y, int n) {
    __shared__ float s[32];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if ((int)threadIdx.x < n) y[threadIdx.x] = s[31 - threadIdx.x];
}
"""


@pytest.mark.parametrize("body", [
    "__syncthreads_count(1);",                          # a barrier that returns a value
    "__syncwarp();",                                    # a warp primitive
    "auto f = [&]() { __syncthreads(); }; f();",        # a barrier inside a lambda
    "struct L { int f() { return 1; } }; (void)L{};",   # a local class (its return is not the kernel's)
    "asm volatile(\"\");",                              # inline assembly
])
def test_refused_kernels_keep_their_fibers(body: str) -> None:
    src = SPLIT_ME.replace("__syncthreads();", "__syncthreads(); " + body)
    stripped = compiler.strip_source(src)
    kernel = compiler.find_functions(stripped, "__global__")[0]
    assert split.plan(compiler.strip_source(SPLIT_ME), compiler.find_functions(compiler.strip_source(SPLIT_ME),
                                                                                 "__global__")[0],
                      set(compiler.SYNC_TOKENS)) is not None
    assert split.plan(stripped, kernel, set(compiler.SYNC_TOKENS)) is None


def test_rewrite_keeps_every_line_where_it_was() -> None:
    info = compiler.scan_source(TILED, "split_probe.cu", split=True)
    assert info.split_names == {"mm", "mm_racy", "diverge", "trips", "early", "late_fault"}
    old, new = TILED.splitlines(), info.text.splitlines()
    assert len(new) == len(old)
    fibers_from = next(i for i, ln in enumerate(old) if "block_sum(float v" in ln)
    for i, (was, now) in enumerate(zip(old, new, strict=True)):
        if "__syncthreads();" in was:
            assert ("co_await __emu_split::barrier" in now) == (i < fibers_from), now


def test_a_rewrite_that_does_not_compile_falls_back_to_fibers(monkeypatch: pytest.MonkeyPatch) -> None:
    real = split.plan

    def broken(stripped: str, f: object, sync: set[str]) -> list | None:
        edits = real(stripped, f, sync)
        return None if edits is None else [*edits, (0, 0, "this does not compile;")]

    monkeypatch.setattr(split, "plan", broken)
    # a source of its own (a comment), so that the compile is not found in the cache
    mod = emu.RawModule(code=SPLIT_ME + f"// {uuid.uuid4()}\n", filename="fallback.cu")
    assert not exports(mod)["k"].split and exports(mod)["k"].uses_sync
    y = emu.zeros(32, np.float32)
    mod.get_function("k")((1,), (32,), (y, np.int32(32)))
    np.testing.assert_array_equal(emu.asnumpy(y), 31 - np.arange(32))


BRACED = r"""
extern "C" __global__ void braced(const float* x, float* y, int n) {
    __shared__ float s[64];
    float acc[2][2] = {{0.0f}};  // a brace initialiser: copied into the loop's lambda all the same
    for (int t = 0; t < n; t += 64) {
        s[threadIdx.x] = t + threadIdx.x < n ? x[t + threadIdx.x] : 0.0f;
        __syncthreads();
        for (int i = 0; i < 64; ++i) {
            acc[i % 2][threadIdx.x % 2] += s[i] * (float)(threadIdx.x + 1);
        }
        __syncthreads();
    }
    y[threadIdx.x] = acc[0][threadIdx.x % 2] - acc[1][threadIdx.x % 2];
}
"""


def test_loops_work_on_copies_of_the_kernels_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The barrier-free loop runs in a lambda on a copy of `acc` (split.py: GCC keeps a coroutine's variables in
    memory that every store may alias), written back after it: the fibers' bits, the NumPy float64 sums."""
    text = compiler.scan_source(BRACED, "braced.cu", split=True).text
    assert "memcpy(&__l_acc, &acc, sizeof(acc))" in text and "__l_acc[i % 2]" in text
    n = 150
    x = RNG.standard_normal(n).astype(np.float32)
    outs = []
    for split_on in ("1", "0"):
        monkeypatch.setenv("MINITORCH_EMU_SPLIT", split_on)
        mod = emu.RawModule(code=BRACED, filename="braced.cu")
        assert exports(mod)["braced"].split == (split_on == "1")
        y = emu.zeros(64, np.float32)
        mod.get_function("braced")((1,), (64,), (emu.asarray(x), y, np.int32(n)))
        outs.append(emu.asnumpy(y))
    pad = np.zeros(192)
    pad[:n] = x
    even, odd = pad.reshape(-1, 2)[:, 0].sum(), pad.reshape(-1, 2)[:, 1].sum()
    np.testing.assert_allclose(outs[0], (even - odd) * np.arange(1, 65), rtol=1e-4, atol=1e-4)
    assert outs[0].tobytes() == outs[1].tobytes()
