"""Launches repeated with the same integer arguments run code compiled for them (minitorch/emu/specialize.py):
the same results bit for bit, and every check and diagnostic of the generic code (faults located on the
learner's line, misaligned vector accesses, barrier divergence; check mode runs the generic code)."""

from __future__ import annotations

import numpy as np
import pytest

from minitorch import emu
from minitorch.emu import config
from minitorch.emu.specialize import specialize_now

RNG = np.random.default_rng(7)

SRC = r"""
// one thread per element of an (n, c, h, w) array: the index arithmetic of every course kernel
extern "C" __global__ void pool_sum(const float* x, float* y, int n, int c, int h, int w, int k) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int ho = h / k, wo = w / k;
    if (i >= (long long)n * c * ho * wo) return;
    int q = (int)(i % wo), p = (int)(i / wo % ho), cc = (int)(i / ((long long)wo * ho) % c);
    int nn = (int)(i / ((long long)wo * ho * c));
    float s = 0.0f;
    for (int r = 0; r < k; ++r)
        for (int t = 0; t < k; ++t)
            s += x[(((long long)nn * c + cc) * h + p * k + r) * w + q * k + t];
    y[i] = s;
}
// a block reduction with barriers (fibers)
extern "C" __global__ void block_sums(const float* x, float* out, int n, int per_thread) {
    __shared__ float part[256];
    float s = 0.0f;
    for (int j = 0; j < per_thread; ++j) {
        long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * per_thread + j;
        if (i < n) s += x[i];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
// faults that depend on data, not on the integer arguments the code is specialised for
extern "C" __global__ void gather(const float* x, float* y, const int* idx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[idx[i]];  // @gather
}
extern "C" __global__ void load4(const float* x, float* y, const int* off, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = *reinterpret_cast<const float4*>(x + off[i]);  // @load4
        y[i] = v.x + v.y + v.z + v.w;
    }
}
extern "C" __global__ void diverge(float* y, const int* stop, int n) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    if (threadIdx.x < stop[0]) {
        __syncthreads();
    } else {
        __syncthreads();  // a different barrier: divergence when some threads take each branch
    }
    if (threadIdx.x < n) y[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
"""


def line_of(marker: str) -> int:
    return next(i for i, ln in enumerate(SRC.splitlines(), 1) if f"// @{marker}" in ln)


N, C, H, W, K = 3, 5, 14, 10, 2
X = RNG.standard_normal((N, C, H, W)).astype(np.float32)
BLOCK_N, PER = 5000, 3
XB = RNG.standard_normal(BLOCK_N).astype(np.float32)
G = 100


@pytest.fixture(scope="module")
def spec():
    """One module, its five kernels launched three times each (generic code), then specialised: one compile for
    the whole file. Yields (module, {name: (grid, block, args, integer arguments, outputs of the four launches)})."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINITORCH_EMU_SPECIALIZE", "1e-9")
        m = emu.RawModule(code=SRC, filename="spec.cu")
        blocks = -(-BLOCK_N // (256 * PER))
        x64 = emu.asarray(RNG.standard_normal(64).astype(np.float32))
        launches = {
            "pool_sum": ((4,), (256,), (emu.asarray(X), emu.zeros(N * C * (H // K) * (W // K)),
                                        *(np.int32(v) for v in (N, C, H, W, K))),
                         tuple((2 + j, 4, v) for j, v in enumerate((N, C, H, W, K)))),
            "block_sums": ((blocks,), (256,), (emu.asarray(XB), emu.zeros(blocks), np.int32(BLOCK_N), np.int32(PER)),
                           ((2, 4, BLOCK_N), (3, 4, PER))),
            "gather": ((1,), (128,), (x64, emu.zeros(G), emu.asarray(np.arange(G, dtype=np.int32) % 64),
                                      np.int32(G)), ((3, 4, G),)),
            "load4": ((1,), (128,), (x64, emu.zeros(G), emu.asarray(np.zeros(G, np.int32)), np.int32(G)),
                      ((3, 4, G),)),
            "diverge": ((1,), (64,), (emu.zeros(64), emu.asarray(np.array([64], np.int32)), np.int32(64)),
                        ((2, 4, 64),)),
        }
        outs: dict[str, list[bytes]] = {name: [] for name in launches}
        for _ in range(3):
            for name, (grid, block, args, consts) in launches.items():
                k = m.get_function(name)
                assert m.specializer.lookup(k.export.index, consts) is None
                k(grid, block, args)
                outs[name].append(args[1].get().tobytes())
        specialize_now(timeout=600)
        assert m.specializer.failed is None, m.specializer.failed
        for name, (grid, block, args, consts) in launches.items():
            k = m.get_function(name)
            assert m.specializer.lookup(k.export.index, consts) is not None, f"{name} was not specialised"
            k(grid, block, args)
            outs[name].append(args[1].get().tobytes())
        yield m, {name: (*launch, outs[name]) for name, launch in launches.items()}


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setenv("MINITORCH_EMU_SPECIALIZE", "1e-9")


def test_repeated_launches_run_specialised_code_with_the_same_results(spec, on) -> None:
    m, launches = spec
    *_, args, _, outs = launches["pool_sum"]
    assert len(set(outs)) == 1  # bit for bit the generic code's result
    ref = X.astype(np.float64).reshape(N, C, H // K, K, W // K, K).sum(axis=(3, 5))
    np.testing.assert_allclose(args[1].get().reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)

    # another signature (other sizes) still runs the generic code, correctly
    y2 = emu.zeros(N * C * (H // 7) * (W // 7))
    m.get_function("pool_sum")((1,), (256,), (emu.asarray(X), y2, *(np.int32(v) for v in (N, C, H, W, 7))))
    ref2 = X.astype(np.float64)[:, :, :14, :7].reshape(N, C, 2, 7, 1, 7).sum(axis=(3, 5))
    np.testing.assert_allclose(y2.get().reshape(ref2.shape), ref2, rtol=1e-5, atol=1e-5)


def test_a_kernel_with_barriers_is_specialised_too(spec, on) -> None:
    *_, args, _, outs = spec[1]["block_sums"]
    assert len(set(outs)) == 1
    np.testing.assert_allclose(args[1].get().astype(np.float64).sum(), XB.astype(np.float64).sum(), atol=1e-3)


def test_faults_in_specialised_code_name_the_learners_line(spec, on) -> None:
    m, launches = spec
    grid, block, (x, y, idx, n), _, _ = launches["gather"]
    idx.set(np.full(G, 1 << 26, np.int32))  # far outside x: a fault, in the specialised code
    with pytest.raises(emu.KernelFault) as ei:
        m.get_function("gather")(grid, block, (x, y, idx, n))
    assert ei.value.line == line_of("gather"), str(ei.value)

    grid, block, (x, y, off, n), _, _ = launches["load4"]
    off.set(np.full(G, 1, np.int32))  # x + 1: a misaligned float4
    with pytest.raises(emu.KernelFault) as ei:
        m.get_function("load4")(grid, block, (x, y, off, n))
    assert ei.value.kind == "misaligned" and ei.value.line == line_of("load4"), str(ei.value)


def test_barrier_divergence_is_reported_in_specialised_code(spec, on) -> None:
    m, launches = spec
    grid, block, (y, stop, n), _, _ = launches["diverge"]
    stop.set(np.array([10], np.int32))
    with pytest.raises(emu.KernelFault, match="barrier divergence"):
        m.get_function("diverge")(grid, block, (y, stop, n))


def test_check_mode_runs_the_generic_code_and_off_means_off(spec, monkeypatch) -> None:
    m, launches = spec
    grid, block, args, consts, _ = launches["pool_sum"]
    index = m.get_function("pool_sum").export.index
    monkeypatch.setenv("MINITORCH_EMU_SPECIALIZE", "0")
    assert m.specializer.lookup(index, consts) is None
    monkeypatch.setenv("MINITORCH_EMU_SPECIALIZE", "1e-9")
    assert m.specializer.lookup(index, consts) is not None
    fresh = emu.RawModule(code=SRC, filename="spec.cu")
    with config.check_mode():
        for _ in range(5):
            fresh.get_function("pool_sum")(grid, block, args)
    specialize_now(timeout=60)
    assert fresh.specializer.ready is None  # check-mode launches are neither counted nor specialised
    with pytest.raises(ValueError, match="MINITORCH_EMU_SPECIALIZE"):
        monkeypatch.setenv("MINITORCH_EMU_SPECIALIZE", "soon")
        config.specialize_after_s()


def test_specialised_code_that_is_not_faster_goes_back_to_the_generic_code(spec, on) -> None:
    from minitorch.emu.specialize import TRIALS, Specializer

    sp = Specializer(None)
    slow, fast = (0, ((1, 4, 7),)), (0, ((1, 4, 8),))
    sp._stats[slow] = [3, 3.3, 1.0]  # generic: the fastest launch took 1 s
    sp._stats[fast] = [3, 3.3, 1.0]
    for _ in range(TRIALS):
        sp.record_specialised(*slow, 0.99)  # not 3% faster
        sp.record_specialised(*fast, 0.5)
    assert sp.rejected == {slow}
    m, launches = spec
    sp.ready = (m.specializer.ready[0], {slow: 0, fast: 1})
    assert sp.lookup(*slow) is None and sp.lookup(*fast) is not None
