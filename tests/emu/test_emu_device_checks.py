"""Device-memory checks of the emulator: misaligned vector accesses fault in every mode, as on a GPU;
check mode reports races on device (global) memory. Known-bad kernels must be reported, known-good
ones (atomics, grid-stride loops, barrier-separated phases, aligned float4 with a scalar tail) must
stay quiet."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from minitorch import emu

RNG = np.random.default_rng(22)


def line_of(src: str, marker: str) -> int:
    for i, ln in enumerate(src.splitlines(), 1):
        if f"// @{marker}" in ln:
            return i
    raise AssertionError(marker)


# ------------------------------------------------------------------------------ misaligned accesses
VEC = r"""
#include <cuda_fp16.h>
template <class V>
__global__ void load_at(const float* x, float* out, int offset) {
    V v = *reinterpret_cast<const V*>(x + offset);  // @load
    memcpy(out, &v, sizeof(V));
}
template <class V>
__global__ void store_at(const float* x, float* out, int offset) {
    V v;
    memcpy(&v, x, sizeof(V));
    *reinterpret_cast<V*>(out + offset) = v;  // @store
}
extern "C" __global__ void ldg4(const float* x, float* out, int offset) {
    float4 v = __ldg(reinterpret_cast<const float4*>(x + offset));  // @ldg
    out[0] = v.x + v.y + v.z + v.w;
}
"""
VEC_TYPES = {"float2": 8, "float4": 16, "int2": 8, "int4": 16, "uint4": 16, "double2": 16, "half2": 4,
             "longlong2": 16, "short4": 8}


def _vec_module() -> emu.RawModule:
    exprs = [f"{f}<{t}>" for t in VEC_TYPES for f in ("load_at", "store_at")]
    return emu.RawModule(code=VEC, name_expressions=exprs, filename="vec.cu")


@pytest.mark.parametrize("op", ["load", "store"])
def test_misaligned_vector_access_faults_for_every_vector_type(op: str) -> None:
    m = _vec_module()
    x = emu.asarray(np.arange(64, dtype=np.float32))
    for typ, size in VEC_TYPES.items():
        k = m.get_function(f"{op}_at<{typ}>")
        out = emu.zeros(64)
        k((1,), (1,), (x, out, np.int32(size // 4)))  # aligned: runs
        bad = 1 if size > 4 else None
        if bad is None:  # half2 (4 bytes) is misaligned only at an odd half: two bytes in
            continue
        with pytest.raises(emu.KernelFault) as ei:
            k((1,), (1,), (x, out, np.int32(bad)))
        e = ei.value
        msg = str(e)
        assert e.kind == "misaligned", msg
        assert msg.startswith("cudaErrorMisalignedAddress"), msg
        assert f"`{typ}`" in msg and f"{size}-byte-aligned" in msg, msg
        assert e.line == line_of(VEC, op) and e.file == "vec.cu", msg
        assert e.thread == (0, 0, 0) and e.block == (0, 0, 0)
        arg = 0 if op == "load" else 1
        assert e.argument == arg and e.argument_name == ("x" if op == "load" else "out"), msg
        assert e.offset == 4 and "element 1" in msg, msg
        # a struct copy binds a reference to the source (UBSan's check kind), reported as an access
        assert ("store to" if op == "store" else "access to") in msg, msg


def test_misaligned_half2_and_ldg_name_the_learners_line() -> None:
    src = r"""
#include <cuda_fp16.h>
extern "C" __global__ void h2(const __half* x, float* out) {
    __half2 v = *reinterpret_cast<const __half2*>(x + 2 * threadIdx.x + 1);  // @h2
    out[threadIdx.x] = __low2float(v) + __high2float(v);
}
"""
    m = emu.RawModule(code=src, filename="h2.cu")
    x = emu.asarray(np.arange(40, dtype=np.float16))
    with pytest.raises(emu.KernelFault) as ei:
        m.get_function("h2")((1,), (8,), (x, emu.zeros(8)))
    assert ei.value.kind == "misaligned" and ei.value.line == line_of(src, "h2"), str(ei.value)
    assert "element 1" in str(ei.value) and ei.value.argument_name == "x"
    m = emu.RawModule(code=VEC, name_expressions=["load_at<float4>"], filename="vec.cu")
    with pytest.raises(emu.KernelFault) as ei:
        m.get_function("ldg4")((1,), (1,), (emu.asarray(np.ones(16, np.float32)), emu.zeros(1), np.int32(2)))
    assert ei.value.line == line_of(VEC, "ldg") and ei.value.file == "vec.cu", str(ei.value)


def test_misaligned_access_faults_in_check_mode_too() -> None:
    m = emu.RawModule(code=VEC, name_expressions=["load_at<float4>"], filename="vec.cu")
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        m.get_function("load_at<float4>")((1,), (1,), (emu.asarray(np.ones(16, np.float32)), emu.zeros(4),
                                                       np.int32(3)))
    assert ei.value.kind == "misaligned" and "element 3" in str(ei.value), str(ei.value)


SCALAR_AND_WIDE = r"""
#define TILE 4
__device__ float at(const float* x, int i) { return x[i]; }
__device__ float4 load4(const float* x, int i) { return *reinterpret_cast<const float4*>(x + i); }
__device__ float sum4(const float* x, int i) { float4 v = load4(x, i); return v.x + v.y + v.z + v.w; }
extern "C" __global__ void scalar(const float* x, float* out, int offset_bytes) {
    float acc[TILE] = {};
    for (int k = 0; k < TILE; ++k) acc[k] += at(x, k) + min(k, 2);
    out[0] = acc[0] + *reinterpret_cast<const float*>(reinterpret_cast<const char*>(x) + offset_bytes);  // @sc
}
extern "C" __global__ void wide(const float* x, float* out, int i) { out[0] = sum4(x, i); }  // @wide
extern "C" __global__ void wide_by_callee(const float* x, float* out, int i) { out[0] = load4(x, i).x; }
template <class T> __global__ void any(const T* x, T* out) { out[0] = x[0]; }
template <int N> __global__ void unrolled(const float* x, float* out) { out[0] = x[N]; }
"""


def test_only_functions_that_cannot_make_a_wide_access_lose_the_scalar_alignment_check() -> None:
    from minitorch.emu import compiler

    out = compiler.without_scalar_alignment_checks(SCALAR_AND_WIDE, compiler.strip_source(SCALAR_AND_WIDE))
    assert out.count("\n") == SCALAR_AND_WIDE.count("\n")  # the learner's line numbers stay
    exempt = {ln.split("(")[-2].split()[-1] for ln in out.splitlines() if "no_sanitize" in ln}
    assert exempt == {"at", "scalar", "unrolled"}, exempt
    # a wide name outside the functions (here a typedef) could reach any of them: nothing is exempt
    src = "typedef float4 vec;\n" + SCALAR_AND_WIDE
    assert compiler.without_scalar_alignment_checks(src, compiler.strip_source(src)) == src


def test_a_misaligned_vector_still_faults_and_a_misaligned_scalar_faults_in_check_mode() -> None:
    m = emu.RawModule(code=SCALAR_AND_WIDE, filename="sw.cu")
    x = emu.asarray(np.arange(16, dtype=np.float32))
    with pytest.raises(emu.KernelFault) as ei:
        m.get_function("wide")((1,), (1,), (x, emu.zeros(1), np.int32(1)))
    assert ei.value.kind == "misaligned" and "`float4`" in str(ei.value), str(ei.value)
    assert ei.value.line == line_of(SCALAR_AND_WIDE, "wide") or ei.value.file == "sw.cu", str(ei.value)
    with pytest.raises(emu.KernelFault) as ei:
        m.get_function("wide_by_callee")((1,), (1,), (x, emu.zeros(1), np.int32(2)))
    assert ei.value.kind == "misaligned", str(ei.value)
    out = emu.zeros(1)
    m.get_function("scalar")((1,), (1,), (x, out, np.int32(8)))
    assert out.get()[0] == 2.0
    m.get_function("scalar")((1,), (1,), (x, out, np.int32(2)))  # a float two bytes in: unchecked here
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        m.get_function("scalar")((1,), (1,), (x, out, np.int32(2)))
    assert ei.value.kind == "misaligned" and ei.value.line == line_of(SCALAR_AND_WIDE, "sc"), str(ei.value)


ALIGNED_TAIL = r"""
// float4 over the multiple-of-4 prefix of each row, scalars for the rest; rows start aligned only
// when the width is a multiple of 4, so other widths take the scalar path for the whole row.
extern "C" __global__ void scale_rows(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    int vec = (cols % 4 == 0) ? cols / 4 : 0;
    for (int i = threadIdx.x; i < vec; i += blockDim.x) {
        float4 v = reinterpret_cast<const float4*>(xr)[i];
        v.x *= 2.0f; v.y *= 2.0f; v.z *= 2.0f; v.w *= 2.0f;
        reinterpret_cast<float4*>(yr)[i] = v;
    }
    for (int i = 4 * vec + threadIdx.x; i < cols; i += blockDim.x) yr[i] = 2.0f * xr[i];
}
extern "C" __global__ void scale_flat(const float* x, float* y, int n) {
    int n4 = n / 4;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += blockDim.x * gridDim.x) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x *= 2.0f; v.y *= 2.0f; v.z *= 2.0f; v.w *= 2.0f;
        reinterpret_cast<float4*>(y)[i] = v;
    }
    int t = 4 * n4 + blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) y[t] = 2.0f * x[t];
}
"""


@pytest.mark.parametrize("check", [False, True])
def test_aligned_float4_with_a_scalar_tail_stays_quiet(check: bool) -> None:
    m = emu.RawModule(code=ALIGNED_TAIL, filename="tail.cu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with emu.check_mode(check):
            for rows, cols in ((3, 8), (5, 7), (2, 13), (4, 1)):
                x = RNG.standard_normal((rows, cols)).astype(np.float32)
                y = emu.zeros(rows * cols)
                m.get_function("scale_rows")((rows,), (32,), (emu.asarray(x), y, np.int32(rows), np.int32(cols)))
                np.testing.assert_array_equal(y.get().reshape(rows, cols), 2 * x)
            for n in (1, 4, 1001, 4099):
                x = RNG.standard_normal(n).astype(np.float32)
                y = emu.zeros(n)
                m.get_function("scale_flat")((3,), (64,), (emu.asarray(x), y, np.int32(n)))
                np.testing.assert_array_equal(y.get(), 2 * x)


# ------------------------------------------------------------------------------ device-memory races
RACES = r"""
extern "C" __global__ void histogram(const int* idx, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[idx[i]] += 1.0f;  // @hist
}
extern "C" __global__ void histogram_atomic(const int* idx, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&out[idx[i]], 1.0f);
}
extern "C" __global__ void last_block_wins(float* out) {
    if (threadIdx.x == 0) out[3] = (float)blockIdx.x;  // @cross
}
extern "C" __global__ void lanes_write_one(int* out) {
    out[1] = threadIdx.x;  // @lanes
}
extern "C" __global__ void set_flag(int* flag) {
    flag[2] = 1;  // @flag
}
extern "C" __global__ void zero_then_add(float* total, const float* x) {
    if (threadIdx.x == 0) total[0] = 0.0f;  // @zero
    atomicAdd(total, x[threadIdx.x]);  // @add
}
extern "C" __global__ void fenced_sum(const float* x, float* partial, unsigned* ticket, float* out) {
    __shared__ bool last;
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = x[blockIdx.x];  // @partial
        __threadfence();
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        float s = 0.0f;
        for (int b = 0; b < gridDim.x; b++) s += partial[b];  // @gather
        *out = s;
    }
}
extern "C" __global__ void shift_in_place(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n) x[i] = x[i - 1] + 1.0f;  // @shift
}
"""
GOOD = r"""
extern "C" __global__ void grid_stride(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] += 2.0f * x[i];
}
extern "C" __global__ void phases(const float* x, float* buf, float* y, int n) {
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    if (base + t < n) buf[base + t] = x[base + t];
    __syncthreads();
    int src = base + (int)blockDim.x - 1 - t;
    if (base + t < n && src < n) y[base + t] = buf[src];
    __syncthreads();
    if (base + t < n) buf[base + t] = 0.0f;
}
extern "C" __global__ void bytes(const float* x, unsigned char* pos, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) pos[i] = x[i] > 0.0f;
}
extern "C" __global__ void warp_then_lane0(float* out) {
    int lane = threadIdx.x % 32;
    out[threadIdx.x] = (float)lane;
    __syncwarp();
    if (lane == 0) {
        float s = 0.0f;
        for (int k = 0; k < 32; k++) s += out[threadIdx.x + k];
        out[threadIdx.x] = s;
    }
}
"""


def _races() -> emu.RawModule:
    return emu.RawModule(code=RACES, filename="races.cu")


def test_plain_add_histogram_runs_silently_without_check_mode_and_is_a_race_in_check_mode() -> None:
    k = _races().get_function("histogram")
    n = 16 * 256
    idx = emu.asarray(np.zeros(n, np.int32))
    out = emu.zeros(4)
    k((16,), (256,), (idx, out, np.int32(n)))
    assert out.get()[0] == n  # the emulator runs threads one after the other: no update is lost
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        k((16,), (256,), (idx, emu.zeros(4), np.int32(n)))
    e, msg = ei.value, str(ei.value)
    assert "device-memory race (read-after-write) on `out[0]` (argument #1)" in msg, msg
    first = e.findings[0]
    assert first["line"] == first["other_line"] == line_of(RACES, "hist") and first["file"] == "races.cu", first
    assert first["space"] == "device" and first["variable"] == "out[0]"
    assert first["thread"] == (1, 0, 0) and first["other_thread"] == (0, 0, 0), first
    assert first["block"] == first["other_block"] == (0, 0, 0)
    assert "atomicAdd" in msg and "thread (1,0,0) of block (0,0,0)" in msg, msg


def test_writes_of_different_blocks_and_of_lanes_of_one_warp_race() -> None:
    m = _races()
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        m.get_function("last_block_wins")((3,), (32,), (emu.zeros(8),))
    f = ei.value.findings[0]
    assert f["kind"] == "write-after-write" and f["variable"] == "out[3]", str(ei.value)
    assert f["other_block"] == (0, 0, 0) and f["block"] == (1, 0, 0) and f["line"] == line_of(RACES, "cross")
    assert "threads of different blocks are never ordered within a launch" in str(ei.value)
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        m.get_function("lanes_write_one")((1,), (32,), (emu.zeros(4, np.int32),))
    f = ei.value.findings[0]
    assert f["variable"] == "out[1]" and f["thread"] == (1, 0, 0) and f["other_thread"] == (0, 0, 0), str(ei.value)


def test_every_thread_writing_the_same_flag_is_only_a_warning() -> None:
    flag = emu.zeros(4, np.int32)
    with emu.check_mode(), pytest.warns(emu.RaceWarning, match=r"flag\[2\].*the same value"):
        _races().get_function("set_flag")((2,), (64,), (flag,))
    assert flag.get()[2] == 1


def test_a_plain_store_racing_with_atomics_is_reported() -> None:
    x = emu.asarray(np.ones(64, np.float32))
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        _races().get_function("zero_then_add")((1,), (64,), (emu.zeros(1), x))
    msg = str(ei.value)
    assert "updates it atomically" in msg and "`total[0]`" in msg, msg
    assert {ei.value.findings[0]["line"], ei.value.findings[0]["other_line"]} == {line_of(RACES, "zero"),
                                                                                  line_of(RACES, "add")}


def test_threadfence_does_not_order_plain_accesses_of_different_blocks() -> None:
    x = emu.asarray(np.arange(4, dtype=np.float32))
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        _races().get_function("fenced_sum")((4,), (32,), (x, emu.zeros(4), emu.zeros(1, np.uint32), emu.zeros(1)))
    msg = str(ei.value)
    f = ei.value.findings[0]
    assert f["kind"] == "read-after-write" and f["line"] == line_of(RACES, "gather"), msg
    assert f["other_line"] == line_of(RACES, "partial") and "__threadfence()" in msg and "partial[" in msg, msg


def test_reading_a_neighbour_that_another_thread_writes_is_a_race() -> None:
    with emu.check_mode(), pytest.raises(emu.KernelFault) as ei:
        _races().get_function("shift_in_place")((2,), (64,), (emu.zeros(100), np.int32(100)))
    assert ei.value.findings[0]["line"] == line_of(RACES, "shift"), str(ei.value)


def test_correct_kernels_stay_quiet_in_check_mode() -> None:
    races, good = _races(), emu.RawModule(code=GOOD, filename="good.cu")
    n = 16 * 256
    with warnings.catch_warnings(), emu.check_mode():
        warnings.simplefilter("error")
        out = emu.zeros(4)
        races.get_function("histogram_atomic")((16,), (256,), (emu.asarray(np.zeros(n, np.int32)), out, np.int32(n)))
        assert out.get()[0] == n
        x = RNG.standard_normal(1000).astype(np.float32)
        y = emu.zeros(1000)
        good.get_function("grid_stride")((3,), (64,), (emu.asarray(x), y, np.int32(1000)))
        np.testing.assert_array_equal(y.get(), 2 * x)
        buf, y = emu.zeros(200), emu.zeros(200)
        good.get_function("phases")((4,), (64,), (emu.asarray(x[:200]), buf, y, np.int32(200)))
        assert y.get()[0] == x[63] and y.get()[64] == x[127]
        pos = emu.zeros(333, np.uint8)
        good.get_function("bytes")((2,), (256,), (emu.asarray(x[:333]), pos, np.int32(333)))
        np.testing.assert_array_equal(pos.get(), x[:333] > 0)
        out = emu.zeros(64)
        good.get_function("warp_then_lane0")((1,), (64,), (out,))
        assert out.get()[0] == sum(range(32))


def _view_one_float_in(n: int) -> emu.DeviceArray:
    """n floats starting 4 bytes past a 16-byte boundary (a parameter inside a larger buffer)."""
    from minitorch.emu.memory import DeviceArray

    whole = emu.zeros(n + 1)
    return DeviceArray((n,), np.float32, _buffer=whole._buf, _offset=whole._offset + 4)


def test_init_store_without_its_alignment_check_faults_on_an_unaligned_view() -> None:
    """The reference philox_uniform (Phase 5 init.cu) stores a float4 only where `out` is 16-byte aligned; without
    that check, a draw into an array that starts 4 bytes in is a misaligned store, as on a GPU."""
    from tests.solution_files import solution_files

    good = solution_files("phase5_fast.ipynb")["init.cu"]
    check = "if (i + 3 < n && ((unsigned long long)out & 15) == 0) {"
    assert check in good
    args = (np.uint64(7), np.uint64(0), np.float32(1.0), np.int64(1001))
    out = _view_one_float_in(1001)
    emu.RawModule(code=good, filename="init.cu").get_function("philox_uniform")((4,), (64,), (out, *args))
    from minitorch import philox

    expected = 2 * philox.uniform(1001, 7, 0).astype(np.float64) - 1  # all written, by the scalar path
    np.testing.assert_allclose(out.get(), expected, rtol=1e-6, atol=1e-7)
    bad = emu.RawModule(code=good.replace(check, "if (i + 3 < n) {"), filename="init.cu")
    with pytest.raises(emu.KernelFault) as ei:
        bad.get_function("philox_uniform")((4,), (64,), (_view_one_float_in(1001), *args))
    e = ei.value
    assert e.kind == "misaligned" and e.argument_name == "out" and "`float4` store to" in str(e), str(e)
    assert e.file == "init.cu" and "*reinterpret_cast<float4*>(out + i) = v;" in good.splitlines()[e.line - 1]
