"""The Phase 8a solution's rung-6 launcher (hgemm.py, variant="wgmma") without a GPU: what it launches, and with
what, decided in Python before any sm_90a instruction runs.

The emulator cannot run wgmma or the TMA, so the device-specific pieces are stood in for (the device is said to be
an sm_90 GPU, cuTensorMapEncodeTiled writes a recognisable pattern, the kernels of hgemm_wgmma.cu are recorded, not
run); everything else is the reference solution's own code: which products go to rung 6 and which to rung 5, the
32 words of the two maps and their boxes, the grid, the block and the shared memory. The GPU tests
(grader/tests/test_phase8a_wgmma.py, tests/grader/test_grader_fixtures_phase8a_wgmma.py) check the values.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from minitorch import backend, kernels
from tests.solution_files import solution_files

NOTEBOOK = "phase8a_tensor_cores.ipynb"


class FakeDriver:
    """cuTensorMapEncodeTiled that records its arguments and writes word i = (call << 8) | i."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def cuTensorMapEncodeTiled(self, out, dtype, rank, address, dims, strides, box, steps, interleave, swizzle,  # noqa: N802
                               promotion, fill):
        self.calls.append({"dtype": dtype, "rank": rank, "address": address.value, "dims": (dims[0], dims[1]),
                           "stride": strides[0], "box": (box[0], box[1]), "swizzle": swizzle, "fill": fill})
        words = (ctypes.c_uint64 * 16).from_address(out.value)
        for i in range(16):
            words[i] = (len(self.calls) << 8) | i
        return 0


@pytest.fixture
def hg(workspace, monkeypatch):
    for name, text in solution_files(NOTEBOOK).items():
        kernels.write_source(name, text)
    previous = backend.get_device()
    backend.set_device("emu")
    module = kernels.load_module("hgemm.py")
    launches: list[tuple] = []
    real_load = module.load_kernel

    def load(filename, function, options=(), name_expressions=None):
        if filename != module.WGMMA_FILE:
            return real_load(filename, function, options, name_expressions)
        assert options == ("--gpu-architecture=sm_90a",) and function in (
            "store_tensor_maps", *name_expressions), (function, options)

        class Recorded:
            max_dynamic_shared_size_bytes = 48 * 1024

            def __call__(self, grid, block, args, shared_mem=0):
                launches.append((function, grid, block, args, shared_mem))

        return Recorded()

    driver = FakeDriver()
    monkeypatch.setattr(module, "has_sm90", lambda: True)
    monkeypatch.setattr(module, "load_kernel", load)
    monkeypatch.setattr(module, "driver", lambda: driver)
    monkeypatch.setattr(module, "multiprocessors", lambda: 132)
    monkeypatch.setattr(module, "map_buffer", lambda: backend.zeros((2, 16), np.uint64))
    module._words.clear()
    yield module, launches, driver
    backend.set_device(previous)


@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True), (True, True)])
def test_rung6_launches_the_map_writer_then_the_persistent_gemm(hg, ta, tb):
    module, launches, driver = hg
    m, k, n = 1000, 136, 520
    a = backend.zeros((k, m) if ta else (m, k), np.float16)
    b = backend.zeros((n, k) if tb else (k, n), np.float16)
    out = backend.zeros((m, n), np.float32)
    module.hgemm(a, b, out, "float16", "wgmma", transpose_a=ta, transpose_b=tb)
    [(store, grid, block, args, _), (gemm, grid2, block2, args2, smem)] = launches
    assert store == "store_tensor_maps" and grid == (1,) and block == (1,)
    assert args[1] is a and args[2] is b and len(args) == 3 + 32
    words = [int(w) for w in args[3:]]
    assert words == [(1 << 8) | i for i in range(16)] + [(2 << 8) | i for i in range(16)]
    assert all(isinstance(w, np.uint64) for w in args[3:])  # 8 bytes each, as the kernel's u64 parameters
    maps = args[0]
    # no bias: a one-float stand-in (CuPy passes None as an invalid pointer) and has_bias = 0
    assert args2[0] is maps and args2[1] is out and args2[2].dtype == np.float32 and args2[2].size == 1
    assert [int(v) for v in args2[3:]] == [0, m, n, k]
    assert gemm == f"hgemm_6_wgmma<fp16, float, {str(ta).lower()}, {str(tb).lower()}>"
    tiles = -(-m // 128) * -(-n // 256)
    assert grid2 == (min(tiles, 132), 1, 1) and block2 == (384,) and smem == module.WGMMA_SMEM == 197696
    # A's map: the array as stored, innermost dimension first, rows 2 * row-length bytes apart, the 128-byte
    # swizzle, zeros outside; the boxes the kernel's shared-memory layout expects
    map_a, map_b = driver.calls
    assert map_a["address"] == a.data.ptr and map_a["dims"] == (a.shape[1], a.shape[0])
    assert map_a["stride"] == 2 * a.shape[1] and map_a["box"] == ((64, 64) if ta else (64, 128))
    assert map_b["address"] == b.data.ptr and map_b["dims"] == (b.shape[1], b.shape[0])
    assert map_b["box"] == ((64, 256) if tb else (64, 64))
    assert {map_a["swizzle"], map_b["swizzle"]} == {3} and {map_a["fill"], map_b["fill"]} == {0}
    assert {map_a["dtype"], map_b["dtype"]} == {6}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16


@pytest.mark.parametrize(("m", "k", "n", "ta", "tb", "rung6"), [
    (17, 8, 16, False, False, True),    # M need not be a multiple of 8 when A is stored M x K
    (17, 8, 16, True, False, False),    # ... but it is A's row length when stored K x M
    (16, 12, 16, False, False, False),  # A's rows of 12 elements: 24 bytes, not a multiple of 16
    (16, 8, 20, False, True, True),     # B stored N x K: K is its row length
    (16, 8, 20, False, False, False),   # B stored K x N: rows of 20
    (5, 0, 7, False, False, False),     # K = 0: no tensor map has an empty dimension
])
def test_products_the_tma_cannot_copy_run_on_rung5(hg, m, k, n, ta, tb, rung6):
    module, launches, _ = hg
    a = backend.asarray(np.ones((k, m) if ta else (m, k), np.float16))
    b = backend.asarray(np.ones((n, k) if tb else (k, n), np.float16))
    out = backend.asarray(np.full((m, n), np.nan, np.float32))
    kernels.reset_launch_counts()
    module.hgemm(a, b, out, "float16", "wgmma", transpose_a=ta, transpose_b=tb)
    assert bool(launches) == rung6
    if not rung6:  # rung 5 computed it, on the emulator
        assert kernels.launch_count("hgemm.cu", module.kernel_name("pipeline", "fp16", "float", ta, tb)) == 1
        np.testing.assert_array_equal(backend.asnumpy(out), np.full((m, n), float(k), np.float32))


def test_a_stack_of_matrices_runs_on_rung5_in_one_launch(hg):
    """Rung 6's tensor maps are 2-D: a batch (stacks of matrices) whose k does not run on from one matrix to the
    next goes to rung 5, one launch for the whole stack (grid z), even when every matrix alone would fit the TMA."""
    module, launches, _ = hg
    a = backend.asarray(np.ones((3, 16, 8), np.float16))
    b = backend.asarray(np.ones((3, 8, 16), np.float16))
    out = backend.asarray(np.full((3, 16, 16), np.nan, np.float32))
    kernels.reset_launch_counts()
    module.hgemm(a, b, out, "float16", "wgmma")
    assert not launches
    assert kernels.launch_count("hgemm.cu", module.kernel_name("pipeline", "fp16", "float", False, False)) == 1
    np.testing.assert_array_equal(backend.asnumpy(out), np.full((3, 16, 16), 8.0, np.float32))


@pytest.mark.parametrize(("k", "rung6"), [(128, True), (72, False)], ids=["K=128", "K=72"])
def test_a_stack_along_k_runs_on_rung6_in_one_launch(hg, k, rung6):
    """Aᵀ·B for stacks A (batch, K, M) and B (batch, K, N) (a split weight gradient's pieces): with K a multiple
    of 64, one launch of rung 6 whose maps see each stack as one matrix of batch·K rows, grid z the matrix and
    the multiprocessors shared among the matrices; otherwise (a k-step would cross into the next matrix) rung 5."""
    module, launches, driver = hg
    batch, m, n = 8, 384, 1152
    a = backend.asarray(np.ones((batch, k, m), np.float16))
    b = backend.asarray(np.ones((batch, k, n), np.float16))
    out = backend.asarray(np.full((batch, m, n), np.nan, np.float32))
    kernels.reset_launch_counts()
    module.hgemm(a, b, out, "float16", "wgmma", transpose_a=True)
    if not rung6:
        assert not launches
        assert kernels.launch_count("hgemm.cu", module.kernel_name("pipeline", "fp16", "float", True, False)) == 1
        return
    [(store, _, _, args, _), (gemm, grid, _, args2, _)] = launches
    assert store == "store_tensor_maps" and gemm == "hgemm_6_wgmma<fp16, float, true, false>"
    tiles = -(-m // 128) * -(-n // 256)
    assert grid == (min(tiles, 132 // batch), 1, batch)
    assert args2[1] is out and [int(v) for v in args2[3:]] == [0, m, n, k]  # K: one matrix's
    map_a, map_b = driver.calls
    assert map_a["address"] == a.data.ptr and map_a["dims"] == (m, batch * k)
    assert map_b["address"] == b.data.ptr and map_b["dims"] == (n, batch * k)


@pytest.mark.parametrize(("k", "batch", "sm90", "written", "rung6"), [
    (256, 0, True, True, True),     # one matrix, K long enough: rung 6
    (248, 0, True, True, False),    # K < WGMMA_BEST_MIN_K: rung 5 measured faster there
    (256, 2, True, True, False),    # a stack: rung 6's maps are 2-D
    (256, 0, False, True, False),   # not an sm_90 GPU
    (256, 0, True, False, False),   # hgemm_wgmma.cu not written: the phase passes without rung 6
])
def test_best_runs_rung6_on_sm90_for_a_long_k(hg, monkeypatch, k, batch, sm90, written, rung6):
    """variant="best" is rung 6 on an sm_90 GPU for one matrix with K >= 256 once rung 6 is written (faster there
    through the launcher, benchmarks/results/phase8a_wgmma-*.json), rung 5 otherwise."""
    module, launches, _ = hg
    monkeypatch.setattr(module, "has_sm90", lambda: sm90)
    if not written:
        fake_load = module.load_kernel

        def load(filename, function, options=(), name_expressions=None):
            if filename == module.WGMMA_FILE:
                raise kernels.KernelNotWrittenError("hgemm_wgmma.cu: MINITORCH_TODO left in hgemm_6_wgmma")
            return fake_load(filename, function, options, name_expressions)

        monkeypatch.setattr(module, "load_kernel", load)
    m, n = 16, 8
    shape = (batch,) if batch else ()
    a = backend.asarray(np.ones(shape + (m, k), np.float16))
    b = backend.asarray(np.ones(shape + (k, n), np.float16))
    out = backend.asarray(np.full(shape + (m, n), np.nan, np.float32))
    kernels.reset_launch_counts()
    module.hgemm(a, b, out, "float16", "best")
    assert [name for name, *_ in launches] == (
        ["store_tensor_maps", "hgemm_6_wgmma<fp16, float, false, false>"] if rung6 else [])
    if not rung6:
        assert kernels.launch_count("hgemm.cu", module.kernel_name("pipeline", "fp16", "float", False, False)) == 1
        np.testing.assert_array_equal(backend.asnumpy(out), np.full(shape + (m, n), float(k), np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "k", "n", "ta", "tb", "rung6"), [
    (1000, 264, 520, False, False, True),
    (136, 256, 72, True, False, True),
    (520, 1000, 264, False, True, True),
    (200, 512, 96, True, True, True),
    (64, 248, 64, False, False, False),   # K < WGMMA_BEST_MIN_K: rung 5
    (72, 300, 81, False, False, False),   # B's rows of 81 elements: the TMA cannot copy them
])
def test_best_on_an_sm90_gpu_runs_rung6_right(workspace, m, k, n, ta, tb, rung6):
    """On an H100/H200, variant="best" launches rung 6 for a long K (and rung 5 otherwise), with values within
    fp32 accumulation's bound of the float64 product of the bf16 operands."""
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("rung 6 needs an sm_90 GPU")
    for name, text in solution_files(NOTEBOOK).items():
        kernels.write_source(name, text)
    previous = backend.get_device()
    backend.set_device("cuda")
    try:
        module = kernels.load_module("hgemm.py")
        rng = np.random.default_rng(m + k + n)
        a32 = rng.uniform(-1, 1, (k, m) if ta else (m, k)).astype(np.float32)
        b32 = rng.uniform(-1, 1, (n, k) if tb else (k, n)).astype(np.float32)
        bits = [((x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16).astype(np.uint16)
                for x in (a32, b32)]  # round to nearest even (finite values)
        a64, b64 = ((b.astype(np.uint32) << 16).view(np.float32).astype(np.float64) for b in bits)
        out = backend.asarray(np.full((m, n), np.nan, np.float32))
        kernels.reset_launch_counts()
        module.hgemm(backend.asarray(bits[0]), backend.asarray(bits[1]), out, "bfloat16", "best", transpose_a=ta,
                     transpose_b=tb)
        wgmma = module.kernel_name("wgmma", "bf16", "float", ta, tb)
        assert kernels.launch_count(module.WGMMA_FILE, wgmma) == int(rung6)
        op_a, op_b = (a64.T if ta else a64), (b64.T if tb else b64)
        bound = 2 * k * 2.0 ** -24 * (np.abs(op_a) @ np.abs(op_b))
        assert np.all(np.abs(backend.asnumpy(out) - op_a @ op_b) <= bound)
    finally:
        backend.set_device(previous)
