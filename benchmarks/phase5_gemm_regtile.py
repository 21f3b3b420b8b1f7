"""Rung 10 (sgemm_10_regtile) against rung 9 as variant="best" ran it before rung 10 (the tiles of DEFAULT_TILES,
split-K by split_k()) on the products of the Phase 7 GPT lab and of MNIST's two linear layers, forward and
backward (dX = dY·Wᵀ: B transposed; dW = Xᵀ·dY: A transposed).

Runs the reference solutions' gemm.py in a temporary workspace. On the emulator (the default without a GPU) each
product is timed with the CPU time of this thread, one worker, the best of 3 runs after three runs and the
emulator's compiles for their integer arguments (what a training loop's steps run: emu_speed.py's
_specialize_now); on a GPU with the grader's CUDA-event timing (L2 flushed), where rung 10 is not what best()
runs. ``--gpt-steps N`` (emulator only) also times N steps of the GPT lab's full training step (emu_speed.py's
``gpt_row``: captured, replayed), with best() as before (rung 9, split-K) and as now (rung 10), and where each
step's CPU time goes, by kernel. Writes ``benchmarks/results/phase5_gemm_regtile-<device>.json`` (``--out`` for
another directory) with the date, the machine and its load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from common import emu_cpu_seconds, emulator_name, gpu_name, solution_sources, time_gpu, write_results

# name: (M, N, K, transpose_a, transpose_b). The GPT lab: B·T = 64·64 = 4096 rows, d_model 64, the attention's
# q, k, v projection (64 -> 192) and output projection (64 -> 64), the MLP (64 -> 256 -> 64) and the head onto a
# vocabulary of 65 characters. MNIST: batch 64, 784 -> 64 -> 10.
LAYERS = {"gpt-qkv": (4096, 64, 192), "gpt-proj": (4096, 64, 64), "gpt-fc1": (4096, 64, 256),
          "gpt-fc2": (4096, 256, 64), "gpt-head": (4096, 64, 65), "mnist-fc1": (64, 784, 64),
          "mnist-fc2": (64, 64, 10)}
EMU_LABS = ("phase1_memory", "phase2_kernels", "phase3a_forward", "phase3b_backward", "phase4_reductions",
            "phase5_fast", "phase6_cnn", "phase7_gpt")


def products() -> dict[str, tuple[int, int, int, bool, bool]]:
    """Each layer's three products, (M, N, K, transpose_a, transpose_b), for x (rows, d_in) @ W (d_in, d_out)."""
    out = {}
    for layer, (rows, d_in, d_out) in LAYERS.items():
        out[f"{layer}-forward"] = (rows, d_out, d_in, False, False)
        out[f"{layer}-dx"] = (rows, d_in, d_out, False, True)
        out[f"{layer}-dw"] = (d_in, d_out, rows, True, False)
    return out


def rung9_before(gm, m: int, n: int, k: int, ta: bool, tb: bool) -> dict:
    """gemm()'s arguments for what variant="best" ran before rung 10 (on the emulator as on a GPU, untuned)."""
    config = gm.default_config(m, n)
    return {"variant": "double_buffered", "config": config, "splits": gm.split_k(m, n, k, config, ta, tb)}


def time_products(gm, on_gpu: bool) -> list[dict]:
    from minitorch import backend

    rng = np.random.default_rng(0)
    rows = []
    for name, (m, n, k, ta, tb) in products().items():
        a_host = rng.uniform(-1, 1, (k, m) if ta else (m, k)).astype(np.float32)
        b_host = rng.uniform(-1, 1, (n, k) if tb else (k, n)).astype(np.float32)
        a, b, out = backend.asarray(a_host), backend.asarray(b_host), backend.empty((m, n))
        expected = (a_host.T if ta else a_host).astype(np.float64) @ (b_host.T if tb else b_host)
        before = rung9_before(gm, m, n, k, ta, tb)
        calls = {"double_buffered": partial(gm.gemm, a, b, out, transpose_a=ta, transpose_b=tb, **before),
                 "regtile": partial(gm.gemm, a, b, out, "regtile", transpose_a=ta, transpose_b=tb)}
        seconds = {}
        for variant, call in calls.items():
            call()
            error = float(np.abs(backend.asnumpy(out) - expected).max())
            sums = np.abs(a_host.T if ta else a_host) @ np.abs(b_host.T if tb else b_host)
            bound = k * 2.0**-23 * float(sums.max())
            if not error <= bound:
                raise AssertionError(f"{variant} is wrong on {name}: max error {error:.3g} > {bound:.3g}")
            seconds[variant] = time_gpu(call) if on_gpu else emu_cpu_seconds(call)
        row = {"name": name, "M": m, "N": n, "K": k, "transpose_a": ta, "transpose_b": tb,
               "rung9_config": list(before["config"]), "rung9_splits": before["splits"], "seconds": seconds,
               "gflops": {v: 2 * m * n * k / s / 1e9 for v, s in seconds.items()},
               "speedup": seconds["double_buffered"] / seconds["regtile"], "load_average": os.getloadavg()[0]}
        print(f"{name:>18} {m}x{n}x{k} ta={int(ta)} tb={int(tb)}: rung 9 {row['gflops']['double_buffered']:7.2f}"
              f"  rung 10 {row['gflops']['regtile']:7.2f} GFLOP/s  ({row['speedup']:.1f}x)", flush=True)
        rows.append(row)
    return rows


def gpt_steps(steps: int, workers: int) -> list[dict]:
    """The GPT lab's training step with best() as before rung 10 (rung 9, split-K) and as now (rung 10)."""
    from minitorch import emu, plans
    from minitorch.kernels import load_module

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from emu_speed import GPT_FULL, gpt_row

    gm = load_module("gemm.py")
    emulator_rule = gm.best
    rows = []
    for label, rule in (("rung 9 (before)", lambda m, n, transposed: ("double_buffered", gm.default_config(m, n))),
                        ("rung 10", emulator_rule)):
        gm.best = rule
        plans.clear()  # the launch plans recorded with the other rule
        with emu.workers(workers):
            load = os.getloadavg()[0]
            row = gpt_row(workers, steps, "lab (full)", GPT_FULL)
        gemm = [e for e in row.get("kernels", []) if e["kernel"].startswith("sgemm")]
        row.update(kind="gpt step", gemm=label, load_average_before=load)
        if gemm:
            row["gemm_cpu_seconds"] = sum(e["cpu_seconds"] for e in gemm)
            row["kernels_cpu_seconds"] = sum(e["cpu_seconds"] for e in row["kernels"])
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k != "kernels"}, flush=True)
        rows.append(row)
    gm.best = emulator_rule
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results)")
    parser.add_argument("--gpt-steps", type=int, default=0, help="GPT training steps timed (emulator; default 0)")
    parser.add_argument("--workers", default="1", help="emulator workers for the GPT steps (default 1)")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ["MINITORCH_PHASE"] = "phase7"
    from minitorch import backend, emu
    from minitorch.kernels import load_module, write_source

    on_gpu = backend.get_device() == "cuda"
    for lab in EMU_LABS if args.gpt_steps and not on_gpu else ("phase1_memory", "phase5_fast"):
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    gm = load_module("gemm.py")
    load_before = os.getloadavg()
    if on_gpu:
        rows = time_products(gm, on_gpu)
    else:
        with emu.workers(1):
            rows = time_products(gm, on_gpu)
    if args.gpt_steps and not on_gpu:
        for workers in (int(w) for w in args.workers.split(",")):
            rows += gpt_steps(args.gpt_steps, workers)
    import common

    if args.out:
        common.RESULTS = Path(args.out)
    timing = ("CUDA events, the grader's median, L2 flushed" if on_gpu else
              "CPU time of this thread, 1 worker, the best of 3 runs of specialised code")
    write_results("phase5_gemm_regtile", gpu_name() if on_gpu else emulator_name(), rows,
                  load_average_before=list(load_before), load_average_after=list(os.getloadavg()),
                  notes=[f"seconds: {timing}; 'double_buffered' is rung 9 as variant='best' ran it before rung 10 "
                         "(DEFAULT_TILES, split_k()), 'regtile' rung 10",
                         "gpt step rows (emulator): emu_speed.py's gpt_row with best() as before (rung 9) and as "
                         "now (rung 10); gemm_cpu_seconds sums the sgemm kernels of kernels (one replay of the "
                         "step's launches)"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
