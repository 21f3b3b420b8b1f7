"""Allocation cost of the Phase 5 caching pool (reference pool.py, from the solution notebook) against raw
cudaMalloc/cudaFree and CuPy's own MemoryPool: median wall time of one malloc + free of the same size, warm.

GPU: ``.venv/bin/python benchmarks/phase5_pool.py``.  Without a GPU, ``--emu-small`` times the pool over the
emulator's raw allocator (``emu.malloc``/``emu.free``: guarded mappings, not a GPU's cudaMalloc), labelled
as such.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

from common import emulator_name, gpu_name, solution_sources, write_results

SIZES = (512, 64 * 1024, 1 << 20, 16 << 20)


def load_pool():
    path = Path(tempfile.mkdtemp()) / "pool.py"
    path.write_text(solution_sources("phase5_fast.ipynb")["pool.py"])
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
        from minitorch import emu

        pool = module.CachingPool(emu.malloc, emu.free)
        for size in SIZES[:3]:
            t_raw = per_call(lambda s=size: emu.free(emu.malloc(s)), 200)
            t_pool = per_call(lambda s=size: pool.free(pool.malloc(s)), 2000)
            results.append({"bytes": size, "raw_emu_malloc_free_s": t_raw, "pool_s": t_pool,
                            "pool_speedup_vs_raw": t_raw / t_pool})
        pool.release()
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
