"""Phase 1 benchmark: host<->device transfers (pageable vs pinned) and the fill/copy kernels.

Runs the reference solution's kernels on an NVIDIA GPU and writes three JSON files under
benchmarks/results/: ``phase1_transfer-<gpu>.json``, ``phase1_alloc-<gpu>.json`` (raw cudaMalloc
against CuPy's pool) and ``phase1_kernels-<gpu>.json``.
Bandwidth counts bytes read plus bytes written.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
from common import gpu_name, solution_sources, time_gpu, write_results


def transfers() -> list[dict]:
    import cupy
    import cupyx

    results = []
    for log2 in range(12, 29, 2):                        # 4 KiB .. 256 MiB
        nbytes = 1 << log2
        n = nbytes // 4
        dev = cupy.empty(n, np.float32)
        hosts = {"pageable": np.random.default_rng(0).standard_normal(n, dtype=np.float32),
                 "pinned": cupyx.empty_pinned(n, np.float32)}
        hosts["pinned"][...] = hosts["pageable"]
        for memory, host in hosts.items():
            h2d = time_gpu(lambda dev=dev, host=host: dev.set(host), max_seconds=0.3, flush=False,
                           hide_host_overhead=False)
            d2h = time_gpu(lambda dev=dev, host=host: dev.get(out=host), max_seconds=0.3, flush=False,
                           hide_host_overhead=False)
            for direction, seconds in (("h2d", h2d), ("d2h", d2h)):
                results.append({"direction": direction, "memory": memory, "bytes": nbytes,
                                "seconds": seconds, "gbps": nbytes / seconds / 1e9})
        print(f"{nbytes:>11} B  " + "  ".join(f"{r['direction']} {r['memory']:8} {r['gbps']:6.1f}"
                                            for r in results[-4:]) + "  GB/s")
    return results


def allocations() -> list[dict]:
    """Allocate-and-free round trips: raw cudaMalloc/cudaFree against CuPy's memory pool (warm)."""
    import time

    import cupy

    runtime = cupy.cuda.runtime
    results = []
    for log2 in range(12, 31, 2):                        # 4 KiB .. 1 GiB
        nbytes = 1 << log2
        for allocator in ("cudaMalloc", "cupy_pool"):
            def once(nbytes: int = nbytes, allocator: str = allocator) -> None:
                if allocator == "cudaMalloc":
                    runtime.free(runtime.malloc(nbytes))
                else:
                    cupy.empty(nbytes, dtype=np.uint8)   # dropped at once: the block goes back to the pool
            once()
            cupy.cuda.Device().synchronize()
            reps, start = 0, time.perf_counter()
            while reps < 20 or time.perf_counter() - start < 0.2:
                once()
                reps += 1
            cupy.cuda.Device().synchronize()
            seconds = (time.perf_counter() - start) / reps
            results.append({"allocator": allocator, "bytes": nbytes, "seconds": seconds})
        print(f"{nbytes:>11} B  cudaMalloc+free {results[-2]['seconds'] * 1e6:9.1f} us   "
              f"pool {results[-1]['seconds'] * 1e6:7.1f} us")
    return results


def kernels() -> list[dict]:
    import cupy

    workspace = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_WORKSPACE"] = workspace
    import minitorch
    from minitorch.kernels import load_module, write_source

    minitorch.set_device("cuda")
    for name, text in solution_sources("phase1_memory.ipynb").items():
        write_source(name, text)
    mem = load_module("memory.py")
    results = []
    for log2 in range(16, 31, 2):                        # 64 KiB .. 1 GiB per buffer
        n = (1 << log2) // 4
        a = cupy.random.standard_normal(n, dtype=np.float32)
        b = cupy.empty_like(a)
        cases = {"fill": (lambda a=a: mem.fill(a, 1.5), 4 * n),
                 "cupy_fill": (lambda a=a: a.fill(1.5), 4 * n),
                 "copy": (lambda a=a, b=b: mem.copy(a, b), 8 * n),
                 "cupy_copy": (lambda a=a, b=b: cupy.copyto(b, a), 8 * n)}
        for kernel, (fn, nbytes) in cases.items():
            seconds = time_gpu(fn, max_seconds=0.3)
            results.append({"kernel": kernel, "bytes": nbytes, "seconds": seconds, "gbps": nbytes / seconds / 1e9})
        mem.copy(a, b)
        assert cupy.array_equal(a, b), "the solution's copy kernel is wrong"
        print(f"{4 * n:>11} B  " + "  ".join(f"{r['kernel']} {r['gbps']:7.1f}" for r in results[-4:]) + "  GB/s")
    return results


def grid_sizes() -> list[dict]:
    """The copy kernel at one size (64 MiB a buffer) launched with grids of different sizes."""
    import cupy

    from minitorch.kernels import load_kernel

    copy = load_kernel("memory.cu", "copy")
    sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    n = (64 << 20) // 4
    a = cupy.random.standard_normal(n, dtype=np.float32)
    b = cupy.empty_like(a)
    results = []
    for blocks in sorted({sms, 2 * sms, 4 * sms, 8 * sms, 16 * sms, 32 * sms, 64 * sms, 4096, 16384, 65536}):
        seconds = time_gpu(lambda blocks=blocks: copy((blocks,), (256,), (a, b, np.int64(n))), max_seconds=0.3)
        results.append({"kernel": "copy", "bytes": 8 * n, "blocks": blocks, "threads": 256, "sms": sms,
                        "elements_per_thread": n / (blocks * 256), "seconds": seconds, "gbps": 8 * n / seconds / 1e9})
        print(f"copy 64 MiB, {blocks:6d} blocks x 256: {results[-1]['gbps']:7.1f} GB/s")
    cupy_copy = time_gpu(lambda: cupy.copyto(b, a), max_seconds=0.3)
    results.append({"kernel": "cupy_copy", "bytes": 8 * n, "seconds": cupy_copy, "gbps": 8 * n / cupy_copy / 1e9})
    print(f"cupy.copyto 64 MiB: {results[-1]['gbps']:7.1f} GB/s")
    return results


def main() -> int:
    device = gpu_name()
    print(f"device: {device}")
    write_results("phase1_transfer", device, transfers())
    write_results("phase1_alloc", device, allocations())
    write_results("phase1_kernels", device, kernels())
    write_results("phase1_grid", device, grid_sizes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
