"""checks.assert_computed_on_device: a result written by the launcher from the host after a launch is
told from one its kernels computed (replaying the recorded launches into fresh buffers), and a launcher
that copies between host and device at all is refused (the call is captured into a graph), even when the
host's result equals the kernel's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from grader import checks
from minitorch import backend, kernels

SOURCE = r'''
extern "C" __global__ void twice(const float* x, float* out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = 2.0f * x[i];
}
extern "C" __global__ void partial_sums(const float* x, float* partial, long long n) {
    __shared__ float s[64];
    float acc = 0.0f;
    for (long long i = blockIdx.x * 64LL + threadIdx.x; i < n; i += 64LL * gridDim.x) acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) { float t = 0.0f; for (int k = 0; k < 64; ++k) t += s[k]; partial[blockIdx.x] = t; }
}
extern "C" __global__ void fill_value(float* out, float v, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = v;
}
extern "C" __global__ void copy(const float* src, float* dst, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
extern "C" __global__ void warp_slots(const float* x, float* total, long long n) {
    __shared__ float slots[8];  // one a warp of a 256-thread block: read all 8 whatever the block
    float s = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        s += x[i];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) { float t = 0.0f; for (int k = 0; k < 8; ++k) t += slots[k]; atomicAdd(total, t); }
}
extern "C" __global__ void decay(float* p, const float* g, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] -= 0.5f * g[i];
}
'''


@pytest.fixture
def emu_kernels(workspace):
    previous = minitorch.get_device()
    minitorch.set_device("emu")
    kernels.write_source("host_writes.cu", SOURCE)
    yield lambda name: kernels.load_kernel("host_writes.cu", name)
    minitorch.set_device(previous)


def test_an_honest_launcher_passes(emu_kernels):
    x, out = backend.asarray(np.arange(100, dtype=np.float32)), checks.poison(100)
    checks.assert_computed_on_device("twice", lambda: emu_kernels("twice")((2,), (64,), (x, out, np.int64(100))),
                                     inputs=(x,), outputs=(out,))


def test_a_launch_then_a_host_write_is_caught(emu_kernels):
    x, out = backend.asarray(np.arange(100, dtype=np.float32)), checks.poison(100)

    def cheat():
        emu_kernels("twice")((1,), (32,), (x, out, np.int64(1)))  # a launch, to satisfy the launch count
        out.set(2 * np.arange(100, dtype=np.float32))  # the answer, from NumPy

    with pytest.raises(checks.GradeError, match="copied data between the host and the device"):
        checks.assert_computed_on_device("twice", cheat, inputs=(x,), outputs=(out,))


HOST_COPY = "twice: the launcher copied data between the host and the device during the call"


def test_a_host_result_equal_to_the_kernels_is_caught(emu_kernels):
    """The whole kernel runs, then the host writes the very values it computed: no comparison of values can
    tell them apart (a NumPy mean of a kernel's per-row losses equals its own to float32); the copy is refused."""
    host = np.arange(100, dtype=np.float32)
    x, out = backend.asarray(host), checks.poison(100)

    def overwrite():
        emu_kernels("twice")((2,), (64,), (x, out, np.int64(100)))
        out.set(2 * host)  # bit for bit what the kernel wrote

    with pytest.raises(checks.GradeError, match=HOST_COPY) as err:
        checks.assert_computed_on_device("twice", overwrite, inputs=(x,), outputs=(out,))
    assert "cudaError" not in str(err.value)  # the report would read CUDA's error code as a crash


def test_a_result_read_back_and_passed_to_a_kernel_is_caught(emu_kernels):
    """The input read back, the answer computed on the host and handed to a kernel of the learner's own as an
    argument (a fill of the host's sum): replaying the launch writes the same frozen value again."""
    x, out = backend.asarray(np.ones(1000, np.float32)), checks.poison(1)

    def host_sum():
        total = np.float32(checks.to_host(x).astype(np.float64).sum())
        emu_kernels("fill_value")((1,), (32,), (out, total, np.int64(1)))

    with pytest.raises(checks.GradeError, match="two-pass sum: the launcher copied data between the host and the device"):
        checks.assert_computed_on_device("two-pass sum", host_sum, inputs=(x,), outputs=(out,))


def test_asarray_of_a_host_result_copied_by_a_kernel_is_caught(emu_kernels):
    host = np.arange(100, dtype=np.float32)
    x, out = backend.asarray(host), checks.poison(100)

    def staged():
        answer = backend.asarray(2 * checks.to_host(x))  # computed on the host, copied in ...
        emu_kernels("copy")((1,), (64,), (answer, out, np.int64(100)))  # ... and moved by a kernel

    with pytest.raises(checks.GradeError, match=HOST_COPY):
        checks.assert_computed_on_device("twice", staged, inputs=(x,), outputs=(out,))


def test_run_without_host_transfers_makes_the_call_once(emu_kernels):
    """The capture is a dry run: its launches are neither counted nor recorded (a one-pass sum must not look
    two-pass), and the call is then made once, for real."""
    x, out = backend.asarray(np.arange(10, dtype=np.float32)), checks.poison(10)

    def honest():
        emu_kernels("twice")((1,), (32,), (x, out, np.int64(10)))
        return "done"

    kernels.reset_launch_counts()
    with kernels.recording() as launches:
        assert checks.run_without_host_transfers("twice", honest) == "done"
    assert len(launches) == 1 and kernels.launch_count("host_writes.cu", "twice") == 1
    np.testing.assert_array_equal(checks.to_host(out), 2 * np.arange(10, dtype=np.float32))


def test_a_fault_is_reported_at_its_own_launch_naming_the_kernel(emu_kernels):
    x, out = backend.asarray(np.ones(10, np.float32)), checks.poison(10)
    with pytest.raises(checks.GradeError, match=r"out-of-bounds memory access:\n  kernel `twice` from host_writes.cu"):
        checks.run_without_host_transfers("twice", lambda: emu_kernels("twice")((1,), (64,), (x, out, np.int64(40))))


def test_scratch_buffers_and_second_passes_replay(emu_kernels):
    x, out = backend.asarray(np.ones(1000, np.float32)), checks.poison(1)

    def two_pass():
        partial = backend.empty((4,))
        emu_kernels("partial_sums")((4,), (64,), (x, partial, np.int64(1000)))
        emu_kernels("partial_sums")((1,), (64,), (partial, out, np.int64(4)))

    checks.assert_computed_on_device("two-pass sum", two_pass, inputs=(x,), outputs=(out,))
    assert checks.to_host(out)[0] == 1000


def test_in_place_updates_replay_from_the_values_before_the_call(emu_kernels):
    p, g = backend.asarray(np.ones(50, np.float32)), backend.asarray(np.full(50, 4, np.float32))
    checks.assert_computed_on_device("decay", lambda: emu_kernels("decay")((1,), (64,), (p, g, np.int64(50))),
                                     inputs=(g,), in_place=(p,))
    np.testing.assert_array_equal(checks.to_host(p), -np.ones(50, np.float32))


def test_no_launch_at_all_is_caught(emu_kernels):
    out = checks.poison(3)
    with pytest.raises(checks.GradeError, match="no kernel launch was recorded"):
        checks.assert_computed_on_device("nothing", lambda: out.set(np.zeros(3, np.float32)), outputs=(out,))


def test_a_launcher_of_other_arrays_only_is_caught(emu_kernels):
    """Kernels launched, but the output written another way (here: never): named as such."""
    x, out = backend.asarray(np.ones(10, np.float32)), checks.poison(10)
    scratch = backend.zeros(10)
    with pytest.raises(checks.GradeError, match="passed to none of your kernels"):
        checks.assert_computed_on_device("twice", lambda: emu_kernels("twice")((1,), (32,), (x, scratch, np.int64(10))),
                                         inputs=(x,), outputs=(out,))


def test_check_mode_names_the_shared_slots_no_warp_wrote(emu_kernels):
    """A failed value check on the emulator: re-running the test's launches in check mode finds the read of a
    shared slot no warp wrote (a 64-thread block has 2 warps, the kernel reads 8 slots), and the report's hint
    then follows that finding, not the failing test's own advice."""
    from grader.tests_step import fault_hint

    x = backend.asarray(np.ones(1000, np.float32))
    with kernels.recording() as launches:
        emu_kernels("twice")((1,), (64,), (x, backend.zeros(1000), np.int64(1000)))  # honest: nothing found
        emu_kernels("warp_slots")((3,), (64,), (x, backend.zeros(1), np.int64(1000)))
    finding = checks.check_mode_finding(launches)
    assert finding is not None and finding.startswith(checks.CHECK_MODE_SOURCE), finding
    assert "`warp_slots` (host_writes.cu, grid (3,), block (64,))" in finding, finding
    assert "read of uninitialised shared memory:" in finding and "`slots`" in finding, finding
    assert "blockDim.x / 32" in fault_hint("sum: got nan, expected 1000.0\n  " + finding)


def test_a_check_mode_note_never_reads_as_a_crash(emu_kernels):
    """An out-of-bounds read found by check mode: the note leaves out the emulator's CUDA error code, which the
    report would take for a crash (and the plugin for a poisoned CUDA context)."""
    from grader.pytest_plugin import POISONED_CONTEXT
    from grader.tests_step import _classify_failure

    x = backend.asarray(np.ones(10, np.float32))
    with kernels.recording() as launches:
        emu_kernels("twice")((1,), (32,), (x, backend.zeros(12), np.int64(12)))  # reads x[10], x[11]
    finding = checks.check_mode_finding(launches)
    assert finding is not None and "out-of-bounds" in finding, finding
    assert _classify_failure("values differ\n  " + finding) == "FAIL" and not POISONED_CONTEXT.search(finding)


def test_check_mode_in_a_subprocess_finds_the_same(emu_kernels):
    """On a GPU the launches run again on the emulator in a subprocess, from copies of their arrays (here: the
    same path taken from the emulator)."""
    x = backend.asarray(np.ones(1000, np.float32))
    with kernels.recording() as launches:
        emu_kernels("warp_slots")((3,), (64,), (x, backend.zeros(1), np.int64(1000)))
    finding = checks.check_mode_finding(launches, in_process=False)
    assert finding is not None and "read of uninitialised shared memory:" in finding, finding
    assert "host_writes.cu:" in finding, finding  # the line of the read
    with kernels.recording() as launches:
        emu_kernels("warp_slots")((3,), (256,), (x, backend.zeros(1), np.int64(1000)))
    assert checks.check_mode_finding(launches, in_process=False) is None


def test_check_mode_finds_nothing_in_correct_launches(emu_kernels):
    x = backend.asarray(np.ones(1000, np.float32))
    with kernels.recording() as launches:
        emu_kernels("warp_slots")((3,), (256,), (x, backend.zeros(1), np.int64(1000)))  # 8 warps: every slot
    assert checks.check_mode_finding(launches) is None
    assert checks.check_mode_finding([]) is None


def test_a_host_copy_gets_its_own_hint_whatever_the_test_advises(emu_kernels):
    """The evidence is the copy: the report's hint says so, not the failing test's advice about values."""
    from grader.tests_step import _failure_hint

    x, out = backend.asarray(np.arange(10, dtype=np.float32)), checks.poison(10)

    def overwrite():
        emu_kernels("twice")((1,), (32,), (x, out, np.int64(10)))
        out.set(2 * checks.to_host(x))

    with pytest.raises(checks.GradeError) as err:
        checks.run_without_host_transfers("twice", overwrite)
    hint = _failure_hint("FAIL", str(err.value), "subtract the row's maximum first", "host_writes.cu:twice")
    assert hint == checks.HOST_COPY_HINT
