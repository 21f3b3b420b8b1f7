"""Allocation cost of the Phase 5 caching pool (reference pool.py) against raw cudaMalloc/cudaFree
and CuPy's own MemoryPool: median wall time of one malloc + free of the same size, warm.

GPU: ``.venv/bin/python benchmarks/phase5_pool.py``.  Without a GPU, ``--emu-small`` times the pool
over a host allocator (NumPy buffers): the pool's own Python overhead only, labelled as such.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, emulator_name, gpu_name, write_results

sys.path.insert(0, str(ROOT))
from dev.phase5_training_sources import SOURCES, file_text  # noqa: E402

SIZES = (512, 64 * 1024, 1 << 20, 16 << 20)


def load_pool():
    path = Path(tempfile.mkdtemp()) / "pool.py"
    path.write_text(file_text(SOURCES["pool.py"]))
    spec = importlib.util.spec_from_file_location("bench_pool", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_call(fn, repeats: int) -> float:
    """Median seconds of one ``fn()`` over 5 batches of ``repeats`` calls."""
    fn()
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        batches.append((time.perf_counter() - t0) / repeats)
    return statistics.median(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--emu-small", action="store_true", help="no GPU: host allocator, fewer repeats")
    args = parser.parse_args()
    module = load_pool()
    results = []
    if args.emu_small:
        import numpy as np

        buffers: dict[int, object] = {}

        def raw_malloc(size):
            buf = np.empty(size, dtype=np.uint8)
            buffers[id(buf)] = buf
            return id(buf)

        pool = module.CachingPool(raw_malloc, lambda h: buffers.pop(h))
        for size in SIZES[:2]:
            t_raw = per_call(lambda s=size: buffers.pop(raw_malloc(s)), 200)
            t_pool = per_call(lambda s=size: pool.free(pool.malloc(s)), 200)
            results.append({"bytes": size, "raw_host_s": t_raw, "pool_s": t_pool})
        device = emulator_name()
    else:
        import cupy

        rt = cupy.cuda.runtime
        pool = module.CachingPool(rt.malloc, rt.free)
        cupy_pool = cupy.cuda.MemoryPool()
        for size in SIZES:
            def raw(s=size):
                rt.free(rt.malloc(s))  # cudaFree synchronises the device itself

            t_raw = per_call(raw, 50)
            t_pool = per_call(lambda s=size: pool.free(pool.malloc(s)), 2000)
            t_cupy = per_call(lambda s=size: cupy_pool.malloc(s), 2000)  # freed when the pointer dies
            results.append({"bytes": size, "raw_cudaMalloc_cudaFree_s": t_raw, "pool_s": t_pool,
                            "cupy_pool_s": t_cupy, "pool_speedup_vs_raw": t_raw / t_pool})
        pool.release()
        device = gpu_name()
    for r in results:
        print(r)
    write_results("phase5_pool", device, results, emu_small=args.emu_small)


if __name__ == "__main__":
    main()
