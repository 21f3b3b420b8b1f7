"""Phase 1 benchmark: host<->device transfers (pageable vs pinned) and the fill/copy kernels.

Runs the reference solution's kernels on an NVIDIA GPU and writes two JSON files under
benchmarks/results/: ``phase1_transfer-<gpu>.json`` and ``phase1_kernels-<gpu>.json``.
Bandwidth counts bytes read plus bytes written.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
from common import gpu_name, l2_flusher, solution_sources, time_gpu, write_results


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
            h2d = time_gpu(lambda dev=dev, host=host: dev.set(host), max_seconds=0.3)
            d2h = time_gpu(lambda dev=dev, host=host: dev.get(out=host), max_seconds=0.3)
            for direction, seconds in (("h2d", h2d), ("d2h", d2h)):
                results.append({"direction": direction, "memory": memory, "bytes": nbytes,
                                "seconds": seconds, "gbps": nbytes / seconds / 1e9})
        print(f"{nbytes:>11} B  " + "  ".join(f"{r['direction']} {r['memory']:8} {r['gbps']:6.1f}"
                                            for r in results[-4:]) + "  GB/s")
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
    flush = l2_flusher()
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
            seconds = time_gpu(fn, flush=flush, max_seconds=0.3)
            results.append({"kernel": kernel, "bytes": nbytes, "seconds": seconds, "gbps": nbytes / seconds / 1e9})
        mem.copy(a, b)
        assert cupy.array_equal(a, b), "the solution's copy kernel is wrong"
        print(f"{4 * n:>11} B  " + "  ".join(f"{r['kernel']} {r['gbps']:7.1f}" for r in results[-4:]) + "  GB/s")
    return results


def main() -> int:
    device = gpu_name()
    print(f"device: {device}")
    write_results("phase1_transfer", device, transfers())
    write_results("phase1_kernels", device, kernels())
    return 0


if __name__ == "__main__":
    sys.exit(main())
