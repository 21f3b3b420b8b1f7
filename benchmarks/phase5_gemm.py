"""Phase 5 benchmark: the SGEMM ladder of solutions/phase5_fast.ipynb against cuBLAS, in one harness.

In the manner of llm.c's dev/cuda: every rung is first validated (odd sizes, transposed operands,
against float64 on the host and against cupy.matmul), then timed with the grader's own timing (CUDA
events, L2 flushed, median) next to ``cupy.matmul`` (cuBLAS SGEMM, float32) on square matrices from
128 to 4096. Then ``gemm.autotune()`` searches the tiles of rungs 7 and 9 on this GPU, and the rung that
``variant="best"`` then runs is timed again, with and without transposed operands.

Writes ``benchmarks/results/phase5_gemm-<gpu>.json``: one row per (kernel, size) with ``gflops``,
``cublas_gflops`` and their ``ratio``; ``kernel`` is a variant of gemm.py (``naive`` .. ``double_buffered``,
``best``, ``best_At``, ``best_Bt``) or ``cublas``; the tuning winners are under ``"autotune"``.

Usage (on a GPU machine, with its python3): ``python benchmarks/phase5_gemm.py [--no-autotune]``.
About three minutes on an H100 (most of it compiling the autotuning candidates).
``--emu-small`` runs the validation on the emulator at small sizes (no timing).
``--remeasure-tuned 2048`` times only the autotuned ``best`` rows at that size again, with the committed
result's tuning table, and puts them in place in that file (about 30 s).
``python benchmarks/phase5_gemm.py --profile VARIANT SIZE [--config BM,BN,...]`` launches one rung (or
``cublas``) twice and nothing else: the target for Nsight Compute (``ncu --launch-skip 1 --launch-count 1``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from functools import partial

import numpy as np
from common import gpu_name, solution_sources, time_gpu, write_results

SIZES = [128, 256, 512, 1024, 2048, 4096]
SLOW = {"naive": 2048}  # rung 1 is also timed at 4096 (a few seconds), but with fewer repetitions
VALIDATION_SHAPES = [(1, 1, 1), (7, 7, 7), (129, 1, 130), (1000, 33, 7), (7, 33, 1000), (1023, 1023, 1023)]


def load_solution(device: str = "cuda"):
    """gemm.py of the reference solution (with the earlier phases' files) in a temporary workspace."""
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    import minitorch
    from minitorch.kernels import load_module, write_source

    minitorch.set_device(device)
    for notebook in ("phase1_memory.ipynb", "phase2_kernels.ipynb", "phase5_fast.ipynb"):
        for name, text in solution_sources(notebook).items():
            write_source(name, text)
    return load_module("gemm.py")


def validate(gm, shapes=VALIDATION_SHAPES) -> None:
    """Every rung (and both transposed modes of the transposing ones) against float64 on the host."""
    from minitorch import backend

    rng = np.random.default_rng(0)
    for variant in gm.VARIANTS + ("best",):
        modes = [(False, False)] + ([(True, False), (False, True), (True, True)]
                                    if variant in gm.TRANSPOSING + ("best",) else [])
        for m, k, n in shapes:
            for ta, tb in modes:
                a = rng.uniform(-1, 1, (k, m) if ta else (m, k)).astype(np.float32)
                b = rng.uniform(-1, 1, (n, k) if tb else (k, n)).astype(np.float32)
                out = backend.asarray(np.full((m, n), np.nan, np.float32))
                gm.gemm(backend.asarray(a), backend.asarray(b), out, variant, transpose_a=ta,
                        transpose_b=tb)
                a64, b64 = (a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64)
                bound = k * 2.0 ** -23 * (np.abs(a64) @ np.abs(b64))
                error = np.abs(backend.asnumpy(out) - a64 @ b64)
                assert np.all(error <= bound), f"{variant} is wrong at {m}x{k}x{n} (ta={ta}, tb={tb})"
    print("validation: every rung right at", ", ".join(f"{m}x{k}x{n}" for m, k, n in shapes))


def square(size: int, seed: int):
    import cupy

    a = cupy.random.RandomState(seed).uniform(-1, 1, (size, size), dtype=np.float32)
    b = cupy.random.RandomState(seed + 1).uniform(-1, 1, (size, size), dtype=np.float32)
    return a, b, cupy.empty((size, size), np.float32)


def row(kernel: str, size: int, seconds: float, cublas: float, **extra) -> dict:
    gflops = 2 * size ** 3 / seconds / 1e9
    return {"kernel": kernel, "size": size, "seconds": seconds, "gflops": gflops, "cublas_gflops": cublas,
            "ratio": gflops / cublas, **extra}


def launcher(gm, variant: str, a, b, out):
    """A call of gemm.gemm computing a @ b into out; best_At / best_Bt pass that operand transposed."""
    import cupy

    if not variant.startswith("best_"):
        return lambda: gm.gemm(a, b, out, variant)
    ta, tb = variant == "best_At", variant == "best_Bt"
    a_arg = cupy.ascontiguousarray(a.T) if ta else a
    b_arg = cupy.ascontiguousarray(b.T) if tb else b
    return lambda: gm.gemm(a_arg, b_arg, out, "best", transpose_a=ta, transpose_b=tb)


def ladder(gm, variants: tuple, label: str = "", sizes: tuple = tuple(SIZES)) -> list[dict]:
    """Each variant and cuBLAS at every size of ``sizes`` (rung 1 with few repetitions past SLOW)."""
    import cupy

    rows = []
    for size in sizes:
        a, b, out = square(size, size)
        expected = cupy.matmul(a, b)
        cublas = 2 * size ** 3 / time_gpu(partial(cupy.matmul, a, b, out=out)) / 1e9
        rows.append(row("cublas", size, 2 * size ** 3 / cublas / 1e9, cublas))
        for variant in variants:
            fn = launcher(gm, variant, a, b, out)
            out.fill(np.nan)
            fn()
            assert bool(cupy.allclose(out, expected, rtol=1e-3, atol=1e-3)), f"{variant} differs at {size}"
            slow = size > SLOW.get(variant, size)
            seconds = time_gpu(fn, max_seconds=0.5) if not slow else _few(fn)
            rows.append(row(variant, size, seconds, cublas, tiles=_tiles(gm, variant, size)))
        line = "  ".join(f"{r['kernel'][:6]} {r['ratio']:.2f}" for r in rows[-len(variants):])
        print(f"{label}{size:5d}^3: cuBLAS {cublas:7.0f} GFLOP/s | {line}", flush=True)
    return rows


def _few(fn) -> float:
    from grader.checks import time_cuda

    return time_cuda(fn, warmup=1, min_reps=3, max_reps=3)


def _tiles(gm, variant: str, size: int) -> str:
    """The kernel (with template arguments) that the variant ran at this size."""
    if variant.startswith("best"):
        chosen, config = gm.best(size, size, variant != "best")
        ta, tb = variant == "best_At", variant == "best_Bt"
        return gm.kernel_name(chosen, config, ta, tb)
    return gm.kernel_name(variant)


def profile(gm, variant: str, size: int, config: tuple | None) -> None:
    """Two launches of a rung (or of cuBLAS): the target for ncu --launch-skip 1 --launch-count 1."""
    import cupy

    a, b, out = square(size, 0)
    for _ in range(2):
        if variant == "cublas":
            cupy.matmul(a, b, out=out)
        else:
            gm.gemm(a, b, out, variant, config=config)
    cupy.cuda.runtime.deviceSynchronize()


TUNED = ("best", "best_At", "best_Bt")


def remeasure_tuned(gm, sizes: tuple, path) -> dict:
    """Time ``variant="best"`` (and with A or B transposed) again at ``sizes`` with the autotuning table of the
    committed result ``path`` (same GPU), and put the new rows in place of its ``*_tuned`` rows at those sizes,
    each marked ``remeasured`` with today's date; the rest of the file is unchanged. For a point measured before
    ``best()`` changed its choice (the figure marks such points stale), without the three minutes of a whole run."""
    import datetime
    import json

    from common import software

    from minitorch.kernels import workspace_dir

    doc = json.loads(path.read_text())
    if doc["device"] != gpu_name():
        raise SystemExit(f"{path.name} was measured on {doc['device']}, this GPU is {gpu_name()}")
    table = {size: {k: v for k, v in entry.items() if k != "kernel"} for size, entry in doc["autotune"].items()}
    (workspace_dir() / gm.TUNING_FILE).write_text(json.dumps({gm.device_name(): table}))
    today = datetime.date.today().isoformat()
    fresh = [r for r in ladder(gm, TUNED, label="tuned ", sizes=sizes) if r["kernel"] != "cublas"]
    for r in fresh:
        r["kernel"] += "_tuned"
        r["remeasured"] = today
    replaced = {(r["kernel"], r["size"]) for r in fresh}
    doc["results"] = [r for r in doc["results"] if (r["kernel"], r["size"]) not in replaced] + fresh
    doc.setdefault("remeasured", []).append({"date": today, "sizes": list(sizes), "kernels": sorted({k for k, _ in replaced}),
                                             "software": software()})
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"rewrote {path.name}: " + ", ".join(f"{r['kernel']} {r['size']}^3 {r['ratio']:.3f} ({r['tiles']})"
                                               for r in fresh), flush=True)
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-autotune", action="store_true", help="skip gemm.autotune() (about two minutes)")
    parser.add_argument("--profile", nargs=2, metavar=("VARIANT", "SIZE"),
                        help="launch one rung (or cublas) twice at SIZE^3 and stop: a target for ncu")
    parser.add_argument("--config", help="tiles of a templated rung for --profile, e.g. 128,256,8,64,64")
    parser.add_argument("--emu-small", action="store_true",
                        help="the validation on the emulator at small sizes (no timing, no file)")
    parser.add_argument("--remeasure-tuned", type=int, nargs="+", metavar="SIZE",
                        help="time only the autotuned best (plain, A and B transposed) at these sizes, with the "
                             "tuning table of the committed result, and replace those rows in it (about 30 s)")
    args = parser.parse_args()
    if args.emu_small:
        validate(load_solution("emu"), [(1, 1, 1), (7, 7, 7), (129, 1, 130), (65, 33, 70)])
        return 0
    gm = load_solution()
    if args.profile:
        config = tuple(int(v) for v in args.config.split(",")) if args.config else None
        profile(gm, args.profile[0], int(args.profile[1]), config)
        return 0
    device = gpu_name()
    print(f"device: {device}", flush=True)
    if args.remeasure_tuned:
        from common import RESULTS, slug

        remeasure_tuned(gm, tuple(args.remeasure_tuned), RESULTS / f"phase5_gemm-{slug(device)}.json")
        return 0
    validate(gm)
    results = ladder(gm, gm.VARIANTS + ("best",))
    tuned = None
    if not args.no_autotune:
        start = time.perf_counter()
        tuned = gm.autotune(sizes=(1024, 4096), verbose=False)
        seconds = time.perf_counter() - start
        for size, entry in tuned.items():
            entry["kernel"] = gm.kernel_name(entry["variant"], entry["config"])
            print(f"autotune {size}^3: {entry['kernel']} {entry['gflops']:.0f} GFLOP/s "
                  f"({entry['gflops'] / entry['cublas_gflops']:.2f} x cuBLAS)", flush=True)
        print(f"autotune took {seconds:.0f} s", flush=True)
        tuned_rows = ladder(gm, TUNED, label="tuned ")
        for r in tuned_rows:
            if r["kernel"] != "cublas":
                r["kernel"] += "_tuned"
        results += [r for r in tuned_rows if r["kernel"] != "cublas"]
    import cupy
    from phase5_gemm_sweep import host_overhead

    overhead = host_overhead(gm, cupy)
    print("host microseconds a call:", {k: round(v, 1) for k, v in overhead.items()}, flush=True)
    write_results("phase5_gemm", device, results, autotune=tuned, host_us_per_call=overhead)
    return 0


if __name__ == "__main__":
    sys.exit(main())
