"""Phase 5: candidates for the ladder's last rung, compiled and timed in one call (GPU).

The kernels are ``sweep9<...>`` of ``benchmarks/kernels/sgemm_sweep.cu`` (rung 9 of the reference
gemm.cu with knobs: register cap, fragment double buffering, an unchecked path for interior tiles),
appended to the reference gemm.cu. Each candidate is checked against cupy.matmul (odd sizes and
4096^3), then timed at each size with the grader's timing next to cupy.matmul (cuBLAS), which is
timed again between candidates to show the run's spread. Also measured: the host cost of one call
of ``gemm.gemm(variant="best")`` against a bare launch of the same kernel.

Writes ``benchmarks/results/phase5_gemm_sweep-<gpu>.json``. ``--profile NAME`` launches one
candidate (or ``cublas``) twice at 4096^3 and nothing else, for ``ncu``.
``--emu-small`` runs the code path on the emulator (three candidates at 65 x 33 x 70; no timing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
from common import gpu_name, solution_sources, time_gpu, write_results

SWEEP_CU = Path(__file__).resolve().parent / "kernels" / "sgemm_sweep.cu"
# (BM, BN, BK, WM, WN, TA, TB, MINB, FDB, FAST): see sgemm_sweep.cu
BASE = (128, 128, 8, 32, 64, 0, 0)
CANDIDATES = [
    BASE + (2, 0, 0),  # rung 9 as the lab has it
    BASE + (2, 1, 0), BASE + (2, 0, 1), BASE + (2, 1, 1),
    BASE + (1, 0, 0), BASE + (1, 1, 0), BASE + (1, 1, 1),
    (128, 128, 8, 64, 32, 0, 0, 2, 0, 0), (128, 128, 8, 64, 32, 0, 0, 2, 1, 0),
    (128, 128, 8, 64, 32, 0, 0, 1, 1, 0),
    (128, 128, 8, 64, 64, 0, 0, 2, 0, 0), (128, 128, 8, 64, 64, 0, 0, 2, 1, 0),
    (128, 128, 8, 64, 64, 0, 0, 2, 1, 1),
    (128, 256, 8, 64, 64, 0, 0, 1, 0, 0), (128, 256, 8, 64, 64, 0, 0, 1, 1, 0),
    (128, 256, 8, 64, 64, 0, 0, 1, 1, 1),
    (256, 128, 8, 64, 64, 0, 0, 1, 0, 0), (256, 128, 8, 64, 64, 0, 0, 1, 1, 0),
    (256, 128, 8, 64, 64, 0, 0, 1, 1, 1),
    (128, 128, 16, 32, 64, 0, 0, 1, 0, 0), (128, 128, 16, 32, 64, 0, 0, 1, 1, 0),
    (128, 128, 16, 32, 64, 0, 0, 1, 1, 1),
    (64, 128, 8, 32, 64, 0, 0, 2, 0, 0), (64, 128, 8, 32, 64, 0, 0, 2, 1, 0),
    (64, 128, 8, 32, 64, 0, 0, 1, 1, 1),
    # transposed operands (the backward products), base and double-buffered fragments
    (128, 128, 8, 32, 64, 1, 0, 2, 0, 0), (128, 128, 8, 32, 64, 1, 0, 2, 1, 0),
    (128, 128, 8, 32, 64, 0, 1, 2, 0, 0), (128, 128, 8, 32, 64, 0, 1, 2, 1, 0),
    (128, 256, 8, 64, 64, 1, 0, 1, 1, 0), (128, 256, 8, 64, 64, 0, 1, 1, 1, 0),
]
SIZES = [4096, 2048, 1024]
CHECK_SHAPES = [(1, 1, 1), (129, 1, 130), (1000, 33, 7), (1023, 1023, 1023), (4096, 4096, 4096)]


def name_of(c: tuple) -> str:
    return f"sweep9<{', '.join(map(str, c))}>"


def module(candidates: list[tuple]):
    from minitorch import backend

    source = solution_sources("phase5_fast.ipynb")["gemm.cu"] + "\n" + SWEEP_CU.read_text()
    names = tuple(name_of(c) for c in candidates)
    mod = backend.RawModule(source, ("-lineinfo",), names)
    return mod, names


def grid_of(c: tuple, m: int, n: int) -> tuple[tuple, tuple]:
    bm, bn, _, wm, wn = c[:5]
    return ((n + bn - 1) // bn, (m + bm - 1) // bm), ((bm // wm) * (bn // wn) * 32,)


def launch(kernel, c: tuple, a, b, out, m: int, n: int, k: int) -> None:
    grid, block = grid_of(c, m, n)
    kernel(grid, block, (a, b, out, np.int32(m), np.int32(n), np.int32(k)))


def check(xp, kernel, c: tuple, shapes) -> None:
    """The candidate against float64 (small) or cupy.matmul (4096), C poisoned with NaN first."""
    from minitorch import backend

    rng = np.random.default_rng(1)
    ta, tb = c[5], c[6]
    for m, k, n in shapes:
        if m * k * n > 2 ** 31:  # too long for float64 on the host: against cuBLAS
            a = xp.random.RandomState(3).uniform(-1, 1, (k, m) if ta else (m, k), dtype=np.float32)
            b = xp.random.RandomState(4).uniform(-1, 1, (n, k) if tb else (k, n), dtype=np.float32)
            out = xp.full((m, n), np.nan, np.float32)
            launch(kernel, c, a, b, out, m, n, k)
            expected = (a.T if ta else a) @ (b.T if tb else b)
            if not bool(xp.allclose(out, expected, rtol=1e-3, atol=1e-3)):
                raise AssertionError(f"{name_of(c)} differs from cupy.matmul at {m}x{k}x{n}")
            continue
        a = rng.uniform(-1, 1, (k, m) if ta else (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, k) if tb else (k, n)).astype(np.float32)
        out = backend.asarray(np.full((m, n), np.nan, np.float32))
        launch(kernel, c, backend.asarray(a), backend.asarray(b), out, m, n, k)
        got = backend.asnumpy(out).astype(np.float64)
        a64, b64 = (a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64)
        bound = k * 2.0 ** -23 * (np.abs(a64) @ np.abs(b64)) + 1e-30
        if not np.all(np.abs(got - a64 @ b64) <= bound):
            raise AssertionError(f"{name_of(c)} is wrong at {m}x{k}x{n}")


def ladder(gm, mod, cupy) -> list[dict]:
    """Rungs 3 to 9 of the lab (and rung 5 rolled, and held to 128 registers) at 4096^3."""
    size = 4096
    a = cupy.random.RandomState(7).uniform(-1, 1, (size, size), dtype=np.float32)
    b = cupy.random.RandomState(8).uniform(-1, 1, (size, size), dtype=np.float32)
    out = cupy.empty((size, size), np.float32)
    expected = cupy.matmul(a, b)
    flop = 2 * size ** 3
    cublas = flop / time_gpu(partial(cupy.matmul, a, b, out=out)) / 1e9
    args = (a, b, out, np.int32(size), np.int32(size), np.int32(size))
    calls = {v: partial(gm.gemm, a, b, out, v) for v in gm.VARIANTS[1:] + ("best",)}
    for name in ("sweep5_rolled", "sweep5_bounded"):
        calls[name] = partial(mod.get_function(name), (size // 128, size // 128), (256,), args)
    rows = []
    for name, fn in calls.items():
        out.fill(np.nan)
        fn()
        assert bool(cupy.allclose(out, expected, rtol=1e-3, atol=1e-3)), name
        gflops = flop / time_gpu(fn) / 1e9
        rows.append({"kernel": name, "size": size, "gflops": gflops, "cublas_gflops": cublas,
                     "ratio": gflops / cublas, "ladder": True})
        print(f"  ladder {name:<20} {gflops:7.0f} GFLOP/s {gflops / cublas:.3f}", flush=True)
    return rows


def host_overhead(gm, cupy) -> dict:
    """Host microseconds per call: gemm(variant='best'), and launches of the kernel it runs through
    load_kernel (as every launcher of the course), through a loaded Kernel, and bare (CuPy)."""
    from minitorch.kernels import load_kernel

    a, b, out = (cupy.ones((64, 64), np.float32) for _ in range(3))
    variant, config = gm.best(64, 64)
    name = gm.kernel_name(variant, config)
    names = (name,) if "<" in name else None  # a template instantiation, or an extern "C" kernel
    raw = load_kernel("gemm.cu", name, name_expressions=names)._raw
    grid, block = gm.launch_shape(variant, config, 64, 64)
    args = (a, b, out, np.int32(64), np.int32(64), np.int32(64))
    kernel = load_kernel("gemm.cu", name, name_expressions=names)
    calls = {"gemm_best": lambda: gm.gemm(a, b, out), "gemm_rung9": lambda: gm.gemm(
        a, b, out, "double_buffered"), "load_kernel_launch": lambda: load_kernel(
        "gemm.cu", name, name_expressions=names)(grid, block, args),
        "kernel_launch": lambda: kernel(grid, block, args),
        "bare_launch": lambda: raw(grid, block, args)}
    result = {}
    for what, fn in calls.items():
        fn()
        cupy.cuda.runtime.deviceSynchronize()
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(200):
                fn()
            samples.append((time.perf_counter() - start) / 200 * 1e6)
            cupy.cuda.runtime.deviceSynchronize()
        result[what] = statistics.median(samples)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", help="a candidate's name or 'cublas': two launches at 4096^3")
    parser.add_argument("--emu-small", action="store_true", help="the code path on the emulator")
    parser.add_argument("--only", type=int, default=0, help="the first N candidates only")
    args = parser.parse_args()
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-sweep-")
    import minitorch
    from minitorch.kernels import load_module, write_source

    minitorch.set_device("emu" if args.emu_small else "cuda")
    for notebook in ("phase1_memory.ipynb", "phase2_kernels.ipynb", "phase5_fast.ipynb"):
        for name, text in solution_sources(notebook).items():
            write_source(name, text)
    if args.emu_small:
        cands = [CANDIDATES[0], CANDIDATES[3], (128, 128, 8, 32, 64, 1, 1, 2, 1, 1)]
        for c in cands:  # one module each: the emulator adds up the shared memory of a
            mod, (name,) = module([c])  # module's instantiations of one template
            check(None, mod.get_function(name), c, [(65, 33, 70), (1, 1, 1), (128, 32, 256)])
            print(f"{name}: right on the emulator")
        return 0
    import cupy

    cands = CANDIDATES[: args.only or None]
    if args.profile:
        cands = [c for c in cands if name_of(c) == args.profile]
    start = time.perf_counter()
    mod, names = module(cands)
    kernels = {}
    for c, name in zip(cands, names, strict=True):
        try:
            kernels[c] = mod.get_function(name)
        except Exception as exc:  # noqa: BLE001 (reported, the sweep goes on)
            print(f"{name}: did not compile ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
    print(f"compiled {len(kernels)} candidates in {time.perf_counter() - start:.0f} s", flush=True)
    if args.profile:
        size = 4096
        a = cupy.random.RandomState(0).uniform(-1, 1, (size, size), dtype=np.float32)
        b = cupy.random.RandomState(1).uniform(-1, 1, (size, size), dtype=np.float32)
        out = cupy.empty((size, size), np.float32)
        for _ in range(2):
            if args.profile == "cublas":
                cupy.matmul(a, b, out=out)
            else:
                c = cands[0]
                launch(kernels[c], c, a.T.copy() if c[5] else a, b.T.copy() if c[6] else b, out,
                       size, size, size)
        cupy.cuda.runtime.deviceSynchronize()
        return 0
    device = gpu_name()
    print(f"device: {device}", flush=True)
    rows, failed = [], []
    for c, kernel in list(kernels.items()):
        try:
            check(cupy, kernel, c, CHECK_SHAPES)
        except Exception as exc:  # noqa: BLE001
            print(f"{name_of(c)}: {exc}", flush=True)
            failed.append(name_of(c))
            del kernels[c]
    for size in SIZES:
        a = cupy.random.RandomState(size).uniform(-1, 1, (size, size), dtype=np.float32)
        b = cupy.random.RandomState(size + 1).uniform(-1, 1, (size, size), dtype=np.float32)
        at, bt = cupy.ascontiguousarray(a.T), cupy.ascontiguousarray(b.T)
        out = cupy.empty((size, size), np.float32)
        flop = 2 * size ** 3
        cublas_runs = []
        for i, (c, kernel) in enumerate(kernels.items()):
            if i % 6 == 0:
                cublas_runs.append(flop / time_gpu(partial(cupy.matmul, a, b, out=out)) / 1e9)
            ops = (at if c[5] else a, bt if c[6] else b)
            seconds = time_gpu(partial(launch, kernel, c, *ops, out, size, size, size))
            gflops = flop / seconds / 1e9
            rows.append({"kernel": name_of(c), "size": size, "config": list(c), "gflops": gflops,
                         "seconds": seconds, "registers": int(kernel.num_regs)})
        cublas = statistics.median(cublas_runs)
        for r in rows:
            if r["size"] == size:
                r["cublas_gflops"], r["ratio"] = cublas, r["gflops"] / cublas
        spread = f"{min(cublas_runs):.0f}..{max(cublas_runs):.0f}"
        print(f"{size}^3: cuBLAS {cublas:.0f} GFLOP/s (runs {spread})", flush=True)
        for r in sorted((r for r in rows if r["size"] == size), key=lambda r: -r["ratio"]):
            print(f"  {r['kernel']:<52} {r['registers']:3d} regs {r['gflops']:7.0f} "
                  f"{r['ratio']:.3f}", flush=True)
    gm = load_module("gemm.py")
    rows += ladder(gm, mod, cupy)
    overhead = host_overhead(gm, cupy)
    print("host microseconds a call:", {k: round(v, 1) for k, v in overhead.items()}, flush=True)
    write_results("phase5_gemm_sweep", device, rows, failed=failed, host_us_per_call=overhead)
    return 0


if __name__ == "__main__":
    sys.exit(main())
