"""The emulator's speed settings: worker counts (``auto``), identical results on several workers, and a smoke
test of benchmarks/emu_speed.py at tiny sizes."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from minitorch import emu
from minitorch.emu import config

ROOT = Path(__file__).resolve().parents[2]

TILED = r"""
#define T 8
extern "C" __global__ void mm(const float* A, const float* B, float* C, int n) {
    __shared__ float a[T][T], b[T][T];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += T) {
        a[threadIdx.y][threadIdx.x] = row < n && k0 + threadIdx.x < n ? A[row * n + k0 + threadIdx.x] : 0.0f;
        b[threadIdx.y][threadIdx.x] = k0 + threadIdx.y < n && col < n ? B[(k0 + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += a[threadIdx.y][k] * b[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) C[row * n + col] = acc;
}
extern "C" __global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 3.0f + 1.0f;
}
"""


@pytest.mark.parametrize("value", ["auto", "0", "AUTO"])
def test_workers_auto_means_one_per_core(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MINITORCH_EMU_WORKERS", value)
    assert config.workers() == len(os.sched_getaffinity(0))
    with emu.workers("auto"):
        assert config.workers() == len(os.sched_getaffinity(0))
    with emu.workers(3):
        assert config.workers() == 3


def test_workers_default_is_one_and_garbage_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINITORCH_EMU_WORKERS", raising=False)
    assert config.workers() == 1
    monkeypatch.setenv("MINITORCH_EMU_WORKERS", "two")
    with pytest.raises(ValueError, match="MINITORCH_EMU_WORKERS must be a number of threads or 'auto', not 'two'"):
        config.workers()


@pytest.mark.parametrize("workers", [2, 3])
def test_several_workers_compute_bit_identical_results(workers: int) -> None:
    """Blocks on several threads: without atomics, every output element is computed by one thread in the same
    order as on one worker, so the results are identical to the bit (odd sizes: partial tiles and blocks)."""
    m = emu.RawModule(code=TILED, filename="tiled.cu")
    n = 37
    rng = np.random.default_rng(5)
    a_host, b_host = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    x_host = rng.standard_normal(1001, dtype=np.float32)

    def run() -> tuple[np.ndarray, np.ndarray]:
        c, x = emu.zeros((n, n), np.float32), emu.asarray(x_host)
        grid = ((n + 7) // 8, (n + 7) // 8)
        m.get_function("mm")(grid, (8, 8), (emu.asarray(a_host), emu.asarray(b_host), c, np.int32(n)))
        m.get_function("scale")((8,), (128,), (x, np.int32(1001)))
        return c.get(), x.get()

    with emu.workers(1):
        one = run()
    with emu.workers(workers):
        many = run()
    np.testing.assert_allclose(one[0], a_host.astype(np.float64) @ b_host.astype(np.float64), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(one[1], x_host * np.float32(3) + np.float32(1))
    assert one[0].tobytes() == many[0].tobytes() and one[1].tobytes() == many[1].tobytes()


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("emu_speed", ROOT / "benchmarks" / "emu_speed.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_kernels_run_and_verify_at_tiny_sizes(bench: ModuleType) -> None:
    rows = bench.kernel_rows(1, 1, n=1000, size=40, min_seconds=0.0)  # raises if a result is wrong
    kinds = {r["kind"]: r for r in rows}
    assert [r["kernel"] for r in rows if r["kind"] == "launch"] == ["empty", "empty_args"]
    assert kinds["elementwise"]["gb_per_second"] > 0 and kinds["sgemm"]["gflop_per_second"] > 0
    assert all(r["seconds"] > 0 and r["workers"] == 1 for r in rows)


def test_kernel_profile_names_launch_shapes_and_fibers(bench: ModuleType, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The MNIST row's per-kernel breakdown: CPU time by kernel, each kernel's launch shapes (grid, block,
    dynamic shared memory, threads in all) and whether it runs on fibers or split at its barriers (the tiled
    kernel synchronises with __syncthreads() alone: split; the elementwise one does not synchronise)."""
    import minitorch
    from minitorch import kernels

    monkeypatch.setenv("MINITORCH_WORKSPACE", str(tmp_path))
    minitorch.set_device("emu")
    kernels.write_source("speed_probe.cu", TILED)
    mm, scale = kernels.load_kernel("speed_probe.cu", "mm"), kernels.load_kernel("speed_probe.cu", "scale")
    n = 20
    a, b, c, x = (emu.zeros(v, np.float32) for v in ((n, n), (n, n), (n, n), 1001))
    with kernels.recording() as launches:
        mm((3, 3), (8, 8), (a, b, c, np.int32(n)))
        scale((8,), (128,), (x, np.int32(1001)))
        scale((4,), (256,), (x, np.int32(1001)))
    rows = {r["kernel"]: r for r in bench.kernel_profile(launches, rounds=1)}
    assert rows["mm"]["fibers"] is False and rows["mm"]["split"] is True  # a coroutine per thread (split.py)
    assert rows["scale"]["fibers"] is False and rows["scale"]["split"] is False
    assert rows["mm"]["launches"] == 1 and rows["scale"]["launches"] == 2
    assert rows["mm"]["shapes"] == [{"grid": [3, 3], "block": [8, 8], "shared_mem": 0, "threads": 576}]
    assert [s["threads"] for s in rows["scale"]["shapes"]] == [1024, 1024]
    assert all(r["cpu_seconds"] > 0 for r in rows.values())
