"""Each kind of kernel fault is reported under its own headline with its own advice (never as a bad index
when it is a barrier, a mask or a race), NaNs are told apart (never written vs computed), and the
precision-loss advice appears only for rounding-like errors."""

from __future__ import annotations

import numpy as np
import pytest

from grader import checks
from grader.tests_step import _failure_hint, fault_hint
from minitorch import emu

KERNELS = {
    "out-of-bounds": (r'''extern "C" __global__ void k(float* x) { x[threadIdx.x + 1] = 1.0f; }''', 32, False),
    "barrier-divergence": (r'''extern "C" __global__ void k(float* x) {
        if (threadIdx.x % 2 == 0) { x[threadIdx.x] = 1.0f; __syncthreads(); }
        else { __syncthreads(); x[threadIdx.x] = 2.0f; } }''', 32, False),
    "warp": (r'''extern "C" __global__ void k(float* x) {
        float v = x[threadIdx.x];
        v += __shfl_down_sync(0x0000ffffu, v, 1);
        x[threadIdx.x] = v; }''', 32, False),
    "read-after-write": (r'''extern "C" __global__ void k(float* x) {
        __shared__ float s[32];
        s[threadIdx.x] = x[threadIdx.x];
        if (threadIdx.x > 0) x[threadIdx.x] = s[threadIdx.x - 1]; }''', 32, True),
    "device-race": (r'''extern "C" __global__ void k(float* x) { x[0] += 1.0f; }''', 32, True),
    "misaligned": (r'''extern "C" __global__ void k(float* x) {
        float4 v = reinterpret_cast<const float4*>(x + 1)[0];
        x[threadIdx.x] = v.x; }''', 32, False),
}
HEADLINES = {"out-of-bounds": "out-of-bounds memory access", "barrier-divergence": "barrier divergence",
             "warp": "warp primitive misuse", "read-after-write": "shared-memory race",
             "device-race": "device-memory race", "misaligned": "misaligned address"}


def _launch(src: str, threads: int, check: bool, grid: int = 1) -> None:
    kernel = emu.RawModule(code=src, filename="fault.cu").get_function("k")
    x = emu.zeros(threads)
    if check:
        with emu.check_mode():
            kernel((grid,), (threads,), (x,))
    else:
        kernel((grid,), (threads,), (x,))


@pytest.mark.parametrize("kind", list(KERNELS))
def test_each_fault_has_its_own_headline_and_advice(kind):
    src, threads, check = KERNELS[kind]
    with pytest.raises(checks.GradeError) as err:
        checks.launch_checked("the kernel", lambda: _launch(src, threads, check))
    message = str(err.value)
    assert f"the kernel: {HEADLINES[kind]}:" in message, message
    others = [h for k, h in HEADLINES.items() if h != HEADLINES[kind]]
    assert not any(h in message.split("\n")[0] for h in others), message
    assert fault_hint(message) == checks.FAULTS[kind][1]
    assert "touched memory" not in _failure_hint("CRASH", message, None, "fault.cu:k")


def test_a_launch_of_zero_blocks_is_an_invalid_configuration():
    src = KERNELS["out-of-bounds"][0]
    with pytest.raises(checks.GradeError, match="the kernel: invalid launch configuration:") as err:
        checks.launch_checked("the kernel", lambda: _launch(src, 32, False, grid=0))
    assert "at least 1" in fault_hint(str(err.value))


def test_a_race_hint_does_not_explain_wrong_values():
    """A value error in a test whose advice is about barriers gets no barrier advice."""
    reason = "GradeError: reduce.sum: 1 of 1 values differ (rtol=0, atol=0)\n  first bad index 0: expected 3.0, got 4.0"
    barrier_advice = "a barrier (__syncthreads) between every two steps"
    assert _failure_hint("FAIL", reason, barrier_advice, "reduce.cu:sum_shared", "fault") == ""
    assert _failure_hint("FAIL", reason, "check the loop", "reduce.cu:sum_shared", None) == "check the loop"


def test_never_written_is_told_from_a_computed_nan():
    expected = np.ones(4)
    unwritten = checks.poisoned_host(4)
    with pytest.raises(checks.GradeError, match=r"still NaN: poisoned before the launch and never written"):
        checks.assert_close(unwritten, expected)
    computed = np.ones(4, np.float32)
    with np.errstate(invalid="ignore"):
        computed[0] = np.float32(0) / np.float32(0)
    with pytest.raises(checks.GradeError) as err:
        checks.assert_close(computed, expected)
    assert "never written" not in str(err.value) and "computed by the kernel" in str(err.value)


def test_precision_advice_only_for_rounding_like_errors():
    rng = np.random.default_rng(0)
    exact = rng.standard_normal(1000)
    # A logic error within 1%: every value scaled by one constant (dividing by n - 1 instead of n, say).
    with pytest.raises(checks.GradeError) as err:
        checks.assert_close((exact * 1.004).astype(np.float32), exact)
    assert "precision loss" not in str(err.value)
    # A few values off by a little (a wrong index at the edge): not rounding either.
    few = exact.astype(np.float32)
    few[:3] *= 1.001
    with pytest.raises(checks.GradeError) as err:
        checks.assert_close(few, exact, rtol=1e-6)
    assert "precision loss" not in str(err.value)
    half = exact.astype(np.float16).astype(np.float32)
    with pytest.raises(checks.GradeError, match="precision loss"):
        checks.assert_close(half, exact, rtol=0)


def test_an_early_return_before_a_barrier_fails_under_the_graders_filter():
    """The emulator only warns (it works on today's GPUs); graded tests turn the warning into a failure."""
    import warnings

    src = r'''extern "C" __global__ void k(float* x) {
        if (threadIdx.x >= 16) return;
        __syncthreads();
        x[threadIdx.x] = 1.0f; }'''
    with warnings.catch_warnings():
        warnings.simplefilter("error", emu.BarrierWarning)
        with pytest.raises(checks.GradeError, match="returned before a __syncthreads") as err:
            checks.launch_checked("the kernel", lambda: _launch(src, 32, False))
    assert "guard only its loads and stores" in fault_hint(str(err.value))
    cfg = (checks.paths.repo_root() / "grader" / "pytest-grader.cfg").read_text()
    assert "error::minitorch.emu.errors.BarrierWarning" in cfg
