"""Phase 2 benchmark: the reference solution's elementwise kernels, both transposes and the naive matmul.

Runs the kernels of solutions/phase2_kernels.ipynb on an NVIDIA GPU and writes two JSON files under
benchmarks/results/:

- ``phase2_bandwidth-<gpu>.json``: bandwidth (bytes read + written) of add, mul, scalar_mul, relu and of
  the naive and tiled transposes, at several sizes, with ``cupy.copyto`` of as many elements as the ceiling;
- ``phase2_matmul-<gpu>.json``: GFLOP/s of the naive matmul and of ``cupy.matmul`` (cuBLAS SGEMM) for square
  matrices from 256 to 2048 (4096 too when the naive kernel can be timed there in under 10 s).

Usage (on a GPU machine, with its python3): ``python benchmarks/phase2_kernels.py``. Takes well under a minute.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np
from common import gpu_name, solution_sources, time_gpu, write_results

ELEMENTS = [1 << 20, 1 << 22, 1 << 24, 1 << 26]  # 4 MiB .. 256 MiB an array; squares of 1024 .. 8192
MATMUL_SIZES = [256, 512, 1024, 2048]
LARGEST_MATMUL = 4096
MATMUL_BUDGET_S = 10.0  # the largest size is measured only if its timing fits in this budget


def load_solution() -> tuple:
    """The reference launchers, written into a temporary workspace (as a learner's lab would)."""
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    import minitorch
    from minitorch.kernels import load_module, write_source

    minitorch.set_device("cuda")
    for name, text in solution_sources("phase2_kernels.ipynb").items():
        write_source(name, text)
    return load_module("elementwise.py"), load_module("transpose.py"), load_module("matmul.py")


def bandwidth_at(n: int, ew, tr) -> list[dict]:
    """One row per kernel for arrays of n floats (transposes: a square matrix of n elements)."""
    import cupy

    side = round(n ** 0.5)
    a, b = cupy.random.standard_normal(n, dtype=np.float32), cupy.random.standard_normal(n, dtype=np.float32)
    out = cupy.empty_like(a)
    m, mt = a.reshape(side, side), out.reshape(side, side)
    cases = {  # kernel: (launch, bytes read + written per element)
        "copy": (lambda: cupy.copyto(out, a), 8),
        "add": (lambda: ew.add(a, b, out), 12),
        "mul": (lambda: ew.mul(a, b, out), 12),
        "scalar_mul": (lambda: ew.scalar_mul(a, 1.5, out), 8),
        "relu": (lambda: ew.relu(a, out), 8),
        "transpose_naive": (lambda: tr.transpose(m, mt, tiled=False), 8),
        "transpose_tiled": (lambda: tr.transpose(m, mt, tiled=True), 8),
    }
    rows = []
    for kernel, (fn, bytes_per_element) in cases.items():
        seconds = time_gpu(fn, max_seconds=0.3)
        row = {"kernel": kernel, "elements": n, "bytes": bytes_per_element * n, "seconds": seconds,
               "gbps": bytes_per_element * n / seconds / 1e9}
        if kernel.startswith("transpose"):
            row["shape"] = [side, side]
            assert bool(cupy.array_equal(mt, m.T)), f"the solution's {kernel} is wrong"
        rows.append(row)
    ceiling = rows[0]["gbps"]
    for row in rows:
        row["fraction_of_copy"] = row["gbps"] / ceiling
    print(f"{4 * n:>11} B an array  " + "  ".join(f"{r['kernel']} {r['gbps']:6.0f}" for r in rows) + "  GB/s")
    return rows


def matmul_at(size: int, mm) -> list[dict]:
    """The naive matmul and cupy.matmul (cuBLAS) on square size x size float32 matrices."""
    import cupy

    a = cupy.random.uniform(-1, 1, (size, size), dtype=np.float32)
    b = cupy.random.uniform(-1, 1, (size, size), dtype=np.float32)
    c, ref = cupy.empty((size, size), np.float32), cupy.empty((size, size), np.float32)
    flops = 2 * size**3
    start = time.perf_counter()
    timed = {"matmul_naive": time_gpu(lambda: mm.matmul(a, b, c), max_seconds=0.5),
             "cublas": time_gpu(lambda: cupy.matmul(a, b, out=ref), max_seconds=0.5)}
    error = float(cupy.abs(c - ref).max())
    assert error < 1e-2, f"the solution's matmul differs from cupy.matmul by {error} at {size}"
    rows = [{"kernel": kernel, "size": size, "flops": flops, "seconds": seconds, "gflops": flops / seconds / 1e9}
            for kernel, seconds in timed.items()]
    print(f"matmul {size:5d}^3: naive {rows[0]['gflops']:8.0f} GFLOP/s, cuBLAS {rows[1]['gflops']:8.0f} GFLOP/s "
          f"({rows[0]['gflops'] / rows[1]['gflops']:.3f} x cuBLAS; {time.perf_counter() - start:.1f} s)")
    return rows


def matmul_sizes(mm) -> list[dict]:
    results = []
    for size in MATMUL_SIZES:
        results += matmul_at(size, mm)
    naive = results[-2]
    # time_gpu runs 3 warm-ups and at least 10 timed launches; the naive kernel's time grows as size^3
    estimate = 13 * naive["seconds"] * (LARGEST_MATMUL / naive["size"]) ** 3
    if estimate <= MATMUL_BUDGET_S:
        results += matmul_at(LARGEST_MATMUL, mm)
    else:
        print(f"skipping {LARGEST_MATMUL}: timing the naive matmul there would take about {estimate:.0f} s")
    return results


def main() -> int:
    device = gpu_name()
    print(f"device: {device}")
    ew, tr, mm = load_solution()
    write_results("phase2_bandwidth", device, [row for n in ELEMENTS for row in bandwidth_at(n, ew, tr)])
    write_results("phase2_matmul", device, matmul_sizes(mm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
