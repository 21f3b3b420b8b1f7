"""Adversarial kernels for minitorch.emu.

Each test states a concrete fact that a wrong emulator fails: results are compared with
NumPy references (float64 where arithmetic is involved, exact where it is not), and
diagnostics are checked for the names, coordinates, offsets and source lines they must
contain. Every CUDA source is a small string here; line numbers are found by marker
comments (``// @name``) so the tests do not depend on the layout of the strings.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from minitorch import emu

# ----------------------------------------------------------------------------- helpers


def line_of(src: str, marker: str) -> int:
    """1-based line number of the line carrying ``// @marker`` in ``src``."""
    for i, line in enumerate(src.splitlines(), 1):
        if re.search(rf"//\s*@{re.escape(marker)}\b", line):
            return i
    raise AssertionError(f"marker @{marker} not in source")


def has_line(msg: str, line: int) -> bool:
    """True when ``msg`` cites source line ``line`` (as ``:N``, ``line N`` or ``L N``)."""
    return re.search(rf"(?:line\s*|:|\bL){line}\b", msg) is not None


def has_triple(msg: str, word: str, xyz: tuple[int, int, int]) -> bool:
    """True when ``msg`` names ``word`` (block/thread) with coordinates ``xyz``."""
    x, y, z = xyz
    return re.search(rf"{word}\w*\s*[=:]?\s*\(?\s*{x}\s*,\s*{y}\s*,\s*{z}\s*\)?", msg, re.I) is not None


def module(src: str, **kw: object) -> emu.RawModule:
    return emu.RawModule(code=src, **kw)


@contextmanager
def env(monkeypatch: pytest.MonkeyPatch, **values: str) -> Iterator[None]:
    with monkeypatch.context() as m:
        for k, v in values.items():
            m.setenv(k, v)
        yield


def assert_process_still_works() -> None:
    """After a fault the emulator must keep working: a correct kernel gives correct results."""
    src = r"""
extern "C" __global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""
    x = np.arange(1000, dtype=np.float32)
    dx, dy = emu.asarray(x), emu.zeros(1000, np.float32)
    module(src).get_function("twice")((4,), (256,), (dx, dy, np.int32(1000)))
    emu.synchronize()
    np.testing.assert_array_equal(emu.asnumpy(dy), 2 * x)


# ----------------------------------------------------------------------- barriers


DIVERGENT_SRC = r"""
extern "C" __global__ void split_barrier(float* out) {
    if (threadIdx.x < 16) {
        __syncthreads();  // @low
        out[threadIdx.x] = 1.0f;
    } else {
        __syncthreads();  // @high
        out[threadIdx.x] = 2.0f;
    }
}
"""


def test_divergent_barrier_names_both_call_sites() -> None:
    out = emu.zeros(64, np.float32)
    with pytest.raises(emu.KernelFault) as ei:
        module(DIVERGENT_SRC).get_function("split_barrier")((1,), (64,), (out,))
        emu.synchronize()
    msg = str(ei.value)
    assert "split_barrier" in msg
    assert has_line(msg, line_of(DIVERGENT_SRC, "low")), msg
    assert has_line(msg, line_of(DIVERGENT_SRC, "high")), msg
    assert ei.value.kind == "barrier-divergence" and ei.value.block == (0, 0, 0)
    assert ei.value.line in (line_of(DIVERGENT_SRC, "low"), line_of(DIVERGENT_SRC, "high"))
    assert_process_still_works()


LATE_EXIT_SRC = r"""
extern "C" __global__ void late_exit(float* out) {
    __syncthreads();
    if (threadIdx.x >= 32) return;  // leaves after barrier 1 ...
    __syncthreads();                // @second  ... while the others wait here
    out[threadIdx.x] = 1.0f;
}

extern "C" __global__ void early_exit(float* out) {
    if (threadIdx.x >= 32) return;  // before any barrier: UB that works on GPUs
    __syncthreads();                // @first
    out[threadIdx.x] = 1.0f;
}
"""


def test_exit_after_a_barrier_while_others_wait_is_divergence() -> None:
    out = emu.zeros(64, np.float32)
    with pytest.raises(emu.KernelFault) as ei:
        module(LATE_EXIT_SRC).get_function("late_exit")((1,), (64,), (out,))
    assert ei.value.kind == "barrier-divergence"
    assert has_line(str(ei.value), line_of(LATE_EXIT_SRC, "second")), str(ei.value)


def test_early_return_before_first_barrier_warns_and_still_computes() -> None:
    out = emu.zeros(64, np.float32)
    with pytest.warns(emu.BarrierWarning) as rec:
        module(LATE_EXIT_SRC).get_function("early_exit")((1,), (64,), (out,))
    assert any(has_line(str(w.message), line_of(LATE_EXIT_SRC, "first")) for w in rec)
    np.testing.assert_array_equal(emu.asnumpy(out), np.repeat([1.0, 0.0], 32))


# ------------------------------------------------------------ out-of-bounds accesses


OOB_SRC = r"""
extern "C" __global__ void oob_write(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i];
    if (blockIdx.x == 2 && threadIdx.x == 7) b[n + 3] = 1.0f;  // @write
}

extern "C" __global__ void oob_read(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = a[i];
    if (blockIdx.x == 1 && threadIdx.x == 5) v = a[-2];  // @read
    b[i] = v;
}
"""


def test_out_of_bounds_write_is_reported_precisely() -> None:
    n = 4 * 64
    a, b = emu.asarray(np.ones(n, np.float32)), emu.zeros(n, np.float32)
    with pytest.raises(emu.KernelFault) as ei:
        module(OOB_SRC).get_function("oob_write")((4,), (64,), (a, b, np.int32(n)))
        emu.synchronize()
    msg = str(ei.value)
    assert "oob_write" in msg
    assert has_triple(msg, "block", (2, 0, 0)), msg
    assert has_triple(msg, "thread", (7, 0, 0)), msg
    assert re.search(r"arg\w*\s*(?:index\s*)?#?\s*1\b", msg, re.I), msg  # b is argument 1
    assert str((n + 3) * 4) in msg, msg  # byte offset into b
    assert has_line(msg, line_of(OOB_SRC, "write")), msg
    e = ei.value
    assert (e.kernel, e.block, e.thread, e.argument, e.offset, e.nbytes, e.line) == (
        "oob_write", (2, 0, 0), (7, 0, 0), 1, (n + 3) * 4, n * 4, line_of(OOB_SRC, "write"))
    assert_process_still_works()


def test_out_of_bounds_read_before_start_is_reported_in_check_mode() -> None:
    # Normal mode guards the end of each array only; check mode bounds every access.
    n = 2 * 64
    a, b = emu.asarray(np.ones(n, np.float32)), emu.zeros(n, np.float32)
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        module(OOB_SRC).get_function("oob_read")((2,), (64,), (a, b, np.int32(n)))
        emu.synchronize()
    msg = str(ei.value)
    assert "oob_read" in msg
    assert has_triple(msg, "block", (1, 0, 0)), msg
    assert has_triple(msg, "thread", (5, 0, 0)), msg
    assert re.search(r"arg\w*\s*(?:index\s*)?#?\s*0\b", msg, re.I), msg  # a is argument 0
    assert "-8" in msg, msg  # a[-2]: 8 bytes before the start of a
    assert has_line(msg, line_of(OOB_SRC, "read")), msg
    assert (ei.value.argument, ei.value.offset, ei.value.thread) == (0, -8, (5, 0, 0))
    assert_process_still_works()


PAD_SRC = r"""
extern "C" __global__ void poke(double* a, int idx) { a[idx] = 1.0; }
"""


def test_write_just_past_an_odd_sized_array_is_caught_in_normal_mode() -> None:
    # 1001 doubles = 8008 bytes: the write lands in the padding before the guard page,
    # which the emulator checks after the launch.
    a = emu.zeros(1001, np.float64)
    with pytest.raises(emu.KernelFault) as ei:
        module(PAD_SRC).get_function("poke")((1,), (1,), (a, np.int32(1001)))
    assert (ei.value.argument, ei.value.offset, ei.value.nbytes) == (0, 8008, 8008), str(ei.value)
    assert "8008" in str(ei.value)
    assert_process_still_works()


MISSING_CHECK_SRC = r"""
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 3.0f * x[i];  // @nocheck  (no `if (i < n)`)
}
"""


def test_missing_bounds_check_at_non_multiple_size_faults() -> None:
    n, block = 1000, 256  # 4 blocks = 1024 threads; threads 1000..1023 are out of range
    x, y = emu.asarray(np.ones(n, np.float32)), emu.zeros(n, np.float32)
    with pytest.raises(emu.KernelFault) as ei:
        module(MISSING_CHECK_SRC).get_function("scale")((4,), (block,), (x, y, np.int32(n)))
        emu.synchronize()
    msg = str(ei.value)
    assert "scale" in msg
    assert has_line(msg, line_of(MISSING_CHECK_SRC, "nocheck")), msg
    # The faulting thread must be one of the 24 surplus threads of block 3, and the byte
    # offset must be that thread's own: 4 * (3 * 256 + t).
    m = re.search(r"thread\w*\s*[=:]?\s*\(?\s*(\d+)\s*,\s*0\s*,\s*0", msg, re.I)
    assert m, msg
    t = int(m.group(1))
    assert 232 <= t < 256, msg
    assert has_triple(msg, "block", (3, 0, 0)), msg
    assert str(4 * (3 * 256 + t)) in msg, msg
    assert ei.value.argument in (0, 1) and ei.value.offset == 4 * (3 * 256 + t) and ei.value.nbytes == 4 * n
    assert_process_still_works()


# ------------------------------------------------------------------ check mode


RACY_SRC = r"""
extern "C" __global__ void racy_sum(const float* x, float* out) {
    __shared__ float partial[256];
    int t = threadIdx.x;
    partial[t] = x[blockIdx.x * 256 + t];
    __syncthreads();
    for (int stride = 128; stride > 0; stride /= 2) {
        if (t < stride) {
            float other = partial[t + stride];  // @read
            partial[t] += other;                // @write
        }
        // missing __syncthreads(): the next round reads what this round writes
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}
"""

FIXED_SRC = RACY_SRC.replace(
    "// missing __syncthreads(): the next round reads what this round writes", "__syncthreads();")


def _run_sum(src: str, name: str, x: np.ndarray) -> np.ndarray:
    blocks = x.size // 256
    dx, dout = emu.asarray(x), emu.zeros(blocks, np.float32)
    module(src).get_function(name)((blocks,), (256,), (dx, dout))
    emu.synchronize()
    return emu.asnumpy(dout)


def _diagnostics(run: object) -> str:
    """Run ``run()``; return the text of the KernelFault or the warnings it produced."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run()  # type: ignore[operator]
        except emu.KernelFault as exc:
            return str(exc)
    return "\n".join(str(w.message) for w in caught)


def test_check_mode_reports_race_with_variable_and_both_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(1).uniform(0, 1, 512).astype(np.float32)
    with env(monkeypatch, MINITORCH_EMU_CHECK="1"):
        msg = _diagnostics(lambda: _run_sum(RACY_SRC, "racy_sum", x))
    assert "race" in msg.lower(), msg
    assert "partial" in msg, msg
    assert has_line(msg, line_of(RACY_SRC, "read")), msg
    assert has_line(msg, line_of(RACY_SRC, "write")), msg


def test_race_finding_attributes() -> None:
    x = np.ones(256, np.float32)
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        _run_sum(RACY_SRC, "racy_sum", x)
    lines = {line_of(RACY_SRC, "read"), line_of(RACY_SRC, "write")}
    assert ei.value.findings, str(ei.value)
    for f in ei.value.findings:
        assert f["variable"] == "partial" and f["block"] == (0, 0, 0)
        assert {f["line"], f["other_line"]} == lines, f
        assert f["thread"] != f["other_thread"], f


def test_check_mode_is_quiet_on_the_fixed_reduction(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(2).uniform(0, 1, 1024).astype(np.float32)
    with env(monkeypatch, MINITORCH_EMU_CHECK="1"), warnings.catch_warnings():
        warnings.simplefilter("error")  # any race report would be a false positive
        got = _run_sum(FIXED_SRC, "racy_sum", x)
    ref = x.astype(np.float64).reshape(-1, 256).sum(axis=1)
    np.testing.assert_allclose(got, ref, rtol=1e-5)


HISTOGRAM_SRC = r"""
extern "C" __global__ void histogram(const int* bins_of, int* out, int n) {
    __shared__ int counts[4];
    if (threadIdx.x < 4) counts[threadIdx.x] = 0;  // @zero
    // BARRIER
    for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&counts[bins_of[i]], 1);  // @atomic
    __syncthreads();
    if (threadIdx.x < 4) out[threadIdx.x] = counts[threadIdx.x];
}
"""


def _histogram(src: str) -> np.ndarray:
    bins = np.arange(200, dtype=np.int32) % 4
    out = emu.zeros(4, np.int32)
    module(src).get_function("histogram")((1,), (64,), (emu.asarray(bins), out, np.int32(bins.size)))
    emu.synchronize()
    return emu.asnumpy(out)


def test_check_mode_reports_a_plain_store_racing_another_threads_atomic() -> None:
    """Zeroing an accumulator, then atomicAdd into it with no barrier between: on a GPU another warp's
    atomics can land before the zero does. Atomics among themselves are not a race."""
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        _histogram(HISTOGRAM_SRC)
    assert ei.value.findings, str(ei.value)
    f = ei.value.findings[0]
    assert f["variable"] == "counts", f
    assert {f["line"], f["other_line"]} == {line_of(HISTOGRAM_SRC, "zero"), line_of(HISTOGRAM_SRC, "atomic")}, f


def test_check_mode_is_quiet_on_atomics_after_a_barrier() -> None:
    with emu.check_mode(), warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _histogram(HISTOGRAM_SRC.replace("// BARRIER", "__syncthreads();"))
    np.testing.assert_array_equal(got, [50, 50, 50, 50])


UNINIT_SRC = r"""
extern "C" __global__ void half_init(float* out) {
    __shared__ float stage[64];
    if (threadIdx.x < 32) stage[threadIdx.x] = 1.0f;
    __syncthreads();
    out[blockIdx.x * 64 + threadIdx.x] = stage[63 - threadIdx.x];  // @uninit
}
"""


def test_check_mode_reports_uninitialised_shared_read(monkeypatch: pytest.MonkeyPatch) -> None:
    out = emu.zeros(64, np.float32)
    with env(monkeypatch, MINITORCH_EMU_CHECK="1"):
        msg = _diagnostics(lambda: (module(UNINIT_SRC).get_function("half_init")((1,), (64,), (out,)),
                                    emu.synchronize()))
    assert re.search(r"uninit", msg, re.I), msg
    assert "stage" in msg, msg
    assert has_line(msg, line_of(UNINIT_SRC, "uninit")), msg


def test_uninitialised_shared_memory_reads_nan_in_normal_mode() -> None:
    # Shared memory is poisoned at each block start, so nothing leaks from a previous block
    # and an unwritten float reads as NaN rather than a plausible number.
    out = emu.zeros(128, np.float32)
    module(UNINIT_SRC).get_function("half_init")((2,), (64,), (out,))
    got = emu.asnumpy(out).reshape(2, 64)
    assert np.isnan(got[:, :32]).all()
    np.testing.assert_array_equal(got[:, 32:], 1.0)


SHIFT_SRC = r"""
extern "C" __global__ void shift_left(const float* x, float* y) {
    __shared__ float ring[256];
    int t = threadIdx.x;
    ring[t] = x[t];                     // @store
    // missing __syncthreads()
    y[t] = t > 0 ? ring[t - 1] : 0.0f;  // @load
}
"""


def _shift(monkeypatch: pytest.MonkeyPatch, schedule: str, x: np.ndarray) -> np.ndarray:
    dx, dy = emu.asarray(x), emu.zeros(256, np.float32)
    with env(monkeypatch, MINITORCH_EMU_SCHEDULE=schedule, MINITORCH_EMU_CHECK="0"):
        module(SHIFT_SRC).get_function("shift_left")((1,), (256,), (dx, dy))
        emu.synchronize()
    return emu.asnumpy(dy)


def test_schedule_fuzzing_exposes_missing_barrier_that_forward_order_hides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(3).uniform(1, 2, 256).astype(np.float32)
    expected = np.concatenate([[0.0], x[:-1]]).astype(np.float32)
    # In forward order thread t-1 has stored s[t-1] before thread t loads it: the bug hides.
    np.testing.assert_array_equal(_shift(monkeypatch, "forward", x), expected)
    # In reverse order no thread's neighbour has stored yet: (almost) every value is wrong.
    rev = _shift(monkeypatch, "reverse", x)
    assert np.count_nonzero(rev[1:] != expected[1:]) >= 250
    # A random order puts some thread before its neighbour with overwhelming probability.
    rnd = _shift(monkeypatch, "random", x)
    assert np.count_nonzero(rnd != expected) > 0


def test_fuzz_schedules_raises_on_the_missing_barrier_and_passes_the_fixed_kernel() -> None:
    x = np.random.default_rng(8).uniform(1, 2, 256).astype(np.float32)
    fixed = SHIFT_SRC.replace("// missing __syncthreads()", "__syncthreads();")

    def runner(src: str):
        def run() -> emu.DeviceArray:
            dx, dy = emu.asarray(x), emu.zeros(256, np.float32)
            module(src).get_function("shift_left")((1,), (256,), (dx, dy))
            return dy
        return run

    with pytest.raises(emu.ScheduleMismatch):
        emu.fuzz_schedules(runner(SHIFT_SRC))
    got = emu.fuzz_schedules(runner(fixed))
    np.testing.assert_array_equal(got, np.concatenate([[0.0], x[:-1]]).astype(np.float32))


def test_check_mode_flags_the_missing_barrier_even_in_forward_order(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.ones(256, np.float32)
    dx, dy = emu.asarray(x), emu.zeros(256, np.float32)
    with env(monkeypatch, MINITORCH_EMU_CHECK="1", MINITORCH_EMU_SCHEDULE="forward"):
        msg = _diagnostics(lambda: (module(SHIFT_SRC).get_function("shift_left")((1,), (256,), (dx, dy)),
                                    emu.synchronize()))
    assert "race" in msg.lower() and "ring" in msg, msg
    assert has_line(msg, line_of(SHIFT_SRC, "store")), msg
    assert has_line(msg, line_of(SHIFT_SRC, "load")), msg


# --------------------------------------------------------------- argument packing


FILL_SRC = r"""
extern "C" __global__ void fill(float* out, float value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
"""


def test_python_float_for_float_parameter_is_a_type_error() -> None:
    out = emu.zeros(8, np.float32)
    fn = module(FILL_SRC).get_function("fill")
    with pytest.raises(TypeError) as ei:
        fn((1,), (8,), (out, 0.1, np.int32(8)))
    msg = str(ei.value)
    assert "numpy.float32(x)" in msg, msg
    assert "#1" in msg and "float value" in msg, msg  # names the parameter
    # The right spelling works.
    fn((1,), (8,), (out, np.float32(0.1), np.int32(8)))
    emu.synchronize()
    np.testing.assert_array_equal(emu.asnumpy(out), np.full(8, 0.1, np.float32))


def test_cupy_argument_mode_reproduces_cupys_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    out = emu.zeros(8, np.float32)
    # CuPy packs a Python float as a float64; a `float` parameter reads its first 4 bytes,
    # i.e. the low 32 bits of the double reinterpreted as float32 (little-endian).
    garbage = np.frombuffer(np.float64(0.1).tobytes()[:4], np.float32)[0]
    assert garbage != np.float32(0.1)
    with env(monkeypatch, MINITORCH_EMU_ARGS="cupy"), pytest.warns(emu.ArgumentWarning) as rec:
        module(FILL_SRC).get_function("fill")((1,), (8,), (out, 0.1, np.int32(8)))
        emu.synchronize()
    assert any("float32" in str(w.message) for w in rec), [str(w.message) for w in rec]
    np.testing.assert_array_equal(emu.asnumpy(out).view(np.uint32), np.full(8, garbage).view(np.uint32))


def test_numpy_array_argument_is_a_type_error() -> None:
    fn = module(FILL_SRC).get_function("fill")
    with pytest.raises(TypeError):
        fn((1,), (8,), (np.zeros(8, np.float32), np.float32(1), np.int32(8)))


def test_no_implicit_numpy_conversion() -> None:
    with pytest.raises(TypeError):
        np.asarray(emu.zeros(4, np.float32))


# ------------------------------------------------------------------ language features


TEMPLATE_SRC = r"""
template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template <int K>
__global__ void times_k(int* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] *= K;
}
"""


def test_templates_via_name_expressions() -> None:
    names = ["axpy<float>", "axpy<double>", "times_k<3>", "times_k<-7>"]
    mod = module(TEMPLATE_SRC, name_expressions=names)
    n = 300
    rng = np.random.default_rng(4)
    for name, dt in (("axpy<float>", np.float32), ("axpy<double>", np.float64)):
        x, y = rng.standard_normal(n).astype(dt), rng.standard_normal(n).astype(dt)
        dy = emu.asarray(y)
        mod.get_function(name)((2,), (256,), (dt(1.5), emu.asarray(x), dy, np.int32(n)))
        emu.synchronize()
        got = emu.asnumpy(dy)
        assert got.dtype == dt
        ref = 1.5 * x.astype(np.float64) + y.astype(np.float64)
        # Only double precision reaches 1e-15: proves axpy<double> really ran in double.
        np.testing.assert_allclose(got, ref, rtol=1e-15 if dt is np.float64 else 1e-6, atol=1e-6)
    v = np.arange(-50, 50, dtype=np.int32)
    dv = emu.asarray(v)
    mod.get_function("times_k<3>")((1,), (128,), (dv, np.int32(100)))
    mod.get_function("times_k<-7>")((1,), (128,), (dv, np.int32(100)))
    emu.synchronize()
    np.testing.assert_array_equal(emu.asnumpy(dv), v * -21)


DYNSHARED_SRC = r"""
extern "C" __global__ void reverse_blocks(const float* x, float* y, int* tag) {
    extern __shared__ float tmp[];
    __shared__ int flag[4];  // static shared must not overlap the dynamic array
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    if (t < 4) flag[t] = 1000 + t;
    tmp[t] = x[base + t];
    __syncthreads();
    y[base + t] = tmp[blockDim.x - 1 - t];
    if (t < 4) tag[blockIdx.x * 4 + t] = flag[t];
}
"""


def test_dynamic_shared_memory() -> None:
    block, blocks = 512, 3
    x = np.random.default_rng(5).standard_normal(block * blocks).astype(np.float32)
    dx, dy, tag = emu.asarray(x), emu.zeros(x.size, np.float32), emu.zeros(4 * blocks, np.int32)
    module(DYNSHARED_SRC).get_function("reverse_blocks")(
        (blocks,), (block,), (dx, dy, tag), shared_mem=block * 4)
    emu.synchronize()
    np.testing.assert_array_equal(emu.asnumpy(dy), x.reshape(blocks, block)[:, ::-1].ravel())
    np.testing.assert_array_equal(emu.asnumpy(tag), np.tile(1000 + np.arange(4), blocks))


SHFL_SRC = r"""
extern "C" __global__ void seg_down(const float* x, float* out, int width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int o = width / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o, width);
    out[i] = v;
}

extern "C" __global__ void seg_xor(const float* x, float* out, int width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int m = width / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m, width);
    out[i] = v;
}

extern "C" __global__ void seg_scan(const int* x, int* out, int width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = (threadIdx.x & 31) % width;
    int v = x[i];
    for (int o = 1; o < width; o *= 2) {
        int u = __shfl_up_sync(0xffffffffu, v, o, width);
        if (lane >= o) v += u;
    }
    out[i] = v;
}

extern "C" __global__ void seg_bcast(const int* x, int* out, int src, int width) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = __shfl_sync(0xffffffffu, x[i], src, width);
}
"""


def _shfl_down_reference(x: np.ndarray, width: int) -> np.ndarray:
    """The exact __shfl_down_sync semantics, in float32, segment by segment."""
    v = x.reshape(-1, width).copy()
    o = width // 2
    while o > 0:
        shifted = v.copy()
        shifted[:, : width - o] = v[:, o:]  # lanes past the segment end keep their own value
        v = (v + shifted).astype(np.float32)
        o //= 2
    return v.ravel()


@pytest.fixture(scope="module")
def shfl_mod() -> emu.RawModule:
    return module(SHFL_SRC)


@pytest.mark.parametrize("width", [8, 16])
def test_segmented_shuffles(shfl_mod: emu.RawModule, width: int) -> None:
    n = 256
    rng = np.random.default_rng(width)
    x = rng.uniform(-1, 1, n).astype(np.float32)
    dx, dout = emu.asarray(x), emu.zeros(n, np.float32)
    w = np.int32(width)

    shfl_mod.get_function("seg_down")((2,), (128,), (dx, dout, w))
    emu.synchronize()
    got = emu.asnumpy(dout)
    np.testing.assert_array_equal(got, _shfl_down_reference(x, width))
    seg64 = x.astype(np.float64).reshape(-1, width).sum(axis=1)
    np.testing.assert_allclose(got[::width], seg64, rtol=1e-5, atol=1e-6)

    shfl_mod.get_function("seg_xor")((2,), (128,), (dx, dout, w))
    emu.synchronize()
    np.testing.assert_allclose(emu.asnumpy(dout), np.repeat(seg64, width), rtol=1e-5, atol=1e-6)

    xi = rng.integers(-100, 100, n).astype(np.int32)
    dxi, douti = emu.asarray(xi), emu.zeros(n, np.int32)
    shfl_mod.get_function("seg_scan")((2,), (128,), (dxi, douti, w))
    emu.synchronize()
    np.testing.assert_array_equal(emu.asnumpy(douti), np.cumsum(xi.reshape(-1, width), axis=1).ravel())

    src_lane = width + 3  # taken modulo width, as CUDA does
    shfl_mod.get_function("seg_bcast")((2,), (128,), (dxi, douti, np.int32(src_lane), w))
    emu.synchronize()
    np.testing.assert_array_equal(emu.asnumpy(douti),
                                  np.repeat(xi.reshape(-1, width)[:, src_lane % width], width))


ATOMIC_SRC = r"""
__device__ float atomic_max_float(float* addr, float val) {
    int* ai = (int*)addr;
    int old = *ai, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= val) break;
        old = atomicCAS(ai, assumed, __float_as_int(val));
    } while (assumed != old);
    return __int_as_float(old);
}

extern "C" __global__ void contend(const float* x, int* counter, float* fsum, float* fmax,
                                   int* ticket) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    ticket[i] = atomicAdd(counter, 1);
    atomicAdd(fsum, 1.0f);
    atomic_max_float(fmax, x[i]);
}
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_contended_atomics(workers: int) -> None:
    blocks, block = 256, 256
    n = blocks * block  # 65536 threads on one int, one float and one CAS loop
    x = np.random.default_rng(6).uniform(-1e3, 1e3, n).astype(np.float32)
    counter, fsum = emu.zeros(1, np.int32), emu.zeros(1, np.float32)
    fmax, ticket = emu.asarray(np.array([-np.inf], np.float32)), emu.zeros(n, np.int32)
    with emu.workers(workers):  # 2 workers: blocks really run concurrently on OS threads
        module(ATOMIC_SRC).get_function("contend")(
            (blocks,), (block,), (emu.asarray(x), counter, fsum, fmax, ticket))
    emu.synchronize()
    assert int(emu.asnumpy(counter)[0]) == n
    assert float(emu.asnumpy(fsum)[0]) == float(n)  # exact: n < 2**24
    assert emu.asnumpy(fmax)[0] == x.max()
    # Every thread got a distinct ticket: the read-modify-write really was atomic.
    np.testing.assert_array_equal(np.sort(emu.asnumpy(ticket)), np.arange(n, dtype=np.int32))


BIG_BLOCK_SRC = r"""
extern "C" __global__ void block_sum(const float* x, float* out, int* ids) {
    __shared__ float s[1024];
    int t = threadIdx.x + blockDim.x * threadIdx.y;
    int nt = blockDim.x * blockDim.y;
    int g = blockIdx.x * nt + t;
    ids[g] = g;
    s[t] = x[g];
    __syncthreads();
    for (int stride = nt / 2; stride > 0; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
"""


@pytest.mark.parametrize("block", [(1024, 1, 1), (32, 32, 1)])
def test_1024_thread_blocks(block: tuple[int, int, int]) -> None:
    blocks = 3
    x = np.random.default_rng(7).uniform(0, 1, 1024 * blocks).astype(np.float32)
    out, ids = emu.zeros(blocks, np.float32), emu.zeros(x.size, np.int32)
    module(BIG_BLOCK_SRC).get_function("block_sum")((blocks,), block, (emu.asarray(x), out, ids))
    emu.synchronize()
    np.testing.assert_array_equal(emu.asnumpy(ids), np.arange(x.size))
    np.testing.assert_allclose(emu.asnumpy(out), x.astype(np.float64).reshape(blocks, -1).sum(axis=1),
                               rtol=1e-5)


@pytest.mark.parametrize("block", [(1025, 1, 1), (32, 33, 1), (1, 1, 65)])
def test_oversized_blocks_are_launch_errors(block: tuple[int, int, int]) -> None:
    out, ids = emu.zeros(2048, np.float32), emu.zeros(2048, np.int32)
    fn = module(BIG_BLOCK_SRC).get_function("block_sum")
    with pytest.raises(emu.LaunchError):
        fn((1,), block, (emu.zeros(2048, np.float32), out, ids))
        emu.synchronize()
    assert_process_still_works()


IDS_SRC = r"""
extern "C" __global__ void ids3d(int* out) {
    int bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int nt = blockDim.x * blockDim.y * blockDim.z;
    int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int g = bid * nt + tid;
    int* o = out + 8 * g;
    o[0] = g;
    o[1] = threadIdx.x; o[2] = threadIdx.y; o[3] = threadIdx.z;
    o[4] = blockIdx.x;  o[5] = blockIdx.y;  o[6] = blockIdx.z;
    o[7] = gridDim.x * 1000000 + gridDim.y * 10000 + gridDim.z * 100 + nt;
}
"""


def test_3d_grid_and_3d_blocks() -> None:
    grid, block = (3, 4, 5), (4, 3, 2)
    nb, nt = int(np.prod(grid)), int(np.prod(block))
    out = emu.zeros(8 * nb * nt, np.int32)
    module(IDS_SRC).get_function("ids3d")(grid, block, (out,))
    emu.synchronize()
    got = emu.asnumpy(out).reshape(nb * nt, 8)
    # x varies fastest, then y, then z, for blocks and for threads.
    bz, by, bx = np.meshgrid(*(np.arange(d) for d in grid[::-1]), indexing="ij")
    tz, ty, tx = np.meshgrid(*(np.arange(d) for d in block[::-1]), indexing="ij")
    exp = np.empty((nb, nt, 8), np.int64)
    exp[..., 0] = np.arange(nb * nt).reshape(nb, nt)
    exp[..., 1], exp[..., 2], exp[..., 3] = tx.ravel(), ty.ravel(), tz.ravel()
    exp[..., 4], exp[..., 5], exp[..., 6] = bx.ravel()[:, None], by.ravel()[:, None], bz.ravel()[:, None]
    exp[..., 7] = 3 * 1000000 + 4 * 10000 + 5 * 100 + nt
    np.testing.assert_array_equal(got, exp.reshape(nb * nt, 8))


# ------------------------------------------------------------ errors, asserts, traps


ASSERT_SRC = r"""
#include <cassert>
extern "C" __global__ void checked(const int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) assert(x[i] >= 0);  // @assert
}
"""


def test_device_assert_is_a_fault_naming_the_line() -> None:
    x = np.arange(64, dtype=np.int32)
    x[37] = -1  # block 1, thread 5 with 32-thread blocks
    with pytest.raises(emu.KernelFault) as ei:
        module(ASSERT_SRC).get_function("checked")((2,), (32,), (emu.asarray(x), np.int32(64)))
        emu.synchronize()
    msg = str(ei.value)
    assert "x[i] >= 0" in msg, msg
    assert has_line(msg, line_of(ASSERT_SRC, "assert")), msg
    assert has_triple(msg, "block", (1, 0, 0)) and has_triple(msg, "thread", (5, 0, 0)), msg
    assert_process_still_works()


MISC_FAULT_SRC = r"""
extern "C" __global__ void dyn_oob(float* out, int idx) {
    extern __shared__ float sm[];
    sm[idx] = 1.0f;  // @dyn
    __syncthreads();
    out[0] = sm[0];
}

extern "C" __global__ void divide(int* out, int d) {
    out[threadIdx.x] = 100 / d;  // @div
}

extern "C" __global__ void big_locals(float* out, int n) {
    volatile float local[40000];  // 160 KB of locals per thread
    for (int i = 0; i < n; ++i) local[i] = i;  // @stack
    __syncthreads();
    out[threadIdx.x] = local[n - 1];
}
"""


@pytest.fixture(scope="module")
def misc_mod() -> emu.RawModule:
    return module(MISC_FAULT_SRC)


def test_dynamic_shared_memory_overrun_is_a_fault(misc_mod: emu.RawModule) -> None:
    out = emu.zeros(1, np.float32)
    with pytest.raises(emu.KernelFault) as ei:
        misc_mod.get_function("dyn_oob")((1,), (1,), (out, np.int32(20)), shared_mem=64)
    assert (ei.value.offset, ei.value.nbytes) == (80, 64), str(ei.value)
    assert has_line(str(ei.value), line_of(MISC_FAULT_SRC, "dyn")), str(ei.value)
    misc_mod.get_function("dyn_oob")((1,), (1,), (out, np.int32(15)), shared_mem=64)  # last float: fine


def test_integer_division_by_zero_is_a_fault(misc_mod: emu.RawModule) -> None:
    out = emu.zeros(4, np.int32)
    with pytest.raises(emu.KernelFault) as ei:
        misc_mod.get_function("divide")((1,), (4,), (out, np.int32(0)))
    assert ei.value.kind == "division-by-zero"
    assert has_line(str(ei.value), line_of(MISC_FAULT_SRC, "div")), str(ei.value)
    misc_mod.get_function("divide")((1,), (4,), (out, np.int32(7)))
    np.testing.assert_array_equal(emu.asnumpy(out), 14)


def test_fiber_stack_overflow_is_a_fault_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    # on fibers: split at its barrier (minitorch/emu/split.py), the kernel's variables live in a heap frame
    monkeypatch.setenv("MINITORCH_EMU_SPLIT", "0")
    out = emu.zeros(2, np.float32)
    with pytest.raises(emu.KernelFault) as ei:
        module(MISC_FAULT_SRC).get_function("big_locals")((1,), (2,), (out, np.int32(40000)))
    assert ei.value.kind == "stack-overflow", str(ei.value)
    assert "MINITORCH_EMU_STACK_KB" in str(ei.value)
    assert_process_still_works()


SHARED_OOB_SRC = r"""
extern "C" __global__ void tile_oob(float* out, int rd, int wr) {
    __shared__ float tile[64];
    tile[threadIdx.x] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 0 && wr >= 0) tile[wr] = 5.0f;  // @tile_write
    __syncthreads();
    out[threadIdx.x] = tile[rd >= 0 ? rd : threadIdx.x];  // @tile_read
}
"""


def test_check_mode_reports_static_shared_array_overrun_far_past_the_end() -> None:
    out = emu.zeros(64, np.float32)
    fn = module(SHARED_OOB_SRC).get_function("tile_oob")
    for rd, wr, offset in ((100, -1, 400), (-1, 70, 280)):
        with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
            fn((1,), (64,), (out, np.int32(rd), np.int32(wr)))
        e = ei.value
        assert (e.kind, e.argument_name, e.offset, e.nbytes) == ("out-of-bounds", "tile", offset, 256), str(e)
        assert has_line(str(e), line_of(SHARED_OOB_SRC, "tile_read" if rd >= 0 else "tile_write")), str(e)


# A one-past-the-end access to a static __shared__ array must be reported, and must not corrupt
# the emulator. Static __shared__ variables are thread-local storage of the learner's module, next
# to the runtime's own data; before red zones were added, tile[64]/tile[65] overwrote the runtime's
# context pointer and tile[66..] the heap, aborting the interpreter: so this runs in a child process.
_SHARED_OFF_BY_ONE_CHILD = r"""
import json, sys
import numpy as np
from minitorch import emu
src, check = sys.argv[1], sys.argv[2] == "1"
fn = emu.RawModule(code=src).get_function("tile_oob")
out = emu.zeros(64, np.float32)
report = []
for rd, wr in ((64, -1), (-1, 64), (-1, 65), (-1, 66)):
    try:
        with emu.check_mode(check):
            fn((1,), (64,), (out, np.int32(rd), np.int32(wr)))
        report.append({"rd": rd, "wr": wr, "fault": None})
    except emu.KernelFault as e:
        report.append({"rd": rd, "wr": wr, "fault": e.kind, "name": e.argument_name, "offset": e.offset,
                       "thread": list(e.thread) if e.thread else None, "msg": str(e)})
fn((2,), (64,), (out, np.int32(-1), np.int32(-1)))  # a correct launch afterwards
report.append({"ok": bool((emu.asnumpy(out) == 1.0).all())})
print("REPORT" + json.dumps(report))
"""


def _shared_off_by_one(check: bool) -> tuple[int, str, list[dict]]:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", _SHARED_OFF_BY_ONE_CHILD, SHARED_OOB_SRC, "1" if check else "0"],
                       env=env, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("REPORT")]
    return p.returncode, p.stderr[-2000:], json.loads(lines[-1][6:]) if lines else []


def test_check_mode_reports_one_past_the_end_of_a_shared_array() -> None:
    rc, err, report = _shared_off_by_one(check=True)
    assert rc == 0 and report and report[-1] == {"ok": True}, (rc, err, report)
    for r in report[:-1]:
        assert (r["fault"], r["name"], r["offset"]) == ("out-of-bounds", "tile", 4 * max(r["rd"], r["wr"])), r
        assert r["wr"] < 0 or r["thread"] == [0, 0, 0], r  # the writer, not a bystander


def test_shared_array_off_by_one_write_is_caught_in_normal_mode() -> None:
    rc, err, report = _shared_off_by_one(check=False)
    assert rc == 0 and report and report[-1] == {"ok": True}, (rc, err, report)
    for r in report[:-1]:
        if r["wr"] >= 0:  # writes land in a red zone, checked when the block ends
            assert (r["fault"], r["name"], r["offset"]) == ("out-of-bounds", "tile", 4 * r["wr"]), r
        else:  # a read need not be caught in normal mode, but what is reported must be true
            assert r["fault"] is None or (r["fault"], r["name"]) == ("out-of-bounds", "tile"), r


COMPILE_ERR_SRC = r"""
extern "C" __global__ void broken(float* y) {
    float v = 1.0f;
    y[threadIdx.x] = v + undeclared_name;  // @err
}
"""


def test_compile_error_cites_the_learners_line() -> None:
    with pytest.raises(emu.CompileError) as ei:
        module(COMPILE_ERR_SRC).get_function("broken")
    msg = str(ei.value)
    assert "undeclared_name" in msg, msg
    assert has_line(msg, line_of(COMPILE_ERR_SRC, "err")), msg
