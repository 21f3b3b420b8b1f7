"""Phase 4 benchmark: the reduction ladder against the copy ceiling and cupy.sum.

Runs the reference solution's reduce.py / reduce.cu on an NVIDIA GPU, for 2^10 to 2^26 floats, and
writes ``benchmarks/results/phase4_reductions-<gpu>.json``. Rows: ``kernel`` (sum_atomic, sum_shared,
sum_warp, max_warp, cupy_sum, cupy_max, copy), ``n`` (floats), ``bytes`` and ``gbps``. A reduction
counts the bytes it reads (4 an element); the copy (``cupy.copyto``) counts bytes read plus written
(8 an element): both are the DRAM bandwidth a memory-bound kernel gets. Plus ``column_mean_var`` on a
few matrix shapes against CuPy's ``mean``/``var`` over axis 0 (bytes read once).
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
from common import gpu_name, solution_sources, time_gpu, write_results

SIZES = [1 << k for k in range(10, 27, 2)]  # 1 Ki .. 64 Mi floats (4 KiB .. 256 MiB)
COLUMN_SHAPES = [(290_000, 18), (1 << 20, 16), (1 << 18, 64), (1 << 14, 1024)]  # the first: sales.tsv's features


def reductions() -> list[dict]:
    import cupy

    from minitorch.kernels import load_module

    red = load_module("reduce.py")
    results = []
    for n in SIZES:
        x = cupy.random.RandomState(n).standard_normal(n, dtype=np.float32)
        dst, out = cupy.empty_like(x), cupy.empty(1, np.float32)
        expected = float(cupy.sum(x.astype(cupy.float64)))
        cases = {
            "sum_atomic": (lambda x=x, out=out: red.sum(x, out, variant="atomic"), 4 * n),
            "sum_shared": (lambda x=x, out=out: red.sum(x, out, variant="shared"), 4 * n),
            "sum_warp": (lambda x=x, out=out: red.sum(x, out, variant="warp"), 4 * n),
            "max_warp": (lambda x=x, out=out: red.max(x, out), 4 * n),
            "cupy_sum": (lambda x=x: cupy.sum(x), 4 * n),
            "cupy_max": (lambda x=x: cupy.max(x), 4 * n),
            "copy": (lambda x=x, dst=dst: cupy.copyto(dst, x), 8 * n),
        }
        for kernel, (fn, nbytes) in cases.items():
            seconds = time_gpu(fn, max_seconds=0.25)
            results.append({"kernel": kernel, "n": n, "bytes": nbytes, "seconds": seconds,
                            "gbps": nbytes / seconds / 1e9})
        for variant in ("atomic", "shared", "warp"):
            red.sum(x, out, variant=variant)
            got = float(out.get()[0])
            assert abs(got - expected) <= 1e-4 * float(cupy.abs(x).sum()), (variant, n, got, expected)
        print(f"{4 * n:>11} B  " + "  ".join(f"{r['kernel']} {r['gbps']:7.1f}" for r in results[-len(cases):])
              + "  GB/s")
    return results


def column_statistics() -> list[dict]:
    import cupy

    from minitorch.kernels import load_module

    red = load_module("reduce.py")
    results = []
    for rows, cols in COLUMN_SHAPES:
        x = cupy.random.RandomState(rows).standard_normal((rows, cols), dtype=np.float32) + 100
        mean, var = cupy.empty(cols, np.float32), cupy.empty(cols, np.float32)
        nbytes = 4 * rows * cols
        for kernel, fn in (("column_mean_var", lambda x=x, m=mean, v=var: red.column_mean_var(x, m, v)),
                           ("cupy_mean_var", lambda x=x: (x.mean(axis=0), x.var(axis=0)))):
            seconds = time_gpu(fn, max_seconds=0.25)
            results.append({"kernel": kernel, "rows": rows, "cols": cols, "bytes": nbytes, "seconds": seconds,
                            "gbps": nbytes / seconds / 1e9})
        print(f"column_mean_var {rows} x {cols}: {results[-2]['gbps']:7.1f} GB/s, CuPy {results[-1]['gbps']:7.1f} GB/s")
    return results


def main() -> int:
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    import minitorch
    from minitorch.kernels import write_source

    minitorch.set_device("cuda")
    for notebook in ("phase1_memory.ipynb", "phase4_reductions.ipynb"):
        for name, text in solution_sources(notebook).items():
            write_source(name, text)
    device = gpu_name()
    print(f"device: {device}")
    write_results("phase4_reductions", device, reductions() + column_statistics())
    return 0


if __name__ == "__main__":
    sys.exit(main())
