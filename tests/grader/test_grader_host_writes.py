"""checks.assert_computed_on_device: a result written by the launcher from the host after a launch is
told from one its kernels computed (replaying the recorded launches into fresh buffers)."""

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

    with pytest.raises(checks.GradeError, match="holds values your kernels did not compute"):
        checks.assert_computed_on_device("twice", cheat, inputs=(x,), outputs=(out,))


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
